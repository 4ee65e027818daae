package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

func randTensor(name string, dt DType, seed uint64, shape ...int64) *Tensor {
	t := NewTensor(name, dt, shape...)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range t.Data {
		t.Data[i] = byte(rng.Uint32())
		if i%3 == 0 {
			t.Data[i] = 0
		}
	}
	return t
}

// typed reports whether err is one of the errors a decoder may return.
func typed(err error) bool {
	for _, e := range []error{ErrCorrupt, ErrChecksum, ErrLimit, ErrUnsupported, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func TestRecipeRoundTrip(t *testing.T) {
	for _, s := range []string{
		"",
		"raw",
		"xor(7)",
		"*:zeros",
		"xor(1) | *:zeros",
		"halve | data.lo:xor(3),zeros | data.hi:raw",
		"halve | data.lo+data.hi:xor(9)",
		"halve,halve | data.lo.lo:zeros",
		"plane0..2:raw | *:zeros",
		"  xor ( key = 4 )  |  * : zeros ",
	} {
		r, err := ParseRecipe(s)
		if err != nil {
			t.Fatalf("ParseRecipe(%q): %v", s, err)
		}
		printed := r.String()
		r2, err := ParseRecipe(printed)
		if err != nil {
			t.Fatalf("ParseRecipe(%q) (printed from %q): %v", printed, s, err)
		}
		if r2.String() != printed {
			t.Errorf("%q: printed %q, reprinted %q", s, printed, r2.String())
		}
	}
	if got := MustParseRecipe("xor ( key = 4 ) | * : zeros").String(); got != "xor(4) | *:zeros" {
		t.Errorf("canonical form %q", got)
	}
}

func TestRecipeErrors(t *testing.T) {
	for _, s := range []string{"nosuch", "raw(1)", "|", "x:", "plane2..1:raw", "raw,", "xor(300)", "xor(key=1,nope=2)",
		"halve(1)", ":raw", "xor(", "xor(1", "*:", "a..b:raw", "zeros,xor", "xor(1,key=2)", "xor(key=1,key=2)"} {
		if _, err := ParseRecipe(s); !errors.Is(err, ErrRecipe) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipe", s, err)
		}
	}
}

func TestSelectorRanges(t *testing.T) {
	sel := MustParseRecipe("plane1..2+val:raw").Steps[0].Sel
	for name, want := range map[string]bool{"plane0": false, "plane1": true, "plane2": true, "plane3": false, "plane01": false, "plane+1": false,
		"val": true, "val.plane1": false, "plane": false} {
		if sel.Matches(name) != want {
			t.Errorf("Matches(%q) = %v", name, !want)
		}
	}
}

func roundTrip(t *testing.T, x *Tensor, recipe string) []byte {
	t.Helper()
	enc, _ := NewEncoder()
	frame, stats, err := enc.AppendTensorsStats(nil, nil, []*Tensor{x}, []*Recipe{MustParseRecipe(recipe)})
	if err != nil {
		t.Fatalf("%s: %v", recipe, err)
	}
	stored := 0
	for _, s := range stats {
		stored += s.StoredLen
	}
	if stored > len(x.Data) {
		t.Errorf("%s: stored %d > raw %d", recipe, stored, len(x.Data))
	}
	f, n, err := new(Decoder).DecodeFrame(frame)
	if err != nil {
		t.Fatalf("%s: decode: %v", recipe, err)
	}
	if n != len(frame) || len(f.Tensors) != 1 {
		t.Fatalf("%s: consumed %d of %d, %d tensors", recipe, n, len(frame), len(f.Tensors))
	}
	got := f.Tensors[0]
	if !bytes.Equal(got.Data, x.Data) || got.Name != x.Name || got.DType != x.DType || got.Tags.Lossless != x.Tags.Lossless {
		t.Fatalf("%s: mismatch", recipe)
	}
	return frame
}

func TestFrameRoundTrip(t *testing.T) {
	x := randTensor("layer.0.weight", F32, 1, 3, 50)
	x.Tags = Tags{Lossless: true, Extra: []Tag{{"role", "weight"}, {"k", ""}}}
	x.Version, x.Base = 7, 6
	for _, r := range []string{"", "raw", "xor(1)", "*:zeros", "halve | data.lo:xor(3),zeros", "halve,halve | *:zeros",
		"halve | data.hi:halve | data.hi.lo:zeros | *:xor(2)"} {
		roundTrip(t, x, r)
	}
	empty := NewTensor("empty", I64, 0, 4)
	roundTrip(t, empty, "xor(1) | *:zeros")
	scalar := NewTensor("s", F64)
	roundTrip(t, scalar, "halve")
}

func TestBytesFrame(t *testing.T) {
	enc, _ := NewEncoder()
	for _, n := range []int{0, 1, 7, 1000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		frame, err := enc.AppendBytes(nil, p, MustParseRecipe("halve | data.lo:xor(1)"))
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := new(Decoder).DecodeFrame(frame)
		if err != nil || !bytes.Equal(f.Bytes, p) || f.Header.Type != FrameBytes {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
	if _, err := enc.AppendBytes(nil, []byte("x"), MustParseRecipe("lossy")); !errors.Is(err, ErrLossy) {
		t.Fatalf("lossy bytes: %v", err)
	}
}

// The format's size promises: a 1 KiB payload grows by at most 16 bytes
// plus its name; incompressible data grows by no more than the header.
func TestSmallFrameOverhead(t *testing.T) {
	enc, _ := NewEncoder()
	for _, name := range []string{"w", "layer3.attention.q_proj.weight"} {
		x := randTensor(name, F32, 3, 256)
		frame, err := enc.AppendTensor(nil, x, MustParseRecipe("*:zeros"))
		if err != nil {
			t.Fatal(err)
		}
		if over := len(frame) - 1024; over > 16+len(name) {
			t.Errorf("1 KiB tensor %q: %d bytes of overhead, want <= %d", name, over, 16+len(name))
		}
	}
	p := make([]byte, 1024)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	frame, _ := enc.AppendBytes(nil, p, MustParseRecipe("*:zeros"))
	if over := len(frame) - len(p); over > 13 {
		t.Errorf("1 KiB bytes frame: %d bytes of overhead", over)
	}
}

func TestLossyRefused(t *testing.T) {
	x := randTensor("w", F32, 1, 100)
	x.Tags.Lossless = true
	enc, _ := NewEncoder()
	if _, err := enc.AppendTensor(nil, x, MustParseRecipe("xor(1),lossy")); !errors.Is(err, ErrLossy) {
		t.Fatalf("Encoder: %v", err)
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WithHello(false), WithPolicy(FixedPolicy{MustParseRecipe("lossy")}))
	if err := w.WriteTensor(x); !errors.Is(err, ErrLossy) {
		t.Fatalf("Writer: %v", err)
	}
	w.Close()
	if buf.Len() > 0 {
		f, _, err := new(Decoder).DecodeFrame(buf.Bytes())
		if err != nil || f.Header.Type != FrameEnd {
			t.Fatalf("something other than the end frame was written: %v %v", f, err)
		}
	}
}

// recordingPolicy switches recipes every few frames and records what the
// writer reports.
type recordingPolicy struct {
	recipes []*Recipe
	mu      sync.Mutex
	stats   []FrameStats
}

func (p *recordingPolicy) Choose(fi FrameInfo) *Recipe { return p.recipes[int(fi.Seq)%len(p.recipes)] }
func (p *recordingPolicy) Observe(s FrameStats) {
	p.mu.Lock()
	p.stats = append(p.stats, s)
	p.mu.Unlock()
}

// A stream of tensors and byte chunks over a net.Pipe, with the recipe
// changing from frame to frame, decoded by a Reader with no configuration.
func TestStreamOverPipe(t *testing.T) {
	a, b := net.Pipe()
	pol := &recordingPolicy{recipes: []*Recipe{
		MustParseRecipe("*:zeros"), MustParseRecipe("halve | data.lo:xor(5),zeros"), MustParseRecipe(""), MustParseRecipe("xor(9) | *:zeros"),
	}}
	tensors := []*Tensor{randTensor("a", F32, 1, 1000), randTensor("b", I16, 2, 7, 333), NewTensor("c", U8, 0), randTensor("d", F64, 4, 5000)}
	chunks := [][]byte{[]byte("first"), bytes.Repeat([]byte{0, 1, 2}, 3000)}
	errc := make(chan error, 1)
	go func() {
		w, err := NewWriter(a, WithChunkSize(4096), WithEncoderConcurrency(3), WithPolicy(pol), WithHello(true), WithPeerID("sender"))
		if err != nil {
			errc <- err
			return
		}
		for i, x := range tensors {
			if err := w.WriteTensor(x); err != nil {
				errc <- err
				return
			}
			if i < len(chunks) {
				if _, err := w.Write(chunks[i]); err != nil {
					errc <- err
					return
				}
				if err := w.Flush(); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- w.Close()
		a.Close()
	}()
	r, err := NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	var gotT []*Tensor
	var gotB [][]byte
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f.Header.Type {
		case FrameTensor:
			gotT = append(gotT, f.Tensors...)
		case FrameBytes:
			gotB = append(gotB, f.Bytes)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if r.Hello() == nil || r.Hello().Peer != "sender" {
		t.Fatalf("hello: %+v", r.Hello())
	}
	// Reassemble the chunks per tensor and compare.
	for _, x := range tensors {
		var data []byte
		for _, c := range gotT {
			if c.Name == x.Name {
				if int(c.Offset)*x.DType.Size() != len(data) {
					t.Fatalf("%s: chunk at %d after %d bytes", x.Name, c.Offset, len(data))
				}
				data = append(data, c.Data...)
			}
		}
		if !bytes.Equal(data, x.Data) {
			t.Fatalf("tensor %s: %d bytes back, want %d", x.Name, len(data), len(x.Data))
		}
	}
	if !bytes.Equal(bytes.Join(gotB, nil), bytes.Join(chunks, nil)) {
		t.Fatal("byte stream mismatch")
	}
	pol.mu.Lock()
	defer pol.mu.Unlock()
	used := map[string]bool{}
	for i, s := range pol.stats {
		if s.Info.Seq != uint64(i) {
			t.Fatalf("Observe out of order: frame %d reported as %d", i, s.Info.Seq)
		}
		if s.Err != nil || s.FrameBytes == 0 || len(s.Segments) == 0 {
			t.Fatalf("stats %d: %+v", i, s)
		}
		used[s.Recipe.String()] = true
	}
	if len(used) != len(pol.recipes) {
		t.Fatalf("recipes used: %v", used)
	}
}

func TestReadTensorJoinsChunks(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WithChunkSize(100), WithRecipe(MustParseRecipe("halve | *:zeros")))
	x := randTensor("big", I32, 9, 10, 101)
	y := randTensor("small", F16, 8, 3)
	for _, t0 := range []*Tensor{x, y} {
		if err := w.WriteTensor(t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*Tensor{x, y} {
		got, err := r.ReadTensor()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Data, want.Data) || !got.IsWhole() {
			t.Fatalf("%s: mismatch", want.Name)
		}
		if _, err := View[int16](got); want.DType == F16 && err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.ReadTensor(); err != io.EOF {
		t.Fatalf("after the last tensor: %v", err)
	}
}

func TestBlockGranularity(t *testing.T) {
	pol := &recordingPolicy{recipes: []*Recipe{MustParseRecipe("blocky")}}
	w, _ := NewWriter(io.Discard, WithChunkSize(100), WithPolicy(pol))
	if err := w.WriteTensor(randTensor("x", U8, 1, 1000)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, s := range pol.stats[:len(pol.stats)-1] {
		if s.Info.Len%3 != 0 || s.Info.Offset%3 != 0 {
			t.Fatalf("chunk [%d,+%d) not on 3-element blocks", s.Info.Offset, s.Info.Len)
		}
	}
}

func TestEndFrameCounts(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WithChunkSize(64))
	w.WriteTensor(randTensor("x", U8, 1, 200))
	w.Close()
	s := buf.Bytes()
	// Drop the second data frame: the end frame's counts no longer match.
	var frames [][]byte
	d := new(Decoder)
	for len(s) > 0 {
		_, n, err := d.DecodeFrame(s)
		if err != nil {
			t.Fatal(err)
		}
		frames, s = append(frames, s[:n]), s[n:]
	}
	cut := append(append([]byte{}, frames[0]...), bytes.Join(frames[2:], nil)...)
	r, err := NewReader(bytes.NewReader(cut))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = r.Next()
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lost frame: %v", err)
	}
	// Cut before the end frame: unexpected EOF.
	r, err = NewReader(bytes.NewReader(bytes.Join(frames[:len(frames)-1], nil)))
	if err != nil {
		t.Fatal(err)
	}
	for err = nil; err == nil; {
		_, err = r.Next()
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("missing end: %v", err)
	}
}

// withLead returns a copy of frame f with another lead byte and its
// header CRC made to match.
func withLead(f []byte, lead byte) []byte {
	g := append([]byte{lead}, f[1:]...)
	hlen, n := binary.Uvarint(g[1:])
	end := 1 + n + int(hlen)
	binary.LittleEndian.PutUint32(g[end:], crc(g[:end]))
	return g
}

// frameWith builds a frame around a hand-made header (valid CRCs).
func frameWith(typ FrameType, hdr, payload []byte, withCRC bool) []byte {
	return appendFrame(nil, typ, hdr, [][]byte{payload}, withCRC)
}

func TestHugeClaimRefusedBeforeAllocation(t *testing.T) {
	// A tensor entry claiming 2^38 float32 elements (1 TiB) in ~20 bytes.
	hdr := []byte{0, 1, 'x', byte(F32), 1}
	hdr = binary.AppendUvarint(hdr, 1<<38)
	frame := frameWith(FrameTensor, hdr, nil, false)
	frame = append(frame, make([]byte, 100-len(frame))...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := new(Decoder).DecodeFrame(frame)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("1 TiB claim: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("decoder allocated %d bytes for a refused frame", grew)
	}
	// The same through a stream reader.
	rd, err := NewReader(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); !errors.Is(err, ErrLimit) {
		t.Fatalf("reader: %v", err)
	}
	// A step claiming a huge raw length.
	hdr = []byte{tflagCoded, 1, 'x', byte(U8), 1, 4, 1, byte(xorID), 1, 0}
	hdr = binary.AppendUvarint(hdr, 1<<40)
	frame = frameWith(FrameTensor, append(hdr, 1, 7, 1, 4), []byte{1, 2, 3, 4}, true)
	if _, _, err := new(Decoder).DecodeFrame(frame); !errors.Is(err, ErrLimit) {
		t.Fatalf("huge step: %v", err)
	}
}

func TestMalformedFrames(t *testing.T) {
	x := randTensor("w", F32, 1, 64)
	good := roundTrip(t, x, "halve | data.lo:xor(3),zeros")
	d := new(Decoder)
	// Every truncation fails with a typed error.
	for n := 0; n < len(good); n++ {
		if _, _, err := d.DecodeFrame(good[:n]); !typed(err) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	// Every single-bit flip is caught.
	for i := 0; i < len(good)*8; i++ {
		bad := append([]byte(nil), good...)
		bad[i/8] ^= 1 << (i % 8)
		if _, _, err := d.DecodeFrame(bad); err == nil || !typed(err) {
			t.Fatalf("bit %d flipped: %v", i, err)
		}
	}
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"version 2", withLead(good, 2<<5|1), ErrUnsupported},
		{"version 2, header CRC wrong", append([]byte{2<<5 | 1}, good[1:]...), ErrNotFrame},
		{"version 0", append([]byte{1}, good[1:]...), ErrCorrupt},
		{"type 7", frameWith(7, []byte{0}, nil, false), ErrUnsupported},
		{"unknown stage", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 1, 1, 99, 0, 1, 0, 1, 1}, []byte{0}, true), ErrUnsupported},
		{"unknown dtype", frameWith(FrameTensor, []byte{0, 0, 77, 1, 1}, []byte{0}, true), ErrUnsupported},
		{"bytes dtype", frameWith(FrameTensor, []byte{0, 0, 0, 1, 1}, []byte{0}, true), ErrUnsupported},
		{"unknown flags", frameWith(FrameTensor, []byte{0x80, 0, byte(U8), 1, 1}, []byte{0}, true), ErrUnsupported},
		{"trailing header bytes", frameWith(FrameTensor, []byte{0, 0, byte(U8), 1, 1, 9}, []byte{0}, true), ErrCorrupt},
		{"rank over limit", frameWith(FrameTensor, []byte{0, 0, byte(U8), 100}, nil, false), ErrLimit},
		{"name over limit", frameWith(FrameTensor, []byte{0, 0xff, 0xff, 0x7f}, nil, false), ErrLimit},
		{"chunk past end", frameWith(FrameTensor, []byte{tflagChunk, 0, byte(U8), 1, 4, 3, 2}, []byte{0, 0}, true), ErrCorrupt},
		{"segment count mismatch", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 4, 1, byte(halveID), 1, 0, 4, 0, 1, 4}, []byte{1, 2, 3, 4}, true), ErrCorrupt},
		{"stored length mismatch", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 4, 1, byte(xorID), 1, 0, 4, 1, 7, 1, 3}, []byte{1, 2, 3}, true), ErrCorrupt},
		{"raw length mismatch", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 4, 1, byte(xorID), 1, 0, 5, 1, 7, 1, 5}, []byte{1, 2, 3, 4, 5}, true), ErrCorrupt},
		{"input index out of range", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 4, 1, byte(xorID), 1, 3, 4, 1, 7, 1, 4}, []byte{1, 2, 3, 4}, true), ErrCorrupt},
		{"bad stage params", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 4, 1, byte(xorID), 1, 0, 4, 0, 1, 4}, []byte{1, 2, 3, 4}, true), ErrCorrupt},
		{"stage decode fails", frameWith(FrameTensor, []byte{tflagCoded, 0, byte(U8), 1, 4, 1, byte(shrinkID), 1, 0, 4, 0, 1, 2}, []byte{9, 9}, true), ErrCorrupt},
		{"critical extension", frameWith(FrameEnd, []byte{0, 0, 2, 1, 0}, nil, false), ErrCorrupt},
		{"hello bad magic", frameWith(FrameHello, append([]byte("XXXX"), make([]byte, 21)...), nil, false), ErrCorrupt},
		{"tensors frame with none", frameWith(FrameTensors, []byte{0}, nil, false), ErrCorrupt},
		{"header over limit", append([]byte{Version << 5}, binary.AppendUvarint(nil, 1<<27)...), ErrLimit},
	}
	for _, c := range cases {
		_, _, err := d.DecodeFrame(c.frame)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// Extensions: an even key is skipped, an odd one refused.
	ext := func(key byte) []byte {
		f := appendFrame(nil, FrameEnd, []byte{0, 0, 3, key, 1, 0xee}, nil, false)
		f[0] |= leadExtensions
		// recompute the header CRC after changing the lead byte
		h := f[:len(f)-4]
		return binary.LittleEndian.AppendUint32(append([]byte(nil), h...), crc(h))
	}
	if f, _, err := d.DecodeFrame(ext(2)); err != nil || len(f.Header.Ext) != 1 || f.Header.Ext[0].Key != 2 {
		t.Errorf("even extension: %v", err)
	}
	if _, _, err := d.DecodeFrame(ext(3)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("odd extension: %v", err)
	}
}

