package lossy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
	"github.com/tensorpress/tensorpress/internal/float16"
	_ "github.com/tensorpress/tensorpress/lossless"
)

// Tests of the fp16 and bf16 stages: the kernels against the reference
// loops of internal/float16, the conversions against PyTorch's vectors,
// the documented error bounds, and recipes end to end.

var floatExhaustive = flag.Bool("float.exhaustive", false,
	"check the f32 encode kernels and Go loops on all 2^32 float32 inputs (about a minute on two cores)")

// halfRefEncode is the encode reference loop of float.go, element by
// element with the scalar conversions of internal/float16.
func halfRefEncode(src []byte, elem codec.DType, bf bool) []byte {
	sz := elem.Size()
	n := len(src) / sz
	out := make([]byte, 2*n)
	for i := range n {
		var h uint16
		switch {
		case elem == codec.F64 && bf:
			h = float16.BF16FromF64(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		case elem == codec.F64:
			h = float16.F16FromF64(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		case bf:
			h = float16.BF16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
		default:
			h = float16.F16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
		}
		binary.LittleEndian.PutUint16(out[2*i:], h)
	}
	return out
}

// halfRefDecode is the decode reference loop of float.go.
func halfRefDecode(src []byte, elem codec.DType, bf bool) []byte {
	n := len(src) / 2
	out := make([]byte, n*elem.Size())
	for i := range n {
		h := binary.LittleEndian.Uint16(src[2*i:])
		switch {
		case elem == codec.F64 && bf:
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(float16.BF16ToF64(h)))
		case elem == codec.F64:
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(float16.F16ToF64(h)))
		case bf:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float16.BF16ToF32(h)))
		default:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float16.F16ToF32(h)))
		}
	}
	return out
}

// halfBitsBytes returns the little-endian bytes of the float32 bit
// patterns, 8-byte aligned.
func halfBitsBytes(bits []uint32) []byte {
	b := codec.AlignedBytes(4 * len(bits))
	for i, v := range bits {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// halfEdgeBits returns float32 bit patterns where conversions go wrong if
// they go wrong anywhere: every fp16 value as a float32 with its
// neighbours, every midpoint between adjacent fp16 values with its
// neighbours, every bf16 value with the low halves 0x7fff, 0x8000 and
// 0x8001, NaNs of all kinds, infinities, zeros, subnormals, the overflow
// boundaries; both signs; then n random patterns.
func halfEdgeBits(n int, seed uint64) []uint32 {
	var bits []uint32
	add := func(b uint32) { bits = append(bits, b, b^0x80000000) }
	for h := range 0x7c00 {
		v := float16.F16ToF32(uint16(h))
		b := math.Float32bits(v)
		add(b)
		add(b + 1)
		add(b - 1)
		mid := float32((float64(v) + float64(float16.F16ToF32(uint16(h+1)))) / 2) // exact
		m := math.Float32bits(mid)
		for d := uint32(0); d < 3; d++ {
			add(m + d)
			add(m - d)
		}
	}
	for h := range 0x8000 {
		for _, low := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff} {
			add(uint32(h)<<16 | low)
		}
	}
	for _, b := range []uint32{0x7f800001, 0x7fbfffff, 0x7fc00000, 0x7fc00001, 0x7fffffff, 0x7f802000, 0x7fe00000,
		0x7f800000, 0, 1, 0x007fffff, 0x00800000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000,
		0x33000000, 0x33000001, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff} {
		add(b)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for range n {
		bits = append(bits, r.Uint32())
	}
	return bits
}

// halfModes are the four stage/element type combinations.
var halfModes = []struct {
	bf   bool
	elem codec.DType
}{{false, codec.F32}, {true, codec.F32}, {false, codec.F64}, {true, codec.F64}}

func halfName(bf bool) string {
	if bf {
		return "bf16"
	}
	return "fp16"
}

// TestFloatKernelsEdges checks halfEncode (whatever kernel this build and
// CPU use) and the Go loops on the edge inputs, and halfDecode on all
// 65536 patterns, against the reference loops.
func TestFloatKernelsEdges(t *testing.T) {
	t.Logf("AVX2 %v, F16C %v", halfHasAVX2, halfHasF16C)
	src := halfBitsBytes(halfEdgeBits(1<<21, 1))
	all := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(all[2*i:], uint16(i))
	}
	for _, bf := range []bool{false, true} {
		name := halfName(bf)
		want := halfRefEncode(src, codec.F32, bf)
		got := make([]byte, len(want))
		halfEncode(got, src, codec.F32, bf)
		halfCompare16(t, name+" encode", src, got, want)
		for _, elem := range []codec.DType{codec.F32, codec.F64} {
			want := halfRefDecode(all, elem, bf)
			got := make([]byte, len(want))
			halfDecode(got, all, elem, bf)
			if !bytes.Equal(got, want) {
				t.Errorf("%s decode to %v of all patterns differs from the reference", name, elem)
			}
		}
		// The Go loops, on typed views (aligned) and through their
		// staging buffers (misaligned by one byte).
		for _, off := range []int{0, 1} {
			in := append(make([]byte, off), src...)[off:]
			out := make([]byte, off+len(want))[off:]
			if bf {
				bf16EncodeGo(out, in)
			} else {
				fp16EncodeGo(out, in)
			}
			halfCompare16(t, fmt.Sprintf("%s encode (Go loop, offset %d)", name, off), src, out, want)
			in = append(make([]byte, off), all...)[off:]
			out = make([]byte, off+4<<16)[off:]
			if bf {
				bf16DecodeGo(out, in)
			} else {
				fp16DecodeGo(out, in)
			}
			if !bytes.Equal(out, halfRefDecode(all, codec.F32, bf)) {
				t.Errorf("%s decode (Go loop, offset %d) of all patterns differs from the reference", name, off)
			}
		}
	}
}

// halfCompare16 reports the first difference between two outputs of 16-bit
// patterns computed from the float32 patterns in src.
func halfCompare16(t *testing.T, what string, src, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := 0; i+1 < len(want); i += 2 {
		if got[i] != want[i] || got[i+1] != want[i+1] {
			t.Fatalf("%s: element %d: input %#08x gives %#04x, want %#04x", what, i/2,
				binary.LittleEndian.Uint32(src[2*i:]), binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(want[i:]))
		}
	}
	t.Fatalf("%s: lengths %d, want %d", what, len(got), len(want))
}

// TestFloatKernelsTails runs the kernels at every length from 0 to 70
// elements plus a few long ones, at misaligned source and destination
// addresses, with guard bytes around the output that must stay as they
// were; once as they run on such lengths, once with the non-temporal
// kernels (and the Go loop before the first 32-byte boundary) forced.
func TestFloatKernelsTails(t *testing.T) {
	for _, nt := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "stream"}[nt], func(t *testing.T) {
			if nt {
				defer func(m int) { halfNTMin = m }(halfNTMin)
				halfNTMin = 0
			}
			floatKernelsTails(t)
		})
	}
}

