package main

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/distortion"
)

// chain is a recipe to measure.
type chain struct {
	recipe *codec.Recipe
	text   string                 // recipe.String(): what rows print
	fits   func(codec.DType) bool // nil: any dtype
	tune   *tuneSpec              // the autotuner's row: recipe is nil
}

// bench measures chains on one core, the way a Go benchmark does: each
// timed loop runs the whole input through the encoder (or decoder) until
// at least minTime has passed and at least once, and gives the time per
// pass. Every chain is timed reps times, the chains of an input
// interleaved (rep 1 of every chain, then rep 2, ...), and the median is
// kept.
type bench struct {
	enc     *codec.Encoder
	dec     *codec.Decoder
	chunk   int
	minTime time.Duration
	reps    int
	scratch []byte // encode output of the timed loops, reused
	out     []byte // decode output, reused (like zstd -b's buffers)
}

// trial is one chain on one input.
type trial struct {
	c       *chain
	s       *sample
	tensors []codec.Tensor // chunks of a tensor input, sharing its Shape
	parts   [][]byte       // chunks of a byte stream
	frames  []byte         // the encoded frames, for the decode loops
	nframes int
	enc     []float64 // seconds per pass, one per rep
	dec     []float64
	err     distortion.Stats // lossy chains: how far the decoded values are from the input
	chosen  []string         // autotune rows: the recipe of each frame of the first pass
}

// newTrial cuts s into chunks the way codec.Writer does (whole-tensor and
// block recipes change the cut), encodes it once and checks that the
// frames decode to s.
func (b *bench) newTrial(s *sample, c *chain) (*trial, error) {
	tr := &trial{c: c, s: s}
	if s.dtype == codec.Byte {
		for off := 0; off < len(s.data); off += b.chunk {
			tr.parts = append(tr.parts, s.data[off:min(off+b.chunk, len(s.data))])
		}
	} else {
		esz := s.dtype.Size()
		nel := len(s.data) / esz
		chunkEl := c.recipe.ChunkElements(esz, nel, b.chunk)
		for off := 0; off < nel || off == 0; off += chunkEl {
			n := min(chunkEl, nel-off)
			tr.tensors = append(tr.tensors, codec.Tensor{Name: s.name, DType: s.dtype, Shape: s.shape,
				Offset: int64(off), Data: s.data[off*esz : (off+n)*esz]})
		}
	}
	var err error
	if c.tune != nil {
		tr.frames, tr.chosen, err = tr.encodeTuned(b.enc, nil)
	} else {
		tr.frames, err = tr.encode(b.enc, nil)
	}
	if err != nil {
		return nil, err
	}
	if err := b.verify(tr); err != nil {
		return nil, err
	}
	return tr, nil
}