func TestHelloControlEnd(t *testing.T) {
	h := &Hello{Peer: "p1", Stages: []StageID{1, 2, 300}, MaxFrame: 1 << 20}
	h.Session[3] = 9
	s := AppendHello(nil, h)
	s = AppendControl(s, 1024, []byte("ack"))
	s = AppendEnd(s, End{})
	r, err := NewReader(bytes.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	f, err := r.Next()
	if err != nil || f.Header.Hello.Peer != "p1" || f.Header.Hello.Session != h.Session || len(f.Header.Hello.Stages) != 3 || f.Header.Hello.MaxFrame != 1<<20 {
		t.Fatalf("hello: %+v %v", f, err)
	}
	f, err = r.Next()
	if err != nil || f.Header.Control != 1024 || string(f.Control) != "ack" {
		t.Fatalf("control: %+v %v", f, err)
	}
	if f, err = r.Next(); err != nil || f.Header.Type != FrameEnd {
		t.Fatalf("end: %v", err)
	}
	if _, err = r.Next(); err != io.EOF {
		t.Fatalf("after end: %v", err)
	}
}

func TestWriterErrorsAreSticky(t *testing.T) {
	w, _ := NewWriter(failWriter{}, WithHello(false))
	x := randTensor("x", U8, 1, 10)
	w.WriteTensor(x)
	err := w.Flush()
	if err == nil {
		t.Fatal("write error not reported")
	}
	if err2 := w.WriteTensor(x); err2 == nil {
		t.Fatal("error not sticky")
	}
	if err3 := w.Close(); err3 == nil {
		t.Fatal("Close hides the error")
	}
	if _, err := NewWriter(io.Discard, WithChunkSize(1)); err == nil {
		t.Fatal("bad chunk size accepted")
	}
	if _, err := NewWriter(io.Discard, WithEncoderConcurrency(0)); err == nil {
		t.Fatal("bad concurrency accepted")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("link down") }

func TestViewAlignment(t *testing.T) {
	x := randTensor("x", F32, 1, 8)
	if v, err := View[float32](x); err != nil || len(v) != 8 {
		t.Fatal(err)
	}
	if _, err := View[float64](x); err == nil {
		t.Fatal("wrong element size accepted")
	}
	x.Data = x.Data[1:5]
	x.Shape = []int64{1}
	if _, err := View[float32](x); err == nil {
		t.Fatal("misaligned view accepted")
	}
}

func TestDTypes(t *testing.T) {
	for d := DType(0); d < numDTypes; d++ {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Errorf("%v: %v %v", d, got, err)
		}
	}
	if d, err := ParseDType("float32"); err != nil || d != F32 {
		t.Error("float32 alias")
	}
	if _, err := ParseDType("f128"); !errors.Is(err, ErrUnsupported) {
		t.Error("f128 accepted")
	}
}

// Closed Writers leave no goroutine behind: synctest.Test fails when a
// goroutine of its bubble is still blocked once the test function
// returns, without waiting for a count of goroutines to come down.
func TestWriterStopsGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for i := 0; i < 5; i++ {
			w, _ := NewWriter(io.Discard, WithEncoderConcurrency(4))
			w.WriteTensor(randTensor("x", U8, 1, 1000))
			w.Close()
			w2, _ := NewWriter(failWriter{}, WithEncoderConcurrency(2))
			w2.WriteTensor(randTensor("x", U8, 1, 1000))
			w2.Close()
		}
	})
}