func floatKernelsTails(t *testing.T) {
	bits := halfEdgeBits(0, 2)
	r := rand.New(rand.NewPCG(3, 3))
	const guard = 32
	lengths := []int{}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 95, 96, 97, 127, 128, 129, 1000, 4099)
	for _, m := range halfModes {
		sz := m.elem.Size()
		for _, n := range lengths {
			for _, off := range []int{0, 1, 2, 3, 5, 7} {
				// Input: n elements at offset off, from the edge patterns.
				raw := codec.AlignedBytes(off + n*sz)
				in := raw[off:]
				for i := range n {
					b := bits[r.IntN(len(bits))]
					if m.elem == codec.F64 {
						x := float64(math.Float32frombits(b))
						if r.IntN(4) == 0 {
							x = math.Float64frombits(r.Uint64())
						}
						binary.LittleEndian.PutUint64(in[8*i:], math.Float64bits(x))
					} else {
						binary.LittleEndian.PutUint32(in[4*i:], b)
					}
				}
				what := fmt.Sprintf("%s %v n=%d off=%d", halfName(m.bf), m.elem, n, off)
				want := halfRefEncode(in, m.elem, m.bf)
				// Outputs start at various offsets from a 32-byte
				// boundary, and once at an odd address (off 7).
				start := guard + 2*off + off/7
				buf := floatGuarded(start+2*n+guard, 0xa5)
				out := buf[start : start+2*n]
				halfEncode(out, in, m.elem, m.bf)
				if !bytes.Equal(out, want) {
					t.Fatalf("%s: encode differs from the reference", what)
				}
				halfCheckGuards(t, what+" encode", buf, start, 2*n)

				wantDec := halfRefDecode(want, m.elem, m.bf)
				enc := append(make([]byte, off), want...)[off:] // misaligned source
				start = guard + 4*off + 2*(off/7)
				buf = floatGuarded(start+n*sz+guard, 0x5a)
				dec := buf[start : start+n*sz]
				halfDecode(dec, enc, m.elem, m.bf)
				if !bytes.Equal(dec, wantDec) {
					t.Fatalf("%s: decode differs from the reference", what)
				}
				halfCheckGuards(t, what+" decode", buf, start, n*sz)
			}
		}
	}
}

