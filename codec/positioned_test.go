package codec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// largeStream is a stream of frames whose payloads are past atMin (the
// size from which workers read payloads at their offsets) and below it:
// chunked and whole tensors, bytes frames, control frames.
func largeStream(t *testing.T) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WithChunkSize(100<<10), WithEncoderConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{300 << 10, 1000, atMin, 250<<10 + 3} {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(rng.Uint32() >> uint(j%29))
		}
		if err := w.WriteTensor(&Tensor{Name: fmt.Sprint("t", i), DType: U8, Shape: []int64{int64(n)}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	enc := mustEncoder()
	s := buf.Bytes()
	s = AppendControl(s, 1234, []byte("between"))
	s, _ = enc.AppendBytes(s, bytes.Repeat([]byte("abcdefgh"), 20<<10), nil)
	return s
}

// sources opens s, after a prefix of other bytes that the source has
// been positioned past, as each kind of input: positioned ones (file,
// bytes.Reader, strings.Reader, io.SectionReader) and streams (pipe, a
// plain io.Reader).
func sources(t *testing.T, s []byte) map[string]func() (io.Reader, func()) {
	t.Helper()
	prefix := []byte("not part of the stream")
	whole := append(slices.Clone(prefix), s...)
	path := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	skip := func(r io.Seeker) {
		if _, err := r.Seek(int64(len(prefix)), io.SeekStart); err != nil {
			t.Fatal(err)
		}
	}
	none := func() {}
	return map[string]func() (io.Reader, func()){
		"file": func() (io.Reader, func()) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			skip(f)
			return f, func() { f.Close() }
		},
		"bytes.Reader":   func() (io.Reader, func()) { r := bytes.NewReader(whole); skip(r); return r, none },
		"strings.Reader": func() (io.Reader, func()) { r := strings.NewReader(string(whole)); skip(r); return r, none },
		"SectionReader": func() (io.Reader, func()) {
			return io.NewSectionReader(bytes.NewReader(append([]byte("xx"), whole...)), 2+int64(len(prefix)), int64(len(s))), none
		},
		"pipe": func() (io.Reader, func()) {
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { pw.Write(s); pw.Close(); close(done) }()
			return pr, func() { pr.Close(); <-done } // the writer ends once the reader is closed
		},
		"stream": func() (io.Reader, func()) { return struct{ io.Reader }{bytes.NewReader(s)}, none },
	}
}

// readDesc reads every frame (Next, or ReadTensor with what it skips)
// and describes them, and the error at the end.
func readDesc(src io.Reader, workers int, tensors bool) []string {
	out, _ := readDescStats(src, workers, tensors)
	return out
}

// readDescStats is readDesc with the Reader's counts at the end.
func readDescStats(src io.Reader, workers int, tensors bool) (out []string, stats ReaderStats) {
	r, err := NewReader(src, WithDecoderConcurrency(workers))
	if err != nil {
		return []string{err.Error()}, stats
	}
	defer func() { stats = r.Stats() }()
	for {
		var d string
		if tensors {
			x, err := r.ReadTensor()
			if err == nil {
				d = x.Name + string(x.Data)
			} else if errors.Is(err, ErrCorrupt) && strings.Contains(err.Error(), "bytes frame where a tensor") {
				return append(out, "bytes frame"), stats
			}
			if err != nil {
				return append(out, describeErr(err)), stats
			}
		} else {
			f, err := r.Next()
			if err != nil {
				return append(out, describeErr(err)), stats
			}
			d = f.Header.Type.String() + string(f.Control) + string(f.Bytes)
			for _, x := range f.Tensors {
				d += x.Name + string(x.Data)
			}
		}
		out = append(out, d)
	}
}

func describeErr(err error) string {
	var ce *CorruptError
	if errors.As(err, &ce) {
		return fmt.Sprintf("error at %d: %v", ce.Offset, err)
	}
	return err.Error()
}

// TestReaderPositionedSources: with workers, positioned sources have
// their large payloads read by the workers at their offsets; every source
// gives what one worker over a plain stream gives, whole, cut short or
// damaged (the same frames, the same error at the same offset), and
// never counts in ReaderStats a frame whose payload was cut short.
func TestReaderPositionedSources(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := largeStream(t)
	rng := rand.New(rand.NewPCG(9, 9))
	inputs := [][]byte{s}
	for range 12 {
		bad := slices.Clone(s)
		if rng.IntN(2) == 0 {
			bad = bad[:rng.IntN(len(bad))]
		} else {
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		}
		inputs = append(inputs, bad)
	}
	for name, open := range sources(t, s) {
		src, closeSrc := open()
		r, err := NewReader(src, WithDecoderConcurrency(2))
		if err != nil {
			t.Fatal(err)
		}
		if positioned := name != "pipe" && name != "stream"; (r.at != nil) != positioned {
			t.Errorf("%s: payloads read at their offsets: %v, want %v", name, r.at != nil, positioned)
		}
		closeSrc()
	}
	for i, in := range inputs {
		for _, tensors := range []bool{false, true} {
			want := readDesc(bytes.NewReader(in), 1, tensors)
			if i == 0 && !strings.HasSuffix(want[len(want)-1], "EOF") && want[len(want)-1] != "bytes frame" {
				t.Fatalf("whole stream ends in %q", want[len(want)-1])
			}
			for _, workers := range []int{2, 5} {
				for name, open := range sources(t, in) {
					src, closeSrc := open()
					got, st := readDescStats(src, workers, tensors)
					closeSrc()
					if !slices.Equal(got, want) {
						t.Fatalf("input %d, %s, %d workers, ReadTensor %v: %d results ending %.200q, want %d ending %.200q",
							i, name, workers, tensors, len(got), got[len(got)-1], len(want), want[len(want)-1])
					}
					// The counts include frames read ahead (how many
					// depends on the workers' timing), never a frame cut
					// short.
					if st.WireBytes > uint64(len(in)) {
						t.Fatalf("input %d of %d bytes, %s, %d workers, ReadTensor %v: %d wire bytes counted as read",
							i, len(in), name, workers, tensors, st.WireBytes)
					}
				}
			}
		}
	}
}

// TestReaderPositionedIdleBetweenCalls: once Next or ReadTensor has
// returned, no worker reads the input, so the caller may change or free
// it (a pooled buffer) without a race (the race detector checks).
func TestReaderPositionedIdleBetweenCalls(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := largeStream(t)
	for _, tensors := range []bool{false, true} {
		buf := slices.Clone(s)
		r, err := NewReader(bytes.NewReader(buf), WithDecoderConcurrency(4))
		if err != nil {
			t.Fatal(err)
		}
		if tensors {
			_, err = r.ReadTensor()
		} else {
			_, err = r.Next()
		}
		if err != nil {
			t.Fatal(err)
		}
		copy(buf, make([]byte, len(buf))) // the caller takes its memory back (copy: instrumented for the race detector)
		for range 3 {
			if tensors {
				_, err = r.ReadTensor()
			} else {
				_, err = r.Next()
			}
			if err != nil {
				break // the input is gone: an error, never a race
			}
		}
		r.Reset(bytes.NewReader(nil))
	}
}
