package codec_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/lossless"
)

// cycling switches between real lossless recipes from frame to frame.
type cycling struct {
	recipes []*codec.Recipe
	mu      sync.Mutex
	seen    map[string]int
}

func (p *cycling) Choose(fi codec.FrameInfo) *codec.Recipe {
	return p.recipes[int(fi.Seq)%len(p.recipes)]
}

func (p *cycling) Observe(s codec.FrameStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]int{}
	}
	for _, seg := range s.Segments {
		p.seen[seg.Coder]++
	}
}

// Tensors and byte chunks cross a net.Pipe with the recipe changing every
// frame (zstd, s2, huff0, xz, shuffle, bytedelta); a Reader with no
// configuration gets everything back.
func TestStreamRealStagesOverPipe(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := codec.NewTensor("w", codec.F32, 300, 257)
	for i := 0; i < len(w.Data)/4; i++ {
		binary.LittleEndian.PutUint32(w.Data[4*i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
	}
	w.Tags.Lossless = true
	steps := codec.NewTensor("steps", codec.I64, 5000)
	for i := 0; i < 5000; i++ {
		binary.LittleEndian.PutUint64(steps.Data[8*i:], uint64(i*i))
	}
	text := bytes.Repeat([]byte("opaque protobuf-ish payload 0123456789 "), 2000)
	pol := &cycling{recipes: []*codec.Recipe{
		codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw"),
		codec.MustParseRecipe("*:zstd(1)"),
		codec.MustParseRecipe("shuffle | bytedelta | *:zstd(3)"),
		codec.MustParseRecipe("*:s2"),
		codec.MustParseRecipe("shuffle | *:s2(better)"),
		codec.MustParseRecipe("*:xz"),
	}}
	a, b := net.Pipe()
	errc := make(chan error, 1)
	go func() {
		defer a.Close()
		wr, err := codec.NewWriter(a, codec.WithChunkSize(64<<10), codec.WithEncoderConcurrency(2), codec.WithPolicy(pol))
		if err != nil {
			errc <- err
			return
		}
		for _, step := range []func() error{
			func() error { return wr.WriteTensor(w) },
			func() error { _, err := wr.Write(text); return err },
			func() error { return wr.WriteTensor(steps) },
		} {
			if err := step(); err != nil {
				errc <- err
				return
			}
		}
		errc <- wr.Close()
	}()
	r, err := codec.NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadTensor()
	if err != nil || !bytes.Equal(got.Data, w.Data) || !got.Tags.Lossless {
		t.Fatalf("weights: %v", err)
	}
	// The byte stream comes next: read it frame by frame.
	var stream []byte
	for len(stream) < len(text) {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.Type != codec.FrameBytes {
			t.Fatalf("got a %v frame inside the byte stream", f.Header.Type)
		}
		stream = append(stream, f.Bytes...)
	}
	if !bytes.Equal(stream, text) {
		t.Fatal("byte stream differs")
	}
	got, err = r.ReadTensor()
	if err != nil || !bytes.Equal(got.Data, steps.Data) {
		t.Fatalf("steps: %v", err)
	}
	if _, err := r.ReadTensor(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// 300*257*4 bytes in 64 KiB chunks (5 frames), 80000 in 2, 40000 in 1.
	st := r.Stats()
	if raw := uint64(len(w.Data) + len(text) + len(steps.Data)); st.Frames != 8 || st.RawBytes != raw || st.WireBytes == 0 || st.WireBytes >= raw || st.DecodeTime <= 0 {
		t.Errorf("reader stats %+v: want 8 frames, %d raw bytes, fewer on the wire, some decode time", st, raw)
	}
	pol.mu.Lock()
	defer pol.mu.Unlock()
	for _, coder := range []string{"huff0", "zstd", "s2", "xz"} {
		if pol.seen[coder] == 0 {
			t.Errorf("no segment coded by %s (coders seen: %v)", coder, pol.seen)
		}
	}
}

// BenchmarkWriterMemory: writing a 64 MiB tensor with a real recipe, the
// bytes allocated per run stay proportional to chunk size times pipeline
// depth, not to the tensor (buffers and arenas are pooled).
func BenchmarkWriterMemory(b *testing.B) {
	x := codec.NewTensor("big", codec.F32, 16<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(x.Data)/4; i++ {
		binary.LittleEndian.PutUint32(x.Data[4*i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
	}
	r := codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw")
	for _, c := range []int{1, 4} {
		for _, chunk := range []int{256 << 10, 1 << 20, 4 << 20} {
			// A new Writer per tensor: pools start empty every time.
			b.Run(fmt.Sprintf("new/concurrency=%d/chunk=%dKiB", c, chunk>>10), func(b *testing.B) {
				b.SetBytes(int64(len(x.Data)))
				b.ReportAllocs()
				for b.Loop() {
					w, _ := codec.NewWriter(io.Discard, codec.WithEncoderConcurrency(c), codec.WithChunkSize(chunk), codec.WithRecipe(r))
					if err := w.WriteTensor(x); err != nil {
						b.Fatal(err)
					}
					w.Close()
				}
			})
			// One stream carrying tensor after tensor: the steady state.
			b.Run(fmt.Sprintf("stream/concurrency=%d/chunk=%dKiB", c, chunk>>10), func(b *testing.B) {
				w, _ := codec.NewWriter(io.Discard, codec.WithEncoderConcurrency(c), codec.WithChunkSize(chunk), codec.WithRecipe(r))
				b.SetBytes(int64(len(x.Data)))
				b.ReportAllocs()
				for b.Loop() {
					if err := w.WriteTensor(x); err != nil {
						b.Fatal(err)
					}
				}
				w.Close()
			})
		}
	}
}

// A raw bytes frame written as head, data, tail is the frame AppendBytes
// makes in one buffer, with and without the payload CRC.
func TestAppendRawBytesHead(t *testing.T) {
	for _, mode := range []codec.CRCMode{codec.CRCAlways, codec.CRCOmitRaw} {
		enc, err := codec.NewEncoder(codec.WithPayloadCRC(mode))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{0, 1, 1000, 300000} {
			p := bytes.Repeat([]byte{byte(n), 7}, n/2+1)[:n]
			want, err := enc.AppendBytes(nil, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			head, tail := enc.AppendRawBytesHead([]byte("x"), p)
			got := append(append(slices.Clone(head[1:]), p...), tail...)
			if !bytes.Equal(got, want) {
				t.Errorf("mode %d, %d bytes: head+data+tail differs from AppendBytes", mode, n)
			}
		}
	}
}

// Raw chunks of 64 KiB and more go out as head, data and tail without a
// copy, from Write's buffers and from WriteBorrowed's caller alike: the
// stream reads back the same, with and without payload CRCs.
func TestWriterRawVectored(t *testing.T) {
	for _, mode := range []codec.CRCMode{codec.CRCAlways, codec.CRCOmitRaw} {
		var buf bytes.Buffer
		w, err := codec.NewWriter(&buf, codec.WithChunkSize(100000), codec.WithPayloadCRC(mode))
		if err != nil {
			t.Fatal(err)
		}
		a := bytes.Repeat([]byte("abcdefgh"), 40000) // 320000 bytes: 3 full chunks and a part
		b := bytes.Repeat([]byte("01234567"), 30000)
		if _, err := w.Write(a[:5000]); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteBorrowed(a[5000:]); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		rd, err := codec.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rd)
		if err != nil || !bytes.Equal(got, append(slices.Clone(a), b...)) {
			t.Fatalf("mode %d: read %d bytes, %v", mode, len(got), err)
		}
	}
}

// NextInto reads a raw bytes frame straight into the caller's buffer
// (checking its CRC), and falls back to its own when the buffer is small.
func TestNextIntoRaw(t *testing.T) {
	var buf bytes.Buffer
	w, _ := codec.NewWriter(&buf, codec.WithChunkSize(70000))
	data := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160000: chunks of 70000, 70000, 20000
	w.Write(data)
	w.Close()
	stream := buf.Bytes()
	mine := make([]byte, 0, 70000)
	var got []byte
	direct := 0
	r, err := codec.NewReader(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := r.NextInto(func(h *codec.FrameHeader, i int) []byte { return mine[:0] })
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.Type == codec.FrameBytes {
			if &f.Bytes[0] == &mine[:1][0] {
				direct++
			}
			got = append(got, f.Bytes...)
		}
	}
	if !bytes.Equal(got, data) || direct != 3 {
		t.Fatalf("read %d bytes, %d frames into the caller's buffer", len(got), direct)
	}
	// A damaged payload is a checksum error on the direct path too.
	bad := slices.Clone(stream)
	bad[len(bad)/2] ^= 1
	r, err = codec.NewReader(bytes.NewReader(bad))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = r.NextInto(func(*codec.FrameHeader, int) []byte { return mine[:0] })
	}
	if !errors.Is(err, codec.ErrChecksum) {
		t.Fatalf("damaged payload: %v", err)
	}
}

// WriteFrame sends a frame at once from the calling goroutine, in order
// with what Write, WriteBorrowed and WriteTensor queued before it.
func TestWriteFrame(t *testing.T) {
	var buf bytes.Buffer
	pol := &cycling{recipes: []*codec.Recipe{nil, codec.MustParseRecipe("*:zstd(1)")}}
	w, err := codec.NewWriter(&buf, codec.WithChunkSize(100000), codec.WithPolicy(pol))
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i, n := range []int{0, 10, 99999, 100000, 70000} {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		want = append(want, p...)
		if i%2 == 0 {
			w.Write(p[:n/2])
			if err := w.WriteFrame(p[n/2:]); err != nil {
				t.Fatal(err)
			}
		} else if _, err := w.WriteBorrowed(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteFrame(make([]byte, 100001)); err == nil {
		t.Fatal("a frame over the chunk size accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rd, err := codec.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d of %d bytes: %v", len(got), len(want), err)
	}
}

// Frames encoded elsewhere join a Writer's stream with WriteEncoded: they
// arrive in order and the end frame counts them; anything but one whole
// data frame is refused and leaves the stream as it was.
func TestWriteEncoded(t *testing.T) {
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	foreign := codec.NewTensor("foreign", codec.F32, 256)
	for i := range foreign.Data {
		foreign.Data[i] = byte(i * 7)
	}
	frame, err := enc.AppendTensor(nil, foreign, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := codec.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{
		nil,
		frame[:len(frame)-1],           // cut short
		append(slices.Clone(frame), 0), // a byte more
		codec.AppendControl(nil, 1024, []byte{1}), // not data
		[]byte("not a frame at all"),
	} {
		if err := w.WriteEncoded(bad); err == nil {
			t.Errorf("WriteEncoded(%q) accepted", bad)
		}
	}
	if err := w.WriteEncoded(frame); err != nil {
		t.Fatal(err)
	}
	clear(frame) // copied: the caller's buffer is free at once
	if _, err := w.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := codec.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		switch {
		case f.Bytes != nil:
			got = append(got, string(f.Bytes))
		case len(f.Tensors) == 1:
			if !bytes.Equal(f.Tensors[0].Data, foreign.Data) {
				t.Fatal("the foreign tensor changed")
			}
			got = append(got, f.Tensors[0].Name)
		}
	}
	if want := []string{"before", "foreign", "after"}; !slices.Equal(got, want) {
		t.Fatalf("frames %v, want %v", got, want)
	}
}

// cutEvery is a Cutter that ends frames every n bytes.
type cutEvery struct {
	codec.FixedPolicy
	n    int
	seen []int // the lengths it was offered
}

func (c *cutEvery) Cut(data []byte) int {
	c.seen = append(c.seen, len(data))
	return c.n
}

// A byte stream starts with small frames (WithStartFrame: 16 KiB, then
// each at most twice the one before, up to the chunk size); a Cutter
// policy ends frames where it says, and is offered at most what the
// start allows. Every path that makes bytes frames does both: Write
// (a pooled buffer that several frames share), WriteBorrowed and
// WriteFrame.
func TestStartFrameAndCutter(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7 >> 3)
	}
	for _, path := range []string{"Write", "WriteBorrowed", "WriteFrame"} {
		for _, cutAt := range []int{0, 100 << 10} {
			var buf bytes.Buffer
			opts := []codec.EOption{codec.WithChunkSize(1 << 20), codec.WithStartFrame(16 << 10)}
			var cut *cutEvery
			if cutAt > 0 {
				cut = &cutEvery{n: cutAt}
				opts = append(opts, codec.WithPolicy(cut))
			}
			w, err := codec.NewWriter(&buf, opts...)
			if err != nil {
				t.Fatal(err)
			}
			switch path {
			case "Write":
				_, err = w.Write(data)
			case "WriteBorrowed":
				_, err = w.WriteBorrowed(data)
			default:
				for off := 0; off < len(data) && err == nil; off += 1 << 20 {
					err = w.WriteFrame(data[off : off+1<<20])
				}
			}
			if err == nil {
				err = w.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			r, err := codec.NewReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			var got []byte
			for {
				f, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if f.Header.Type != codec.FrameBytes {
					continue
				}
				sizes = append(sizes, len(f.Bytes))
				got = append(got, f.Bytes...)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("%s, cut %d: the stream differs", path, cutAt)
			}
			limit := 16 << 10
			for i, n := range sizes {
				want := limit
				if cutAt > 0 {
					want = min(want, cutAt)
				}
				if i < 6 && n != want {
					t.Errorf("%s, cut %d: frame %d holds %d bytes, want %d (frames %v)", path, cutAt, i, n, want, sizes)
					break
				}
				if n > max(limit, 1<<20) {
					t.Errorf("%s: frame %d holds %d bytes", path, i, n)
				}
				limit = min(2*limit, 1<<20)
			}
			if cut != nil {
				for i, n := range cut.seen[:min(len(cut.seen), 6)] {
					if n > 16<<10<<i {
						t.Errorf("%s: Cut was offered %d bytes for frame %d", path, n, i)
					}
				}
			}
		}
	}
}