// floatGuarded returns n bytes set to g, starting at a 32-byte boundary.
func floatGuarded(n int, g byte) []byte {
	b := codec.AlignedBytes(n + 32)
	a := int(uintptr(unsafe.Pointer(&b[0])) % 32)
	b = b[(32-a)%32:][:n]
	for i := range b {
		b[i] = g
	}
	return b
}

func halfCheckGuards(t *testing.T, what string, buf []byte, start, n int) {
	t.Helper()
	g := buf[0]
	for i, c := range buf {
		if (i < start || i >= start+n) && c != g {
			t.Fatalf("%s: guard byte %d (output is [%d, %d)) overwritten: %#02x", what, i, start, start+n, c)
		}
	}
}

// TestFloatKernelsAll checks the f32 encode path of this build (the
// kernels where the CPU has them) and the Go loops against the scalar
// reference of internal/float16, on every float32 input with
// -float.exhaustive (about a minute on two cores), otherwise on every
// 4099th (4099 is odd: every low-bit pattern is met), in chunks on all
// cores. internal/float16's own tests check the scalar reference (on all
// 2^32 inputs with -float16.exhaustive).
func TestFloatKernelsAll(t *testing.T) {
	stride := uint64(4099)
	if *floatExhaustive {
		stride = 1
	} else if testing.Short() {
		stride = 65521
	}
	const chunk = 1 << 16
	for _, bf := range []bool{false, true} {
		var (
			mu   sync.Mutex
			next uint64
			fail string
			wg   sync.WaitGroup
		)
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				src := codec.AlignedBytes(4 * chunk)
				got := make([]byte, 2*chunk)
				goLoop := make([]byte, 2*chunk)
				for {
					mu.Lock()
					base := next
					next += chunk * stride
					stop := fail != "" || base >= 1<<32
					mu.Unlock()
					if stop {
						return
					}
					n := 0
					for i := base; i < base+chunk*stride && i < 1<<32; i += stride {
						binary.LittleEndian.PutUint32(src[4*n:], uint32(i))
						n++
					}
					halfEncode(got[:2*n], src[:4*n], codec.F32, bf)
					if bf {
						bf16EncodeGo(goLoop[:2*n], src[:4*n])
					} else {
						fp16EncodeGo(goLoop[:2*n], src[:4*n])
					}
					for i := range n {
						b := binary.LittleEndian.Uint32(src[4*i:])
						var want uint16
						if bf {
							want = float16.BF16FromF32(math.Float32frombits(b))
						} else {
							want = float16.F16FromF32(math.Float32frombits(b))
						}
						g, h := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(goLoop[2*i:])
						if g != want || h != want {
							mu.Lock()
							fail = fmt.Sprintf("%s encode of %#08x: %#04x (Go loop %#04x), want %#04x", halfName(bf), b, g, h, want)
							mu.Unlock()
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		if fail != "" {
			t.Fatal(fail)
		}
	}
}

// TestFloatExported checks the typed wrappers.
func TestFloatExported(t *testing.T) {
	xs := []float32{0, 1, -2.5, 65504, 65520, 1e-8, float32(math.Inf(-1)), float32(math.NaN()), 3.3895314e38}
	h := make([]uint16, len(xs))
	back := make([]float32, len(xs))
	F32ToFP16(h, xs)
	FP16ToF32(back, h)
	for i, x := range xs {
		if want := float16.F16FromF32(x); h[i] != want {
			t.Errorf("F32ToFP16(%g) = %#04x, want %#04x", x, h[i], want)
		}
		if want := float16.F16ToF32(h[i]); math.Float32bits(back[i]) != math.Float32bits(want) {
			t.Errorf("FP16ToF32(%#04x) = %g, want %g", h[i], back[i], want)
		}
	}
	F32ToBF16(h, xs)
	BF16ToF32(back, h)
	for i, x := range xs {
		if want := float16.BF16FromF32(x); h[i] != want {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", x, h[i], want)
		}
		if want := float16.BF16ToF32(h[i]); math.Float32bits(back[i]) != math.Float32bits(want) {
			t.Errorf("BF16ToF32(%#04x) = %g, want %g", h[i], back[i], want)
		}
	}
	F32ToFP16(nil, nil)
	defer func() {
		if recover() == nil {
			t.Error("F32ToFP16 with a short dst did not panic")
		}
	}()
	F32ToFP16(h[:1], xs)
}

// Reference vectors made by PyTorch (testvectors/reference/fp, README.md
// there).

const floatRefDir = "../testvectors/reference/fp"

func floatRefFiles(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(floatRefDir); err != nil {
		t.Skipf("no reference vectors: %v", err)
	}
}

// TestFloatTorchVectors checks both directions of both formats against
// the vectors torch made: the scalar reference, the kernels and the
// stages, bit for bit, NaNs included.
func TestFloatTorchVectors(t *testing.T) {
	floatRefFiles(t)
	in := readNpyAs(t, filepath.Join(floatRefDir, "f32_in.npy"), codec.F32)
	n := len(in) / 4
	for _, bf := range []bool{false, true} {
		name := halfName(bf)
		file := "f16_torch.npy"
		if bf {
			file = "bf16_torch.npy"
		}
		want := readNpyAs(t, filepath.Join(floatRefDir, file), codec.U16)
		if len(want) != 2*n {
			t.Fatalf("%s: %d bytes for %d inputs", file, len(want), n)
		}
		// The scalar reference, element by element.
		bad := 0
		for i := range n {
			x := math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
			var h uint16
			if bf {
				h = float16.BF16FromF32(x)
			} else {
				h = float16.F16FromF32(x)
			}
			if w := binary.LittleEndian.Uint16(want[2*i:]); h != w {
				if bad++; bad <= 10 {
					t.Errorf("%s: input %d (%#08x): %#04x, torch %#04x", name, i, math.Float32bits(x), h, w)
				}
			}
		}
		// The kernels, on the whole tensor and at every start offset mod
		// 32 (so that each input meets the vector loop and the tail).
		got := make([]byte, 2*n)
		for s := range 33 {
			halfEncode(got[2*s:], in[4*s:], codec.F32, bf)
			if !bytes.Equal(got[2*s:], want[2*s:]) {
				t.Fatalf("%s: the encode kernel from element %d differs from torch", name, s)
			}
		}
		// The stage, through a recipe.
		tn := codec.NewTensor("x", codec.F32, int64(n))
		copy(tn.Data, in)
		dec := codectest.RoundTrip(t, tn, name)
		if wantDec := halfRefDecode(want, codec.F32, bf); !bytes.Equal(dec.Data, wantDec) {
			t.Errorf("%s: recipe round trip differs from torch's bits widened", name)
		}

		// Widening: all 65536 patterns.
		file = "f16_all_to_f32_torch.npy"
		if bf {
			file = "bf16_all_to_f32_torch.npy"
		}
		wantAll := readNpyAs(t, filepath.Join(floatRefDir, file), codec.U32)
		if len(wantAll) != 4<<16 {
			t.Fatalf("%s: %d bytes, want %d", file, len(wantAll), 4<<16)
		}
		all := make([]byte, 2<<16)
		for i := range 1 << 16 {
			binary.LittleEndian.PutUint16(all[2*i:], uint16(i))
			var f float32
			if bf {
				f = float16.BF16ToF32(uint16(i))
			} else {
				f = float16.F16ToF32(uint16(i))
			}
			if w := binary.LittleEndian.Uint32(wantAll[4*i:]); math.Float32bits(f) != w {
				if bad++; bad <= 10 {
					t.Errorf("%s: widening %#04x: %#08x, torch %#08x", name, i, math.Float32bits(f), w)
				}
			}
		}
		gotAll := make([]byte, 4<<16)
		for s := range 33 {
			halfDecode(gotAll[4*s:], all[2*s:], codec.F32, bf)
			if !bytes.Equal(gotAll[4*s:], wantAll[4*s:]) {
				t.Fatalf("%s: the decode kernel from element %d differs from torch", name, s)
			}
		}
	}
	// torch's scalar bf16 path differs from its vector path exactly at the
	// NaNs (0x7fc0 against 0xffff); we follow the vector path. Check that
	// this is still what the vectors say.
	scalar := filepath.Join(floatRefDir, "bf16_torch_scalar.npy")
	if _, err := os.Stat(scalar); err == nil {
		sc := readNpyAs(t, scalar, codec.U16)
		vec := readNpyAs(t, filepath.Join(floatRefDir, "bf16_torch.npy"), codec.U16)
		for i := range n {
			x := math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
			s, v := binary.LittleEndian.Uint16(sc[2*i:]), binary.LittleEndian.Uint16(vec[2*i:])
			if x == x && s != v || x != x && (s != 0x7fc0 || v != float16.NaNBF16) {
				t.Errorf("bf16 input %#08x: torch scalar %#04x, vector %#04x", math.Float32bits(x), s, v)
			}
		}
	}
}

// Error bounds.

// checkFloatBound checks the documented error bound of the fp16 stage
// (bf false) or the bf16 stage (bf true) for each original value x[i] and
// its decoded value y[i], and reports violations (at most 10) on tb. It
// returns the largest relative error seen among normal results and the
// largest absolute error among subnormal ones. The bounds, from the stage
// documentation in float.go:
//
//	fp16: |x| >= 65520: y = ±Inf with x's sign (overflow)
//	      2^-14 <= |x| < 65520: |x - y| <= 2^-11*|x|
//	      |x| < 2^-14: |x - y| <= 2^-25
//	bf16: |x| >= 0x1.ffp127: y = ±Inf
//	      2^-126 <= |x|: |x - y| <= 2^-8*|x|
//	      |x| < 2^-126: |x - y| <= 2^-134
//
// and for both: NaN gives NaN, ±Inf and ±0 come back exactly (the sign of
// zero included), and y never has the opposite sign of x.
//
// Use it on real data by decoding it with the stage (through a recipe or
// halfOp directly) and passing both as float64.
func checkFloatBound(tb testing.TB, what string, bf bool, x, y []float64) (maxRel, maxAbs float64) {
	tb.Helper()
	if len(x) != len(y) {
		tb.Fatalf("%s: %d values, %d decoded", what, len(x), len(y))
	}
	over, minNormal, rel, abs := 65520.0, 0x1p-14, 0x1p-11, 0x1p-25
	if bf {
		over, minNormal, rel, abs = 0x1.ffp127, 0x1p-126, 0x1p-8, 0x1p-134
	}
	bad := 0
	fail := func(i int, why string) {
		if bad++; bad <= 10 {
			tb.Errorf("%s: element %d: %g (%#016x) decoded as %g (%#016x): %s", what, i, x[i], math.Float64bits(x[i]), y[i], math.Float64bits(y[i]), why)
		}
	}
	for i, xi := range x {
		yi := y[i]
		a := math.Abs(xi)
		switch {
		case math.IsNaN(xi):
			if !math.IsNaN(yi) {
				fail(i, "NaN lost")
			}
		case math.IsInf(xi, 0) || xi == 0:
			if math.Float64bits(xi) != math.Float64bits(yi) {
				fail(i, "not exact")
			}
		case math.IsNaN(yi) || math.Signbit(xi) != math.Signbit(yi):
			fail(i, "wrong sign or NaN")
		case a >= over:
			if !math.IsInf(yi, 0) {
				fail(i, "should overflow to Inf")
			}
		case math.IsInf(yi, 0):
			fail(i, "overflow below the threshold")
		case a >= minNormal:
			e := math.Abs(xi-yi) / a
			maxRel = max(maxRel, e)
			if e > rel {
				fail(i, fmt.Sprintf("relative error %g > %g", e, rel))
			}
		default:
			e := math.Abs(xi - yi)
			maxAbs = max(maxAbs, e)
			if e > abs {
				fail(i, fmt.Sprintf("absolute error %g > %g", e, abs))
			}
		}
	}
	if bad > 10 {
		tb.Errorf("%s: %d violations in all", what, bad)
	}
	return maxRel, maxAbs
}

// floatCodeF32 runs x through the stage's op as float32 and returns x and
// the decoded values as float64.
func floatCodeF32(t testing.TB, bf bool, x []float32) (orig, dec []float64) {
	t.Helper()
	src := codec.AlignedBytes(4 * len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(v))
	}
	out := floatOpRoundTrip(t, halfOp{bf: bf}, codec.F32, src)
	orig, dec = make([]float64, len(x)), make([]float64, len(x))
	for i := range x {
		orig[i] = float64(x[i])
		dec[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])))
	}
	return orig, dec
}