// encode appends the frames of every chunk to dst.
func (tr *trial) encode(enc *codec.Encoder, dst []byte) ([]byte, error) {
	if tr.c.tune != nil {
		dst, _, err := tr.encodeTuned(enc, dst)
		return dst, err
	}
	var err error
	for i := range tr.tensors {
		if dst, err = enc.AppendTensor(dst, &tr.tensors[i], tr.c.recipe); err != nil {
			return dst, err
		}
	}
	for _, p := range tr.parts {
		if dst, err = enc.AppendBytes(dst, p, tr.c.recipe); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// decode decodes every frame and hands each one's data to check (nil in
// the timed loops). It returns the number of frames.
func (b *bench) decode(tr *trial, check func(i int, f *codec.Frame) error) (int, error) {
	src, i := tr.frames, 0
	for ; len(src) > 0; i++ {
		if need := tr.largestChunk() + 8; cap(b.out) < need {
			b.out = codec.AlignedBytes(need)
		}
		f, n, err := b.dec.DecodeFrameInto(b.out, src)
		if err != nil {
			return i, fmt.Errorf("frame %d at byte %d: %w", i, len(tr.frames)-len(src), err)
		}
		if check != nil {
			if err := check(i, f); err != nil {
				return i, err
			}
		}
		src = src[n:]
	}
	return i, nil
}

// errMismatch marks a round trip that did not give the input back.
var errMismatch = errors.New("MISMATCH: decoded data differs from the input")

func (b *bench) verify(tr *trial) error {
	var got int // bytes checked so far
	check := func(i int, f *codec.Frame) error {
		var data []byte
		var what string
		switch {
		case tr.parts != nil && f.Header.Type == codec.FrameBytes:
			data, what = f.Bytes, "bytes frame"
		case tr.tensors != nil && f.Header.Type == codec.FrameTensor && len(f.Tensors) == 1:
			t, want := f.Tensors[0], &tr.tensors[min(i, len(tr.tensors)-1)]
			if t.Name != want.Name || t.DType != want.DType || t.Offset != want.Offset || !slices.Equal(t.Shape, want.Shape) {
				return fmt.Errorf("%w: frame %d is %q %v %v at element %d, want %q %v %v at element %d", errMismatch,
					i, t.Name, t.DType, t.Shape, t.Offset, want.Name, want.DType, want.Shape, want.Offset)
			}
			data, what = t.Data, "tensor frame"
		default:
			return fmt.Errorf("%w: frame %d is a %v frame", errMismatch, i, f.Header.Type)
		}
		want := tr.s.data[got:min(got+len(data), len(tr.s.data))]
		if tr.c.recipe.Lossy() {
			if len(data) != len(want) {
				return fmt.Errorf("%w: %s %d decoded to %d bytes, want %d", errMismatch, what, i, len(data), len(want))
			}
			if err := tr.err.Add(tr.s.dtype, want, data); err != nil {
				return err
			}
			got += len(data)
			return nil
		}
		if !bytes.Equal(data, want) {
			at := 0
			for at < len(want) && data[at] == want[at] {
				at++
			}
			return fmt.Errorf("%w: %s %d (%d bytes) differs at input byte %d", errMismatch, what, i, len(data), got+at)
		}
		got += len(data)
		return nil
	}
	n, err := b.decode(tr, check)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if got != len(tr.s.data) || n != len(tr.tensors)+len(tr.parts) {
		return fmt.Errorf("%w: %d frames decoded to %d bytes, want %d frames and %d bytes",
			errMismatch, n, got, len(tr.tensors)+len(tr.parts), len(tr.s.data))
	}
	tr.nframes = n
	return nil
}

// measure runs one repetition of the encode and decode loops.
func (b *bench) measure(tr *trial) error {
	sec, err := timeLoop(b.minTime, func() error {
		var err error
		b.scratch, err = tr.encode(b.enc, b.scratch[:0])
		return err
	})
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	tr.enc = append(tr.enc, sec)
	sec, err = timeLoop(b.minTime, func() error {
		_, err := b.decode(tr, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	tr.dec = append(tr.dec, sec)
	return nil
}

// timeLoop calls op until minTime has passed (and at least once) and
// returns the seconds per call. It reads the clock once per batch of calls,
// so that the clock does not count in the time of tiny ops; a batch is
// sized to end 10% past minTime but to last at most minTime/20, which
// bounds the overshoot when the machine is busy and the estimate is off.
func timeLoop(minTime time.Duration, op func() error) (float64, error) {
	var n int
	var el time.Duration
	for batch := 1; ; {
		t0 := time.Now()
		for range batch {
			if err := op(); err != nil {
				return 0, err
			}
		}
		el += time.Since(t0)
		n += batch
		if el >= minTime {
			return el.Seconds() / float64(n), nil
		}
		per := max(el/time.Duration(n), 1)
		left := minTime - el
		batch = max(1, min(int(min(left+left/10, minTime/20)/per), 100*n))
	}
}

// row reports the trial's median figures.
func (tr *trial) row() row {
	in := int64(len(tr.s.data))
	r := row{
		Tensor: tr.s.name, DType: tr.s.dtype.String(), Chain: tr.c.text,
		BytesIn: in, BytesOut: int64(len(tr.frames)), Frames: tr.nframes,
		Ratio:        float64(in) / float64(len(tr.frames)),
		CompressMBps: metric(mbps(in, median(tr.enc))), DecompressMBps: metric(mbps(in, median(tr.dec))),
		Lossy: tr.c.recipe.Lossy(),
	}
	if r.Lossy {
		r.MaxAbsErr, r.RelL2Err = metric(tr.err.MaxAbs), metric(tr.err.RelL2())
	}
	if tr.chosen != nil {
		r.Recipes = map[string]int{}
		for _, c := range tr.chosen {
			r.Recipes[c]++
		}
	}
	return r
}

func mbps(n int64, sec float64) float64 {
	if sec <= 0 {
		return 0
	}
	return float64(n) / sec / 1e6
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// largestChunk is the most bytes one frame of the trial decodes to (block
// and whole-tensor recipes make frames larger than the chunk size).
func (tr *trial) largestChunk() int {
	n := 0
	for i := range tr.tensors {
		n = max(n, len(tr.tensors[i].Data))
	}
	for _, p := range tr.parts {
		n = max(n, len(p))
	}
	return n
}