func TestDecodeFrameInto(t *testing.T) {
	enc, _ := NewEncoder()
	xs := []*Tensor{randTensor("a", U8, 1, 13), randTensor("b", F64, 2, 9), randTensor("c", F32, 3, 5)}
	frame, err := enc.AppendTensors(nil, xs, []*Recipe{MustParseRecipe("halve | *:zeros")})
	if err != nil {
		t.Fatal(err)
	}
	buf := AlignedBytes(256)
	f, _, err := new(Decoder).DecodeFrameInto(buf, frame)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range f.Tensors {
		if !bytes.Equal(x.Data, xs[i].Data) {
			t.Fatalf("tensor %d differs", i)
		}
		if _, err := View[float64](x); x.DType == F64 && err != nil {
			t.Fatal(err)
		}
	}
	if &f.Tensors[0].Data[0] != &buf[0] || &f.Tensors[1].Data[0] != &buf[16] {
		t.Fatal("tensors not decoded into buf at aligned offsets")
	}
	// Too small a buffer: decoded into fresh memory, still correct.
	f, _, err = new(Decoder).DecodeFrameInto(make([]byte, 4), frame)
	if err != nil || !bytes.Equal(f.Tensors[1].Data, xs[1].Data) {
		t.Fatal(err)
	}
}