// floatOpRoundTrip encodes src (elements of type elem) with op, checks the
// encoded segment against the reference loop, decodes it into a buffer
// with a guard byte after it and returns the decoded bytes.
func floatOpRoundTrip(t testing.TB, op halfOp, elem codec.DType, src []byte) []byte {
	t.Helper()
	in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: elem, Len: len(src)}, Data: src}
	outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Name != "data" || outs[0].Elem != op.elem() || outs[0].Len != len(src)/elem.Size()*2 {
		t.Fatalf("%s: encode made %+v", op, outs)
	}
	if want := halfRefEncode(src, elem, op.bf); !bytes.Equal(outs[0].Data, want) {
		t.Fatalf("%s: encoded %v differs from the reference", op, elem)
	}
	dst := make([]byte, 3, 3+len(src)+1)
	full := dst[:cap(dst)]
	full[len(full)-1] = 0xee
	got, err := op.Decode(nil, dst, outs, in.SegInfo)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3+len(src) || full[len(full)-1] != 0xee {
		t.Fatalf("%s: decode appended %d bytes (want %d) or wrote past them", op, len(got)-3, len(src))
	}
	return got[3:]
}

// floatSamples returns named float32 data sets for the bound tests.
func floatSamples(n int) map[string][]float32 {
	r := rand.New(rand.NewPCG(11, 12))
	sets := map[string][]float32{}
	gen := func(name string, f func() float64) {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(f())
		}
		sets[name] = x
	}
	gen("N(0,1)", r.NormFloat64)
	gen("N(0,0.02)", func() float64 { return 0.02 * r.NormFloat64() })
	// Uniform over exponents: fp16's range and beyond, and float32's.
	gen("exp[-30,17]", func() float64 { return math.Ldexp(1+r.Float64(), r.IntN(48)-30) * float64(1-2*r.IntN(2)) })
	gen("exp[-149,127]", func() float64 { return math.Ldexp(1+r.Float64(), r.IntN(277)-149) * float64(1-2*r.IntN(2)) })
	gen("bits", func() float64 { return float64(math.Float32frombits(r.Uint32())) })
	// A realistic spread: a layer of N(0,0.02) weights with a few large
	// outliers, small gradients, exact zeros (ReLU, pruning) and the odd
	// special value.
	gen("mixed", func() float64 {
		switch k := r.IntN(1000); {
		case k < 600:
			return 0.02 * r.NormFloat64()
		case k < 850:
			return 1e-5 * r.NormFloat64()
		case k < 950:
			return 0
		case k < 990:
			return 8 * r.NormFloat64()
		case k < 995:
			return 1e5 * r.NormFloat64()
		case k < 997:
			return math.Copysign(0, -1)
		case k < 998:
			return math.NaN()
		case k < 999:
			return math.Inf(1 - 2*r.IntN(2))
		}
		return 1e-7 * r.Float64()
	})
	return sets
}

