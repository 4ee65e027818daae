package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
)

// The mixed workload: an opaque byte stream of tensors that looks like
// federated-learning traffic. Sizes are in bytes.
const (
	mixedMinTensor = 128 << 10 // tensor sizes are uniform in [mixedMinTensor, mixedMaxTensor]
	mixedMaxTensor = 2 << 20
	mixedMinWrite  = 64 << 10 // application Writes are log-uniform in [mixedMinWrite, mixedMaxWrite]
	mixedMaxWrite  = 4 << 20

	imageBytes = 28 * 28 // one Fashion-MNIST image, uint8
)

// mixedKinds are the tensor kinds of the mixed workload with their shares
// of its bytes.
var mixedKinds = []struct {
	name  string
	share float64
}{
	{"weights", 0.60},   // float32 from N(0, 0.02)
	{"gradients", 0.25}, // float32, 99% exact zeros, the rest from N(0, 0.01)
	{"images", 0.15},    // uint8 Fashion-MNIST training images, consecutive
}

// mixedImagesPath is the IDX file the images come from (Debian's
// dataset-fashion-mnist).
var mixedImagesPath = filepath.Join(fl.DefaultDir, "train-images-idx3-ubyte.gz")

// newMixedWorkload builds the mixed workload from images (28×28 uint8
// images, as readIDXImages returns them): at least pool bytes (plus
// a random part of 256 KiB, so that the pool's period lines up with no
// frame size) of tensors, each kind's bytes its share of the total, cut
// into tensors of sizes drawn uniformly from [128 KiB, 2 MiB] in
// multiples of 4 bytes (images: of whole images; the last tensor of
// each kind takes the rest of its share), in a random order that keeps
// the shares in every prefix (interleave). Everything
// comes from one RNG with a fixed seed: every run sends the same bytes.
// Its chunks are the tensors, subslices of one buffer that also holds a
// copy of the pool's start after its end, so that any Write of at most
// mixedMaxWrite bytes is one slice (sendWrites).
func newMixedWorkload(pool int64, images []byte) (*workload, error) {
	rng := rand.New(rand.NewPCG(11, 12))
	total := (pool+3)&^3 + 4*rng.Int64N(1<<16)
	gradients := int64(float64(total)*mixedKinds[1].share) &^ 3
	imgs := int64(float64(total)*mixedKinds[2].share) / imageBytes * imageBytes
	budgets := []int64{total - gradients - imgs, gradients, imgs}
	sizes := make([][]int64, len(budgets))
	for k, budget := range budgets {
		unit := int64(4)
		if k == 2 {
			unit = imageBytes
		}
		sizes[k] = cutSizes(rng, budget, unit)
		rng.Shuffle(len(sizes[k]), func(i, j int) { sizes[k][i], sizes[k][j] = sizes[k][j], sizes[k][i] })
	}
	pieces := interleave(rng, sizes)

	ring := make([]byte, total+mixedMaxWrite)
	w := &workload{size: total, ring: ring}
	off := int64(0)
	for _, p := range pieces {
		b := ring[off : off+p.size : off+p.size]
		var shape []int64
		switch p.kind {
		case 0:
			for i := 0; i < len(b); i += 4 {
				binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(0.02*rng.NormFloat64())))
			}
			shape = []int64{p.size / 4}
		case 1:
			for i := 0; i < len(b); i += 4 {
				if rng.Float64() < 0.01 {
					binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(0.01*rng.NormFloat64())))
				}
			}
			shape = []int64{p.size / 4}
		case 2:
			n := int(p.size / imageBytes)
			if n > len(images)/imageBytes {
				return nil, fmt.Errorf("link: %d images, a tensor needs %d", len(images)/imageBytes, n)
			}
			first := rng.IntN(len(images)/imageBytes - n + 1)
			copy(b, images[first*imageBytes:])
			shape = []int64{int64(n), 28, 28}
		}
		w.chunks = append(w.chunks, b)
		w.names = append(w.names, mixedKinds[p.kind].name)
		w.shapes = append(w.shapes, shape)
		off += p.size
	}
	for i := total; i < int64(len(ring)); i += total {
		copy(ring[i:], ring[:total])
	}
	return w, nil
}

// piece is a tensor of the mixed workload: its kind (an index of
// mixedKinds) and size.
type piece struct {
	kind int
	size int64
}