// Regression tests from the review of the core.

func TestDecodeWorkBounded(t *testing.T) {
	const n = 1 << 20
	hdr := append([]byte{tflagCoded, 0, byte(U8), 1}, binary.AppendUvarint(nil, n)...)
	hdr = append(hdr, 6)
	for i := 0; i < 6; i++ {
		hdr = append(hdr, byte(xorID), 1, 0)
		hdr = binary.AppendUvarint(hdr, n)
		hdr = append(hdr, 1, 7)
	}
	hdr = append(append(hdr, 1), binary.AppendUvarint(nil, n)...)
	if _, _, err := new(Decoder).DecodeFrame(frameWith(FrameTensor, hdr, nil, false)); !errors.Is(err, ErrLimit) {
		t.Fatalf("six full-size filters: %v", err)
	}
	// The encoder refuses to write such a frame in the first place.
	x := NewTensor("z", U8, n)
	r := MustParseRecipe("xor(0),xor(0),xor(0),xor(0),xor(0) | *:zeros")
	if _, err := mustEncoder().AppendTensor(nil, x, r); !errors.Is(err, ErrRecipe) {
		t.Fatalf("encoder: %v", err)
	}
}

// The encoder refuses what readers with default limits would refuse of
// stages that decode at some MB/s: one segment over MaxSlowDecoded before
// it is coded, and a frame whose segments add up to more after; a frame
// at the limit is accepted and decoded.
func TestEncoderSlowDecodeLimit(t *testing.T) {
	limit := DefaultLimits().MaxSlowDecoded
	// slowxor, then zeros: the tensors below start with 300 bytes that
	// xor to zeros, so that the steps pay for themselves (else the data
	// is stored as it is, with no step).
	slow := MustParseRecipe("slowxor | zeros")
	half := limit/2 + 1
	data := make([]byte, limit+2)
	for i := range data {
		data[i] = byte(i * 7)
		if j := int64(i); j < 300 || j >= half && j < half+300 {
			data[i] = 0x5a
		}
	}
	big := &Tensor{Name: "big", DType: U8, Shape: []int64{limit + 1}, Data: data[:limit+1]}
	if _, err := mustEncoder().AppendTensors(nil, []*Tensor{big}, []*Recipe{slow}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "segment") {
		t.Fatalf("one segment of %d bytes through slowxor: %v, want ErrLimit for the segment", limit+1, err)
	}
	a := &Tensor{Name: "a", DType: U8, Shape: []int64{half}, Data: data[:half]}
	b := &Tensor{Name: "b", DType: U8, Shape: []int64{half}, Data: data[half : 2*half]}
	if _, err := mustEncoder().AppendTensors(nil, []*Tensor{a, b}, []*Recipe{slow, slow}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "the frame decodes") {
		t.Fatalf("two segments of %d bytes through slowxor: %v, want ErrLimit for the frame", half, err)
	}
	// At the limit: accepted, and a reader with default limits decodes it.
	b.Shape, b.Data = []int64{limit - half}, data[half:limit]
	frame, err := mustEncoder().AppendTensors(nil, []*Tensor{a, b}, []*Recipe{slow, slow})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := new(Decoder).DecodeFrame(frame); err != nil {
		t.Fatalf("a frame at the limit: %v", err)
	}
}