// TestFloatBound asserts the documented bounds on random data sets, for
// float32 and float64 input, and that the bounds are not loose: on N(0,1)
// the largest relative error comes within 10% of the bound.
func TestFloatBound(t *testing.T) {
	for name, x := range floatSamples(100000) {
		for _, bf := range []bool{false, true} {
			what := halfName(bf) + " " + name
			orig, dec := floatCodeF32(t, bf, x)
			rel, abs := checkFloatBound(t, what, bf, orig, dec)
			t.Logf("%-22s max relative error %.3g, max absolute (subnormal) %.3g", what, rel, abs)
			if name == "N(0,1)" {
				if b := map[bool]float64{false: 0x1p-11, true: 0x1p-8}[bf]; rel < 0.9*b {
					t.Errorf("%s: max relative error %g, far below the bound %g: is the bound right?", what, rel, b)
				}
			}
		}
	}
	// float64 input, rounded once, over float64's exponents too.
	r := rand.New(rand.NewPCG(13, 14))
	x := make([]float64, 100000)
	for i := range x {
		switch i % 3 {
		case 0:
			x[i] = r.NormFloat64()
		case 1:
			x[i] = math.Ldexp(1+r.Float64(), r.IntN(400)-200) * float64(1-2*r.IntN(2))
		default:
			x[i] = math.Float64frombits(r.Uint64())
		}
	}
	src := codec.AlignedBytes(8 * len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(src[8*i:], math.Float64bits(v))
	}
	for _, bf := range []bool{false, true} {
		out := floatOpRoundTrip(t, halfOp{bf: bf}, codec.F64, src)
		y := make([]float64, len(x))
		for i := range y {
			y[i] = math.Float64frombits(binary.LittleEndian.Uint64(out[8*i:]))
		}
		checkFloatBound(t, halfName(bf)+" f64", bf, x, y)
	}
}