// interleave orders the tensors of sizes (one list per kind, each in
// the order to keep) at random, each next tensor's kind drawn with
// weights that keep the share of every kind in every prefix of the
// stream near its target: a kind's weight is what it lacks of its share
// of the bytes placed plus a largest tensor (never negative). A short
// transfer, which sends only the pool's first tensors, sees the same mix
// as a long one.
func interleave(rng *rand.Rand, sizes [][]int64) []piece {
	var out []piece
	placed := make([]int64, len(sizes))
	var total int64
	for {
		w := make([]float64, len(sizes))
		var sum float64
		for k := range sizes {
			if len(sizes[k]) > 0 {
				w[k] = max(mixedKinds[k].share*float64(total+mixedMaxTensor)-float64(placed[k]), 0)
				sum += w[k]
			}
		}
		if sum == 0 {
			for k := range sizes { // only kinds ahead of their share are left
				if len(sizes[k]) > 0 {
					w[k] = mixedKinds[k].share
					sum += w[k]
				}
			}
			if sum == 0 {
				return out
			}
		}
		x := rng.Float64() * sum
		k := 0
		for k < len(sizes)-1 && (x >= w[k] || len(sizes[k]) == 0) {
			x -= w[k]
			k++
		}
		for len(sizes[k]) == 0 { // x rounded up to sum
			k--
		}
		out = append(out, piece{k, sizes[k][0]})
		placed[k] += sizes[k][0]
		total += sizes[k][0]
		sizes[k] = sizes[k][1:]
	}
}

// cutSizes cuts budget bytes into sizes uniform in [mixedMinTensor,
// mixedMaxTensor], multiples of unit; the last one is the rest, which
// stays in that range (a budget under mixedMinTensor is one size).
func cutSizes(rng *rand.Rand, budget, unit int64) []int64 {
	var out []int64
	for rem := budget; rem > 0; {
		s := rem
		if rem > mixedMaxTensor {
			s = (mixedMinTensor + 4*rng.Int64N((mixedMaxTensor-mixedMinTensor)/4+1)) / unit * unit
			if s < mixedMinTensor {
				s += unit
			}
			if rem-s < mixedMinTensor {
				s = (rem - mixedMinTensor) / unit * unit
			}
		}
		out = append(out, s)
		rem -= s
	}
	return out
}

// writeSizes returns the sizes of the application Writes of the mixed
// workload, log-uniform in [mixedMinWrite, mixedMaxWrite], from an RNG
// with a fixed seed: every transfer makes the same Writes.
func writeSizes() func() int64 {
	rng := rand.New(rand.NewPCG(21, 22))
	lo, hi := math.Log(mixedMinWrite), math.Log(mixedMaxWrite)
	return func() int64 {
		return min(int64(math.Exp(lo+(hi-lo)*rng.Float64())), mixedMaxWrite)
	}
}

// sendWrites writes n bytes of the pool in ring, from its start, to w in
// Writes of writeSizes, or fewer when stop, checked before each Write,
// reports true. It returns the bytes written.
func (wl *workload) sendWrites(w io.Writer, n int64, stop func() bool) (int64, error) {
	next := writeSizes()
	var sent int64
	for sent < n && !stop() {
		k := min(next(), n-sent)
		off := sent % wl.size
		if _, err := w.Write(wl.ring[off : off+k]); err != nil {
			return sent, err
		}
		sent += k
	}
	return sent, nil
}

// readIDXImages returns the pixels of an IDX file of 28×28 uint8 images
// (gunzipped when its name ends in .gz).
func readIDXImages(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("link: --workload mixed needs the Fashion-MNIST images: %s not found (install the Debian package dataset-fashion-mnist: apt-get install dataset-fashion-mnist; make test installs it)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReaderSize(f, 1<<16)
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("link: %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	// Header: magic 0x00000803 (unsigned bytes, 3 dimensions), then the
	// number of images, rows and columns, big-endian uint32s.
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("link: %s: IDX header: %w", path, err)
	}
	magic, n := binary.BigEndian.Uint32(hdr[0:]), binary.BigEndian.Uint32(hdr[4:])
	rows, cols := binary.BigEndian.Uint32(hdr[8:]), binary.BigEndian.Uint32(hdr[12:])
	if magic != 0x00000803 || rows != 28 || cols != 28 || n == 0 || n > 1<<20 {
		return nil, fmt.Errorf("link: %s: not an IDX file of 28×28 uint8 images (magic %#08x, %d×%d×%d)", path, magic, n, rows, cols)
	}
	pix := make([]byte, int(n)*imageBytes)
	if _, err := io.ReadFull(r, pix); err != nil {
		return nil, fmt.Errorf("link: %s: IDX data: %w", path, err)
	}
	return pix, nil
}
