package lossless

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
)

// Helpers shared by the tests of shuffle, bytedelta, huff0 and s2.

// fastTestFloats returns n float32 values drawn from N(0, 0.02), as bytes.
func fastTestFloats(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := codec.AlignedBytes(4 * n)
	for i := range n {
		v := math.Float32bits(float32(r.NormFloat64() * 0.02))
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	return b
}

// fastTestRandom returns n uniformly random bytes.
func fastTestRandom(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fastTestTensor wraps data as a 1-D tensor of dtype dt.
func fastTestTensor(name string, dt codec.DType, data []byte) *codec.Tensor {
	t := codec.NewTensor(name, dt, int64(len(data)/dt.Size()))
	copy(t.Data, data)
	return t
}

// fastTestOpRoundTrip runs op.Encode and op.Decode directly on in (with
// elem) and checks the result; dst gets a guard byte after in.Len.
func fastTestOpRoundTrip(t testing.TB, op codec.Op, name string, elem codec.DType, in []byte) []codec.Segment {
	t.Helper()
	seg := codec.Segment{SegInfo: codec.SegInfo{Name: name, Elem: elem, Len: len(in)}, Data: in}
	want, err := op.Outputs(seg.SegInfo)
	if err != nil {
		t.Fatalf("%s.Outputs(%d bytes): %v", op, len(in), err)
	}
	orig := bytes.Clone(in)
	outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, seg)
	if err != nil {
		t.Fatalf("%s.Encode(%d bytes): %v", op, len(in), err)
	}
	if !bytes.Equal(in, orig) {
		t.Fatalf("%s.Encode modified its input", op)
	}
	if len(outs) != len(want) {
		t.Fatalf("%s: %d outputs, Outputs says %d", op, len(outs), len(want))
	}
	for i, o := range outs {
		if o.Name != want[i].Name || (want[i].Len >= 0 && want[i].Len != len(o.Data)) || o.Elem != want[i].Elem {
			t.Fatalf("%s: output %d is %q/%v/%d bytes, Outputs says %q/%v/%d", op, i, o.Name, o.Elem, len(o.Data), want[i].Name, want[i].Elem, want[i].Len)
		}
		outs[i].Len = len(o.Data)
	}
	if op.Stage().Kind == codec.Coder && len(outs[0].Data) >= len(in) {
		return outs // the codec layer stores it as is
	}
	const guard = 0xa5
	prefix := []byte("prefix")
	dst := make([]byte, len(prefix), len(prefix)+len(in)+1)
	copy(dst, prefix)
	dst[:cap(dst)][cap(dst)-1] = guard
	got, err := op.Decode(&codec.Ctx{Arena: &codec.Arena{}}, dst[:len(prefix):len(prefix)+len(in)], outs, seg.SegInfo)
	if err != nil {
		t.Fatalf("%s.Decode(%d bytes): %v", op, len(in), err)
	}
	if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], in) {
		t.Fatalf("%s: direct round trip of %d bytes differs", op, len(in))
	}
	if dst[:cap(dst)][cap(dst)-1] != guard {
		t.Fatalf("%s.Decode wrote past its output", op)
	}
	return outs
}

// fastTestParse parses the one-op recipe s.
func fastTestParse(t testing.TB, s string) codec.Op {
	t.Helper()
	r, err := codec.ParseRecipe(s)
	if err != nil {
		t.Fatalf("ParseRecipe(%q): %v", s, err)
	}
	return r.Steps[0].Ops[0]
}

// fastTestStringRoundTrip checks that op prints as text and that the text
// parses back to an op with the same parameters, which Load accepts.
func fastTestStringRoundTrip(t *testing.T, op codec.Op, text string) {
	t.Helper()
	if op.String() != text {
		t.Errorf("op prints as %q, want %q", op.String(), text)
	}
	back := fastTestParse(t, op.String())
	if back.String() != op.String() || !bytes.Equal(back.AppendParams(nil), op.AppendParams(nil)) {
		t.Errorf("%q parses back to %q with params %x, want %x", op, back, back.AppendParams(nil), op.AppendParams(nil))
	}
	loaded, err := op.Stage().Load(op.AppendParams(nil))
	if err != nil || loaded.String() != op.String() {
		t.Errorf("Load(%x) = %v, %v; want %q", op.AppendParams(nil), loaded, err, op)
	}
}

// Reference loops.

func shuffleRef(planes [][]byte, src []byte) {
	w, m := len(planes), len(planes[0])
	for i := range m {
		for k := range w {
			planes[k][i] = src[i*w+k]
		}
	}
}