func mustEncoder() *Encoder {
	e, err := NewEncoder()
	if err != nil {
		panic(err)
	}
	return e
}

func TestWriterEncodeErrorIsSticky(t *testing.T) {
	pol := &recordingPolicy{recipes: []*Recipe{MustParseRecipe("fail"), nil}}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WithPolicy(pol))
	if err := w.WriteTensor(randTensor("bad", U8, 1, 10)); err == nil {
		t.Fatal("failing stage: no error")
	}
	if err := w.WriteTensor(randTensor("good", U8, 1, 10)); err == nil {
		t.Fatal("error not sticky: a later tensor would be dropped silently")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close hides the error")
	}
}

func TestLossyChoiceOnBytesStoredRaw(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WithChunkSize(64), WithPolicy(&recordingPolicy{recipes: []*Recipe{MustParseRecipe("lossy"), nil}}))
	in := bytes.Repeat([]byte("ABC"), 50)
	if n, err := w.Write(in); n != len(in) || err != nil {
		t.Fatalf("Write: %d %v", n, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("read back %d bytes, %v", len(out), err)
	}
}

func TestReadTensorRefusesChunkInTensorsFrame(t *testing.T) {
	a := randTensor("a", U8, 1, 4)
	b := randTensor("b", F32, 2, 10)
	b.Data, b.Offset = b.Data[20:40], 5
	// The encoder does not write such a frame; readers refuse a hand-made one.
	if _, err := mustEncoder().AppendTensors(nil, []*Tensor{a, b}, nil); !errors.Is(err, ErrRecipe) {
		t.Fatalf("encoder: %v", err)
	}
	hdr := append([]byte{2, 0, 1, 'a', byte(U8), 1, 4}, tflagChunk, 1, 'b', byte(F32), 1, 10, 5, 5)
	frame := frameWith(FrameTensors, hdr, append(a.Data, b.Data...), true)
	if _, _, err := new(Decoder).DecodeFrame(frame); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DecodeFrame: %v", err)
	}
	r, err := NewReader(bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadTensor(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v", err)
	}
	if _, err := r.ReadTensor(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reader error not sticky: %v", err)
	}
}

