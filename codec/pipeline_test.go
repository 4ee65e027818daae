package codec

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

// mixedStream writes a stream with chunked tensors under several recipes,
// whole tensors, a tensors frame, a control frame and byte data, and
// returns it with the tensors in order.
func mixedStream(t *testing.T) ([]byte, []*Tensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WithChunkSize(4096), WithEncoderConcurrency(3))
	if err != nil {
		t.Fatal(err)
	}
	var want []*Tensor
	recipes := []string{"", "xor(3)", "halve | data.lo:xor(1),zeros", "*:zeros"}
	for i, n := range []int{1, 1000, 4096, 4097, 50000, 3, 123457} {
		data := make([]byte, n)
		for j := range data {
			if rng.IntN(3) == 0 {
				data[j] = byte(rng.Uint32())
			}
		}
		x := &Tensor{Name: "t" + string(rune('a'+i)), DType: U8, Shape: []int64{int64(n)}, Data: data}
		w.cfg.recipe = nil
		if rs := recipes[i%len(recipes)]; rs != "" {
			w.cfg.recipe = MustParseRecipe(rs)
		}
		if err := w.WriteTensor(x); err != nil {
			t.Fatal(err)
		}
		want = append(want, x)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s := buf.Bytes()
	// A tensors frame and a control frame after the end: a second stream
	// without a hello.
	enc := mustEncoder()
	a := &Tensor{Name: "small.a", DType: U8, Shape: []int64{3}, Data: []byte{1, 2, 3}}
	b := &Tensor{Name: "small.b", DType: U8, Shape: []int64{2}, Data: []byte{4, 5}}
	s, err = enc.AppendTensors(s, []*Tensor{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s = AppendControl(s, 1024, []byte("app"))
	c := &Tensor{Name: "last", DType: U8, Shape: []int64{5000}, Offset: 0, Data: bytes.Repeat([]byte{9}, 3000)}
	s, _ = enc.AppendTensor(s, c, MustParseRecipe("xor(7)"))
	c2 := &Tensor{Name: "last", DType: U8, Shape: []int64{5000}, Offset: 3000, Data: bytes.Repeat([]byte{8}, 2000)}
	s, _ = enc.AppendTensor(s, c2, nil)
	want = append(want, a, b, &Tensor{Name: "last", DType: U8, Shape: []int64{5000}, Data: append(bytes.Repeat([]byte{9}, 3000), bytes.Repeat([]byte{8}, 2000)...)})
	return s, want
}

func readAllTensors(s []byte, workers int) ([]*Tensor, error) {
	r, err := NewReader(bytes.NewReader(s), WithDecoderConcurrency(workers))
	if err != nil {
		return nil, err
	}
	var got []*Tensor
	for {
		x, err := r.ReadTensor()
		if err == io.EOF {
			if len(got) > 0 && got[len(got)-1].Name == "last" {
				return got, nil
			}
			continue // the end of the first stream
		}
		if err != nil {
			return got, err
		}
		got = append(got, x)
	}
}

func TestReaderConcurrencyReadTensor(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, want := mixedStream(t)
	for _, workers := range []int{1, 2, 3, 8} {
		got, err := readAllTensors(s, workers)
		if err != nil {
			t.Fatalf("%d workers: %v", workers, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d workers: %d tensors, want %d", workers, len(got), len(want))
		}
		for i := range want {
			if got[i].Name != want[i].Name || !bytes.Equal(got[i].Data, want[i].Data) || got[i].Offset != 0 {
				t.Fatalf("%d workers: tensor %d (%q) differs", workers, i, want[i].Name)
			}
		}
	}
}

func TestReaderConcurrencyNext(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := mixedStream(t)
	frames := func(workers int) ([]string, error) {
		r, err := NewReader(bytes.NewReader(s), WithDecoderConcurrency(workers))
		if err != nil {
			return nil, err
		}
		var out []string
		for {
			f, err := r.Next()
			if err == io.EOF {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			d := f.Header.Type.String() + string(f.Control) + string(f.Bytes)
			for _, x := range f.Tensors {
				d += x.Name + string(x.Data)
			}
			out = append(out, d)
		}
	}
	ref, err := frames(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{2, 4, 16} {
		got, err := frames(workers)
		if err != nil || !slices.Equal(got, ref) {
			t.Fatalf("%d workers: %d frames (%v), want %d", workers, len(got), err, len(ref))
		}
	}
	// Next, then ReadTensor over frames read ahead.
	for _, workers := range []int{1, 3} {
		r, err := NewReader(bytes.NewReader(s), WithDecoderConcurrency(workers))
		if err != nil {
			t.Fatal(err)
		}
		for range 4 { // hello, and the first three tensors (a frame each)
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}
		x, err := r.ReadTensor()
		if err != nil {
			t.Fatalf("%d workers: ReadTensor after Next: %v", workers, err)
		}
		if x.Name != "td" || len(x.Data) != 4097 {
			t.Fatalf("%d workers: ReadTensor after Next gave %q", workers, x.Name)
		}
	}
}

// TestReaderConcurrencyErrors damages frames and checks that every worker
// count reports the same error at the same offset, and nothing of a
// broken tensor is returned.
func TestReaderConcurrencyErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _ := mixedStream(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 60 {
		bad := slices.Clone(s)
		switch rng.IntN(3) {
		case 0:
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		case 1:
			bad = bad[:rng.IntN(len(bad))]
		default:
			i := rng.IntN(len(bad))
			j := min(len(bad), i+1+rng.IntN(5000))
			bad = append(bad[:i:i], bad[j:]...)
		}
		var ref []string
		for _, workers := range []int{1, 2, 5} {
			got, err := readAllTensors(bad, workers)
			desc := []string{}
			for _, x := range got {
				desc = append(desc, x.Name)
			}
			var ce *CorruptError
			if errors.As(err, &ce) {
				desc = append(desc, "error at", string(rune(ce.Offset)))
			} else if err != nil {
				desc = append(desc, err.Error())
			}
			if workers == 1 {
				ref = desc
				continue
			}
			if !slices.Equal(desc, ref) {
				t.Fatalf("%d workers: %q, 1 worker: %q", workers, desc, ref)
			}
		}
	}
}

// FuzzReaderConcurrency checks that a Reader with workers returns the same
// tensors and the same error (kind and offset) as one without, on any
// input.
func FuzzReaderConcurrency(f *testing.F) {
	fuzzSeeds(f)
	lim := WithLimits(Limits{MaxDecodedSize: 1 << 20, MaxFrameSize: 1 << 20, MaxTensorSize: 1 << 24})
	f.Fuzz(func(t *testing.T, in []byte) {
		run := func(workers int) []string {
			r, err := NewReader(bytes.NewReader(in), lim, WithDecoderConcurrency(workers))
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for range 1000 {
				x, err := r.ReadTensor()
				if err == io.EOF {
					out = append(out, "EOF")
					continue
				}
				if err != nil {
					var ce *CorruptError
					if errors.As(err, &ce) {
						out = append(out, "error at "+string(rune(ce.Offset)))
					}
					return append(out, err.Error())
				}
				out = append(out, x.Name+string(x.Data))
			}
			return out
		}
		if a, b := run(1), run(3); !slices.Equal(a, b) {
			t.Fatalf("1 worker: %q\n3 workers: %q", a, b)
		}
	})
}

// TestNextJoined interleaves control frames with the chunks of a tensor:
// they come back as they are read, and the tensor whole after its last
// chunk, at every worker count.
func TestNextJoined(t *testing.T) {
	defer goleak.VerifyNone(t)
	enc := mustEncoder()
	data := make([]byte, 10000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var s []byte
	for i, off := 0, 0; off < len(data); i, off = i+1, off+3000 {
		end := min(off+3000, len(data))
		c := &Tensor{Name: "w", DType: U8, Shape: []int64{int64(len(data))}, Offset: int64(off), Data: data[off:end]}
		var err error
		if s, err = enc.AppendTensor(s, c, MustParseRecipe("xor(9)")); err != nil {
			t.Fatal(err)
		}
		s = AppendControl(s, 1024+uint64(i), nil)
	}
	s, _ = enc.AppendBytes(s, []byte("after"), nil)
	for _, workers := range []int{1, 2, 4} {
		r, err := NewReader(bytes.NewReader(s), WithDecoderConcurrency(workers))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			f, err := r.NextJoined(nil)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%d workers: %v", workers, err)
			}
			switch f.Header.Type {
			case FrameControl:
				got = append(got, "control")
			case FrameTensor:
				if !bytes.Equal(f.Tensors[0].Data, data) || !f.Tensors[0].IsWhole() {
					t.Fatalf("%d workers: joined tensor differs", workers)
				}
				got = append(got, "tensor")
			case FrameBytes:
				got = append(got, string(f.Bytes))
			}
		}
		want := []string{"control", "control", "control", "tensor", "control", "after"}
		if !slices.Equal(got, want) {
			t.Fatalf("%d workers: %q, want %q", workers, got, want)
		}
	}
}

// TestTensorBuffers reuses one buffer for the tensors ReadTensor joins.
func TestTensorBuffers(t *testing.T) {
	s, want := mixedStream(t)
	var buf []byte
	calls := 0
	alloc := func(n int) []byte {
		calls++
		if cap(buf) < n {
			buf = AlignedBytes(n)
		}
		return buf[:n]
	}
	for _, workers := range []int{1, 3} {
		r, err := NewReader(bytes.NewReader(s), WithDecoderConcurrency(workers), WithTensorBuffers(alloc))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			x, err := r.ReadTensor()
			for err == io.EOF {
				x, err = r.ReadTensor()
			}
			if err != nil || !bytes.Equal(x.Data, w.Data) {
				t.Fatalf("%d workers: %q: %v", workers, w.Name, err)
			}
		}
	}
	if calls == 0 {
		t.Fatal("the buffer function was not used")
	}
	if _, err := NewDecoder(WithTensorBuffers(alloc)); err == nil {
		t.Fatal("NewDecoder took a Reader-only option")
	}
	if _, err := NewReader(bytes.NewReader(s), WithTensorBuffers(nil)); err == nil {
		t.Fatal("nil buffer function accepted")
	}
}

// TestReaderReset reads several streams, some broken, with one Reader.
func TestReaderReset(t *testing.T) {
	s, want := mixedStream(t)
	for _, workers := range []int{1, 3} {
		r, err := NewReader(bytes.NewReader(s[:len(s)/2]), WithDecoderConcurrency(workers))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readAllFrom(r); err == nil {
			t.Fatalf("%d workers: half a stream read without error", workers)
		}
		for range 2 {
			r.Reset(bytes.NewReader(s))
			got, err := readAllFrom(r)
			if err != nil || len(got) != len(want) {
				t.Fatalf("%d workers after Reset: %d tensors, %v", workers, len(got), err)
			}
			for i := range want {
				if !bytes.Equal(got[i].Data, want[i].Data) {
					t.Fatalf("%d workers after Reset: tensor %d differs", workers, i)
				}
			}
		}
	}
}

func readAllFrom(r *Reader) ([]*Tensor, error) {
	var got []*Tensor
	for eofs := 0; ; {
		x, err := r.ReadTensor()
		if err == io.EOF {
			if len(got) > 0 && got[len(got)-1].Name == "last" {
				return got, nil
			}
			if eofs++; eofs > 1 {
				return got, io.ErrUnexpectedEOF // the input ended early
			}
			continue // the end frame of the first stream
		}
		eofs = 0
		if err != nil {
			return got, err
		}
		got = append(got, x)
	}
}