func unshuffleRef(dst []byte, planes [][]byte) {
	w, m := len(planes), len(planes[0])
	for i := range m {
		for k := range w {
			dst[i*w+k] = planes[k][i]
		}
	}
}

// shuffleTestPaths are the ways to run a kernel: through the dispatcher
// (assembly where there is some), and the pure-Go kernels alone.
var shuffleTestPaths = map[string]struct {
	shuffle   func(planes [][]byte, src []byte)
	unshuffle func(dst []byte, planes [][]byte)
}{
	"dispatch": {shuffle, unshuffle},
	"go": {
		func(p [][]byte, src []byte) {
			switch len(p) {
			case 2:
				shuffle2Go(p[0], p[1], src)
			case 4:
				shuffle4Go(p[0], p[1], p[2], p[3], src)
			case 8:
				shuffle8Go((*[8][]byte)(p), src)
			default:
				shuffleGeneric(p, src)
			}
		},
		func(dst []byte, p [][]byte) {
			switch len(p) {
			case 2:
				unshuffle2Go(dst, p[0], p[1])
			case 4:
				unshuffle4Go(dst, p[0], p[1], p[2], p[3])
			case 8:
				unshuffle8Go(dst, (*[8][]byte)(p))
			default:
				unshuffleGeneric(dst, p)
			}
		},
	},
	"generic": {shuffleGeneric, unshuffleGeneric},
}

// TestShuffleKernels checks every kernel against the reference loops on
// many element counts (around the 8- and 32-element steps of the fast
// paths) and misaligned buffers, with guard bytes around every output.
func TestShuffleKernels(t *testing.T) {
	counts := []int{1, 2, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 1000, 4097}
	if !testing.Short() {
		counts = append(counts, 100003) // several generic blocks
	}
	const guard = 0x5a
	for name, path := range shuffleTestPaths {
		for _, w := range []int{2, 3, 4, 5, 8, 16} {
			for _, m := range counts {
				offs := []int{0, 1, 3, 7}
				if m > 10000 {
					offs = offs[:2]
				}
				for _, off := range offs {
					src := fastTestRandom(off+m*w+off, uint64(m*w+off))[off : off+m*w]
					want := make([][]byte, w)
					got := make([][]byte, w)
					bufs := make([][]byte, w)
					for k := range w {
						want[k] = make([]byte, m)
						bufs[k] = bytes.Repeat([]byte{guard}, off+m+8)
						got[k] = bufs[k][off : off+m : off+m]
					}
					shuffleRef(want, src)
					path.shuffle(got, src)
					for k := range w {
						if !bytes.Equal(got[k], want[k]) {
							t.Fatalf("%s shuffle w=%d m=%d off=%d: plane %d differs", name, w, m, off, k)
						}
						if g := bufs[k][off+m:]; !bytes.Equal(g, bytes.Repeat([]byte{guard}, 8)) {
							t.Fatalf("%s shuffle w=%d m=%d off=%d: wrote past plane %d", name, w, m, off, k)
						}
					}
					buf := bytes.Repeat([]byte{guard}, off+m*w+8)
					dst := buf[off : off+m*w : off+m*w]
					path.unshuffle(dst, want)
					if !bytes.Equal(dst, src) {
						t.Fatalf("%s unshuffle w=%d m=%d off=%d differs", name, w, m, off)
					}
					if !bytes.Equal(buf[off+m*w:], bytes.Repeat([]byte{guard}, 8)) {
						t.Fatalf("%s unshuffle w=%d m=%d off=%d: wrote past the end", name, w, m, off)
					}
				}
			}
		}
	}
}