func TestNonMinimalHeaderLength(t *testing.T) {
	in := []byte{0x25, 0x82, 0x00, 0x07, 0xa2, 0x85, 0xa7, 0x29}
	if _, _, err := new(Decoder).DecodeFrame(in); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DecodeFrame: %v", err)
	}
	rd, err := NewReader(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Reader: %v", err)
	}
}

func TestConsecutiveStreams(t *testing.T) {
	enc := mustEncoder()
	s := AppendHello(nil, &Hello{})
	s, _ = enc.AppendBytes(s, []byte("abc"), nil)
	s = AppendEnd(s, End{Frames: 1, Bytes: 3})
	s, _ = enc.AppendBytes(s, []byte("de"), nil)
	s = AppendEnd(s, End{Frames: 1, Bytes: 2})
	r, err := NewReader(bytes.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A hello in the middle of a chunked tensor is corruption.
	x := randTensor("x", U8, 1, 10)
	first := &Tensor{Name: "x", DType: U8, Shape: x.Shape, Data: x.Data[:5]}
	s, _ = enc.AppendTensor(nil, first, nil)
	s = AppendHello(s, &Hello{})
	second := &Tensor{Name: "x", DType: U8, Shape: x.Shape, Offset: 5, Data: x.Data[5:]}
	s, _ = enc.AppendTensor(s, second, nil)
	rd, err := NewReader(bytes.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rd.ReadTensor(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("hello inside a tensor: %v", err)
	}
}

func TestErrorOffsets(t *testing.T) {
	enc := mustEncoder()
	s, _ := enc.AppendBytes(nil, []byte("abc"), nil)
	at := len(s)
	s = AppendEnd(s, End{Frames: 5})
	r, err := NewReader(bytes.NewReader(append(AppendHello(nil, &Hello{}), s...)))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = r.Next()
	}
	var ce *CorruptError
	hello := len(AppendHello(nil, &Hello{}))
	if !errors.As(err, &ce) || ce.Offset != int64(hello+at) {
		t.Fatalf("end frame at %d reported as %v", hello+at, err)
	}
}

func TestEncoderRefusesWhatReadersRefuse(t *testing.T) {
	x := randTensor(string(make([]byte, 5000)), U8, 1, 4)
	if _, err := mustEncoder().AppendTensor(nil, x, nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("long name: %v", err)
	}
	y := NewTensor("deep", U8, make([]int64, 40)...)
	if _, err := mustEncoder().AppendTensor(nil, y, nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("rank 40: %v", err)
	}
}