// TestFloatBoundModel asserts the bounds on the trained model's weights
// and gradients (testvectors/reference/model), when they are there.
func TestFloatBoundModel(t *testing.T) {
	files, _ := filepath.Glob("../testvectors/reference/model/*/*.npy")
	if len(files) == 0 {
		t.Skip("no model weights in testvectors/reference/model")
	}
	for _, f := range files {
		data := readNpyAs(t, f, codec.F32)
		x := make([]float32, len(data)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		for _, bf := range []bool{false, true} {
			what := halfName(bf) + " " + filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f)
			orig, dec := floatCodeF32(t, bf, x)
			rel, abs := checkFloatBound(t, what, bf, orig, dec)
			t.Logf("%-32s %6d values: max relative error %.3g, max absolute (subnormal) %.3g", what, len(x), rel, abs)
		}
	}
}

// The stages.

func TestFloatStages(t *testing.T) {
	for _, c := range []struct {
		id   codec.StageID
		name string
		elem codec.DType
	}{{FP16ID, "fp16", codec.F16}, {BF16ID, "bf16", codec.BF16}} {
		s, ok := codec.Lookup(c.id)
		if !ok || s.Name != c.name || s.Kind != codec.Filter || s.Granularity != codec.Elementwise || !s.Lossy || s.Doc == "" {
			t.Fatalf("stage %d: %+v", c.id, s)
		}
		if s2, args, ok := codec.LookupName(c.name); !ok || s2 != s || len(args) != 0 {
			t.Fatalf("LookupName(%q) = %v, %v, %v", c.name, s2, args, ok)
		}
		op, err := s.New(nil)
		if err != nil || op.String() != c.name || op.Stage() != s || len(op.AppendParams(nil)) != 0 {
			t.Fatalf("%s: New: %v, %v", c.name, op, err)
		}
		if _, err := s.New([]codec.Arg{{Value: "1"}}); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%s(1): %v, want ErrRecipe", c.name, err)
		}
		if _, err := codec.ParseRecipe(c.name + "(3)"); err == nil {
			t.Errorf("ParseRecipe(%s(3)) accepted", c.name)
		}
		if op2, err := s.Load(nil); err != nil || op2 != op {
			t.Errorf("%s: Load(nil) = %v, %v", c.name, op2, err)
		}
		if op2, err := s.Load([]byte{}); err != nil || op2 != op {
			t.Errorf("%s: Load([]) = %v, %v", c.name, op2, err)
		}
		if _, err := s.Load([]byte{0}); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%s: Load([0]): %v, want ErrCorrupt", c.name, err)
		}
		for _, in := range []codec.SegInfo{
			{Name: "data", Elem: codec.F32, Len: 40},
			{Name: "val", Elem: codec.F64, Len: 40},
			{Name: "x", Elem: codec.F32, Len: 0},
		} {
			outs, err := op.Outputs(in)
			want := codec.SegInfo{Name: in.Name, Elem: c.elem, Len: in.Len / in.Elem.Size() * 2}
			if err != nil || len(outs) != 1 || outs[0] != want {
				t.Errorf("%s: Outputs(%+v) = %+v, %v; want %+v", c.name, in, outs, err, want)
			}
		}
		for _, in := range []codec.SegInfo{
			{Name: "data", Elem: codec.F16, Len: 40},
			{Name: "data", Elem: codec.BF16, Len: 40},
			{Name: "data", Elem: codec.I32, Len: 40},
			{Name: "data", Elem: codec.Byte, Len: 40},
			{Name: "data", Elem: codec.U8, Len: 40},
			{Name: "data", Elem: codec.F32, Len: 41},
			{Name: "data", Elem: codec.F64, Len: 12},
			{Name: "data", Elem: codec.F32, Len: -1},
		} {
			if outs, err := op.Outputs(in); err == nil {
				t.Errorf("%s: Outputs(%+v) = %+v, want an error", c.name, in, outs)
			} else if in.Elem != codec.F32 && in.Elem != codec.F64 && !strings.Contains(err.Error(), "f32 and f64") {
				t.Errorf("%s: Outputs(%+v): unclear error %q", c.name, in, err)
			}
			if in.Len < 0 {
				continue // Encode takes the length from the data
			}
			if _, err := op.Encode(nil, codec.Segment{SegInfo: in, Data: make([]byte, in.Len)}); err == nil {
				t.Errorf("%s: Encode(%+v) accepted", c.name, in)
			}
		}
	}
}