// TestShuffleRecipes runs shuffle recipes through the codec layer, on
// random bytes (frames then store the data raw: the steps do not pay) and
// on float weights, where a coder after the shuffle pays and the frame
// records the shuffle step.
func TestShuffleRecipes(t *testing.T) {
	for _, tc := range []struct {
		recipe string
		dt     codec.DType
		pays   bool // on float32 weights
	}{
		{"shuffle4", codec.F32, false},
		{"shuffle | plane3:huff0", codec.F32, true},
		{"shuffle | *:huff0", codec.F64, true},
		{"shuffle | *:huff0", codec.BF16, true},
		{"shuffle2 | *:huff0", codec.F16, true},
		{"shuffle8 | *:huff0", codec.F32, true}, // tails
		{"shuffle(3) | *:huff0", codec.U8, false},
		{"shuffle(16) | *:huff0", codec.I64, true},
		{"shuffle4 | plane3:raw | *:huff0", codec.F32, false},
		{"shuffle2 | *:shuffle2 | *:huff0", codec.F32, true},
	} {
		sz := tc.dt.Size()
		for _, n := range []int{0, 1, 2, 3, 5, 8, 31, 32, 33, 257, 1000, 4099} {
			codectest.Lossless(t, fastTestTensor("t", tc.dt, fastTestRandom(n*sz, uint64(n))), tc.recipe)
			floats := fastTestFloats((n*sz+3)/4, uint64(n))[:n*sz]
			frame := codectest.Lossless(t, fastTestTensor("t", tc.dt, floats), tc.recipe)
			if n >= 1000 && tc.pays && len(frame) >= len(floats) {
				t.Errorf("%q on %d %v floats: frame of %d bytes", tc.recipe, n, tc.dt, len(frame))
			}
		}
	}
}

func TestShuffleOp(t *testing.T) {
	for _, tc := range []struct{ recipe, text string }{
		{"shuffle2", "shuffle2"},
		{"shuffle4", "shuffle4"},
		{"shuffle8", "shuffle8"},
		{"shuffle(4)", "shuffle4"},
		{"shuffle(width=8)", "shuffle8"},
		{"shuffle(3)", "shuffle(3)"},
		{"shuffle(255)", "shuffle(255)"},
		{"shuffle", "shuffle"},
		{"shuffle()", "shuffle"},
	} {
		fastTestStringRoundTrip(t, fastTestParse(t, tc.recipe), tc.text)
	}
	for _, bad := range []string{"shuffle(1)", "shuffle(0)", "shuffle(256)", "shuffle(x)", "shuffle4(2)", "shuffle(2,3)", "shuffle(w=2)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{nil, {1}, {4, 0}} {
		if _, err := shuffleStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x) = %v, want ErrCorrupt", p, err)
		}
	}

	// Names and lengths.
	op := fastTestParse(t, "shuffle4")
	outs, err := op.Outputs(codec.SegInfo{Name: "val", Elem: codec.F32, Len: 4*10 + 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []codec.SegInfo{
		{Name: "val.plane0", Elem: codec.Byte, Len: 10}, {Name: "val.plane1", Elem: codec.Byte, Len: 10},
		{Name: "val.plane2", Elem: codec.Byte, Len: 10}, {Name: "val.plane3", Elem: codec.Byte, Len: 10},
		{Name: "val.tail", Elem: codec.Byte, Len: 3},
	}
	if fmt.Sprint(outs) != fmt.Sprint(want) {
		t.Errorf("Outputs = %v, want %v", outs, want)
	}
	outs, _ = op.Outputs(codec.SegInfo{Name: "data", Elem: codec.F32, Len: 8})
	if len(outs) != 4 || outs[0].Name != "plane0" || outs[3].Name != "plane3" {
		t.Errorf("Outputs on data = %v", outs)
	}

	// Plain shuffle takes the element size, and refuses bytes.
	auto := fastTestParse(t, "shuffle")
	if outs, err := auto.Outputs(codec.SegInfo{Name: "data", Elem: codec.F64, Len: 16}); err != nil || len(outs) != 8 {
		t.Errorf("shuffle on f64: %v, %v", outs, err)
	}
	if _, err := auto.Outputs(codec.SegInfo{Name: "data", Elem: codec.Byte, Len: 16}); err == nil {
		t.Error("shuffle on bytes: no error")
	}
	enc, _ := codec.NewEncoder()
	if _, err := enc.AppendBytes(nil, make([]byte, 64), codec.MustParseRecipe("shuffle")); !errors.Is(err, codec.ErrRecipe) {
		t.Errorf("shuffle on a byte stream: %v, want ErrRecipe", err)
	}
	if b, err := auto.(shuffleOp).Bind(codec.SegInfo{Elem: codec.F32}); err != nil || b.String() != "shuffle4" {
		t.Errorf("Bind(f32) = %v, %v", b, err)
	}

	// Direct round trips on odd names and lengths.
	for _, w := range []int{2, 3, 4, 8} {
		op := fastTestParse(t, fmt.Sprintf("shuffle(%d)", w))
		for _, n := range []int{0, 1, w - 1, w, w + 1, 5*w + 1, 4096 + 3} {
			fastTestOpRoundTrip(t, op, "val", codec.Byte, fastTestRandom(n, uint64(n)))
		}
	}
}

// TestShuffleDecodeErrors feeds Decode parts that do not fit.
func TestShuffleDecodeErrors(t *testing.T) {
	op := fastTestParse(t, "shuffle4")
	in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4*8 + 2}
	p := func(n int) codec.Segment { return codec.Segment{Data: make([]byte, n)} }
	for i, parts := range [][]codec.Segment{
		nil,
		{p(8), p(8), p(8), p(8)},             // no tail
		{p(8), p(8), p(8), p(8), p(3)},       // long tail
		{p(8), p(8), p(7), p(8), p(2)},       // short plane
		{p(8), p(8), p(8), p(8), p(2), p(1)}, // extra part
	} {
		dst := make([]byte, 0, in.Len)
		if _, err := op.Decode(nil, dst, parts, in); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("case %d: %v, want ErrCorrupt", i, err)
		}
	}
	auto := fastTestParse(t, "shuffle")
	if _, err := auto.Decode(nil, nil, nil, codec.SegInfo{Elem: codec.U8, Len: 4}); !errors.Is(err, codec.ErrCorrupt) {
		t.Errorf("auto width on u8: %v, want ErrCorrupt", err)
	}
}