// TestFloatDecodeErrors feeds Decode parts that do not fit the input it
// is told about.
func TestFloatDecodeErrors(t *testing.T) {
	for _, bf := range []bool{false, true} {
		op := halfOp{bf: bf}
		in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 16}
		seg := func(n int) codec.Segment {
			return codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: op.elem(), Len: n}, Data: make([]byte, n)}
		}
		dst := make([]byte, 0, 64)
		for _, c := range []struct {
			parts []codec.Segment
			in    codec.SegInfo
		}{
			{nil, in},
			{[]codec.Segment{seg(8), seg(8)}, in},
			{[]codec.Segment{seg(7)}, in},
			{[]codec.Segment{seg(9)}, in},
			{[]codec.Segment{seg(8)}, codec.SegInfo{Name: "data", Elem: codec.I32, Len: 16}},
			{[]codec.Segment{seg(8)}, codec.SegInfo{Name: "data", Elem: codec.F32, Len: 15}},
			{[]codec.Segment{seg(8)}, codec.SegInfo{Name: "data", Elem: codec.F64, Len: 16}},
			{[]codec.Segment{seg(8)}, codec.SegInfo{Name: "data", Elem: codec.F32, Len: -1}},
		} {
			if _, err := op.Decode(nil, dst, c.parts, c.in); !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s: Decode(%d parts, %+v): %v, want ErrCorrupt", op, len(c.parts), c.in, err)
			}
		}
		if _, err := op.Decode(nil, make([]byte, 0, 15), []codec.Segment{seg(8)}, in); err == nil {
			t.Errorf("%s: Decode into a short dst accepted", op)
		}
	}
}

// TestFloatRecipes runs the stages end to end through codec, on float32
// and float64 tensors, alone and followed by lossless stages, and checks
// the decoded values bit for bit against the scalar reference.
func TestFloatRecipes(t *testing.T) {
	sets := floatSamples(50000)
	for _, recipe := range []string{"fp16", "bf16", "fp16 | shuffle2 | plane1:huff0", "bf16 | *:zstd(1)",
		"fp16 | shuffle2 | *:zstd(1)", "bf16 | shuffle | plane1:huff0 | *:s2"} {
		bf := strings.HasPrefix(recipe, "bf16")
		for _, name := range []string{"N(0,0.02)", "mixed"} {
			x := sets[name]
			for _, dt := range []codec.DType{codec.F32, codec.F64} {
				tn := codec.NewTensor("layer."+name, dt, 2, int64(len(x)/2))
				for i, v := range x {
					if dt == codec.F32 {
						binary.LittleEndian.PutUint32(tn.Data[4*i:], math.Float32bits(v))
					} else {
						binary.LittleEndian.PutUint64(tn.Data[8*i:], math.Float64bits(float64(v)*(1+0x1p-30)))
					}
				}
				got := codectest.RoundTrip(t, tn, recipe)
				want := halfRefDecode(halfRefEncode(tn.Data, dt, bf), dt, bf)
				if !bytes.Equal(got.Data, want) {
					t.Errorf("%q on %s %v: decoded values differ from the scalar reference", recipe, name, dt)
				}
			}
		}
		// Tensors tagged lossless are refused before anything is coded.
		tn := codec.NewTensor("w", codec.F32, 64)
		tn.Tags.Lossless = true
		enc, err := codec.NewEncoder()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := enc.AppendTensor(nil, tn, codec.MustParseRecipe(recipe)); !errors.Is(err, codec.ErrLossy) {
			t.Errorf("%q on a lossless tensor: %v, want ErrLossy", recipe, err)
		}
	}
	// Other dtypes are refused with a clear error.
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []codec.DType{codec.I32, codec.F16, codec.BF16, codec.U8} {
		tn := codec.NewTensor("i", dt, 64)
		if _, err := enc.AppendTensor(nil, tn, codec.MustParseRecipe("fp16")); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("fp16 on %v: %v, want ErrRecipe", dt, err)
		}
	}
	// An empty tensor.
	tn := codec.NewTensor("empty", codec.F32, 0)
	codectest.RoundTrip(t, tn, "fp16")
}

func TestBits(t *testing.T) {
	for _, c := range []struct {
		recipe string
		want   int
	}{
		{"zstd(1)", 0},
		{"fp16 | shuffle2 | plane1:huff0 | plane0:raw", 16},
		{"bf16", 16},
		{"int8(4096) | *:zstd(1)", 8},
		{"qsgd(4)", 8},
		{"nf4(64) | scale:int8(256)", 4},
		{"fp4", 4},
		{"ternary(64)", 2},
		{"sign(64) | *:zstd(1)", 1},
	} {
		if got := Bits(codec.MustParseRecipe(c.recipe)); got != c.want {
			t.Errorf("Bits(%s) = %d, want %d", c.recipe, got, c.want)
		}
	}
	if Bits(nil) != 0 {
		t.Error("Bits(nil) != 0")
	}
}