// Benchmarks: a plain copy of the same buffer is the yardstick (the target
// is 4-byte shuffle and unshuffle at half its speed or better). Run them
// together and interleave repeated runs, e.g.
//
//	go test -run '^$' -bench '^Benchmark(Copy|Shuffle4|Unshuffle4)$' -count 1 ./lossless
var shuffleBenchSizes = []struct {
	name string
	n    int
}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

// shuffleBench times f on a buffer of float32 weights; dst has the same
// size, split into w planes (w 0: not split).
func shuffleBench(b *testing.B, w int, f func(dst []byte, planes [][]byte, src []byte)) {
	for _, sz := range shuffleBenchSizes {
		b.Run(sz.name, func(b *testing.B) {
			src := fastTestFloats(sz.n/4, 1)
			dst := codec.AlignedBytes(sz.n)
			var planes [][]byte
			for k := range w {
				planes = append(planes, dst[k*sz.n/w:(k+1)*sz.n/w])
			}
			copy(dst, src) // fault the pages in before the clock starts
			if w > 0 {
				// The planes must hold data, as the frame payload that Decode
				// reads does: a fresh buffer that is only read is mapped page
				// by page to the kernel's one zero page, and on AMD Zen the L1
				// cache (tagged by virtual address) then misses on every
				// access to the same line through another plane's address,
				// which halved Unshuffle4/64KiB in the runs whose buffer came
				// fresh from the OS (see BenchmarkShufflePlaced).
				shuffleRef(planes, src)
			}
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for b.Loop() {
				f(dst, planes, src)
			}
		})
	}
}

func BenchmarkCopy(b *testing.B) {
	shuffleBench(b, 0, func(dst []byte, _ [][]byte, src []byte) { copy(dst, src) })
}

func shuffleBenchW(b *testing.B, w int, un bool, kernel func(planes [][]byte, src []byte), unkernel func(dst []byte, planes [][]byte)) {
	shuffleBench(b, w, func(_ []byte, planes [][]byte, src []byte) {
		if un {
			unkernel(src, planes)
		} else {
			kernel(planes, src)
		}
	})
}

func BenchmarkShuffle2(b *testing.B)   { shuffleBenchW(b, 2, false, shuffle, unshuffle) }
func BenchmarkUnshuffle2(b *testing.B) { shuffleBenchW(b, 2, true, shuffle, unshuffle) }
func BenchmarkShuffle4(b *testing.B)   { shuffleBenchW(b, 4, false, shuffle, unshuffle) }
func BenchmarkUnshuffle4(b *testing.B) { shuffleBenchW(b, 4, true, shuffle, unshuffle) }
func BenchmarkShuffle8(b *testing.B)   { shuffleBenchW(b, 8, false, shuffle, unshuffle) }
func BenchmarkUnshuffle8(b *testing.B) { shuffleBenchW(b, 8, true, shuffle, unshuffle) }

// The pure-Go kernels (what non-amd64 and noasm builds run), the blocked
// generic loop and the naive reference loop, for comparison.
func BenchmarkShuffle4Go(b *testing.B) {
	shuffleBenchW(b, 4, false, shuffleTestPaths["go"].shuffle, nil)
}
func BenchmarkUnshuffle4Go(b *testing.B) {
	shuffleBenchW(b, 4, true, nil, shuffleTestPaths["go"].unshuffle)
}
func BenchmarkShuffle4Generic(b *testing.B)   { shuffleBenchW(b, 4, false, shuffleGeneric, nil) }
func BenchmarkUnshuffle4Generic(b *testing.B) { shuffleBenchW(b, 4, true, nil, unshuffleGeneric) }
func BenchmarkShuffle4Ref(b *testing.B)       { shuffleBenchW(b, 4, false, shuffleRef, nil) }
func BenchmarkUnshuffle4Ref(b *testing.B)     { shuffleBenchW(b, 4, true, nil, unshuffleRef) }

// shuffleBenchPlaced times shuffle or unshuffle of n bytes at width w with
// the placement fixed: the planes lie back to back from a 4096-aligned
// address and the interleaved buffer starts off bytes past another
// 4096-aligned address, so that off is its offset modulo 4096 relative to
// every plane (the offset that the allocator otherwise picks per run).
func shuffleBenchPlaced(b *testing.B, w, n, off int, un bool) {
	const page = 4096
	aligned := func(size, off int) []byte {
		buf := make([]byte, size+2*page)
		a := int(uintptr(unsafe.Pointer(&buf[0])) % page)
		s := (page-a)%page + off
		return buf[s : s+size : s+size]
	}
	inter := aligned(n, off)
	copy(inter, fastTestFloats(n/4, 1))
	pbuf := aligned(n, 0)
	planes := make([][]byte, w)
	for k := range planes {
		planes[k] = pbuf[k*(n/w) : (k+1)*(n/w)]
	}
	shuffle(planes, inter)
	b.SetBytes(int64(n))
	for b.Loop() {
		if un {
			unshuffle(inter, planes)
		} else {
			shuffle(planes, inter)
		}
	}
}

// BenchmarkShufflePlaced runs every fast width, both ways, at 64 KiB and
// 1 MiB with the interleaved buffer at several offsets (mod 4096) from the
// planes: a kernel whose speed depends on its buffers' placement shows
// here as a spread across offsets, where the plain benchmarks give
// bimodal results from run to run.
func BenchmarkShufflePlaced(b *testing.B) {
	for _, dir := range []string{"Shuffle", "Unshuffle"} {
		for _, w := range []int{2, 4, 8} {
			for _, sz := range shuffleBenchSizes[:2] {
				for _, off := range []int{0, 1, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4032} {
					name := fmt.Sprintf("%s%d/%s/off=%d", dir, w, sz.name, off)
					b.Run(name, func(b *testing.B) { shuffleBenchPlaced(b, w, sz.n, off, dir == "Unshuffle") })
				}
			}
		}
	}
}

// TestShuffleKernelsNT runs the non-temporal kernels (which normally take
// only outputs of shuffleNTMin bytes or more) on small outputs, 32-byte
// aligned and not, against the reference loops, with guard bytes.
func TestShuffleKernelsNT(t *testing.T) {
	defer func(v int) { shuffleNTMin = v }(shuffleNTMin)
	shuffleNTMin = 0
	const guard = 0x5a
	// at returns a length-n slice of a guarded buffer, starting off bytes
	// past a multiple of 32.
	at := func(n, off int) (s, buf []byte) {
		buf = bytes.Repeat([]byte{guard}, n+96)
		a := int(uintptr(unsafe.Pointer(&buf[0])) % 32)
		s0 := (32-a)%32 + off
		return buf[s0 : s0+n : s0+n], buf[s0+n:]
	}
	for _, w := range []int{2, 4, 8} {
		for _, m := range []int{32, 33, 64, 100, 1024, 4097} {
			for _, off := range []int{0, 8, 1} {
				src := fastTestRandom(m*w, uint64(m*w))
				want := make([][]byte, w)
				got := make([][]byte, w)
				after := make([][]byte, w)
				for k := range w {
					want[k] = make([]byte, m)
					got[k], after[k] = at(m, off)
				}
				shuffleRef(want, src)
				shuffle(got, src)
				for k := range w {
					if !bytes.Equal(got[k], want[k]) || bytes.Count(after[k], []byte{guard}) != len(after[k]) {
						t.Fatalf("shuffle w=%d m=%d off=%d: plane %d differs or overran", w, m, off, k)
					}
				}
				dst, rest := at(m*w, off)
				unshuffle(dst, want)
				if !bytes.Equal(dst, src) || bytes.Count(rest, []byte{guard}) != len(rest) {
					t.Fatalf("unshuffle w=%d m=%d off=%d differs or overran", w, m, off)
				}
			}
		}
	}
}
