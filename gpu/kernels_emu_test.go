package gpu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/internal/float16"
	"github.com/tensorpress/tensorpress/internal/topk"
	_ "github.com/tensorpress/tensorpress/lossy"
	"github.com/tensorpress/tensorpress/sparse"
)

// The kernels of kernels/kernels.cu, compiled for the host with
// kernels/emulate.h (every block in turn, its threads as OS threads), run
// on fresh random inputs against the Go code they must agree with bit for
// bit. This checks their logic on a machine without a GPU; the PTX and
// the driver are checked by the device tests.

// run sends op, its numbers and data to the emulation exe and returns
// what it writes.
func run(t *testing.T, exe, op string, nums []uint64, data []byte) []byte {
	t.Helper()
	var in bytes.Buffer
	in.WriteString(op)
	for _, v := range nums {
		binary.Write(&in, binary.LittleEndian, v)
	}
	in.Write(data)
	cmd := exec.Command(exe)
	cmd.Stdin = &in
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("emulation %q: %v: %s", op, err, errb.Bytes())
	}
	return out
}

func u32bytes(x []uint32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// floatBits returns n random float32 bit patterns: mostly N(0, s) for a
// scale s that changes every 97 elements, with NaNs (several payloads),
// infinities, zeros of both signs, subnormals and values at fp16 and bf16
// rounding ties mixed in.
func floatBits(rng *rand.Rand, n int) []uint32 {
	x := make([]uint32, n)
	s := 1.0
	for i := range x {
		if i%97 == 0 {
			s = math.Pow(2, float64(rng.IntN(60)-40))
		}
		v := math.Float32bits(float32(rng.NormFloat64() * s))
		switch rng.IntN(40) {
		case 0:
			v = 0x7f800001 + rng.Uint32N(0x7fffff) | rng.Uint32()&0x80000000 // NaN
		case 1:
			v = 0x7f800000 | rng.Uint32()&0x80000000
		case 2:
			v = rng.Uint32() & 0x80000000
		case 3:
			v = rng.Uint32N(0x800000) | rng.Uint32()&0x80000000 // subnormal
		case 4:
			v = v&^0x1fff | 0x1000 // an fp16 tie
		case 5:
			v = v&^0xffff | 0x8000 // a bf16 tie
		case 6:
			v = math.Float32bits(float32(65504+rng.IntN(32))) | rng.Uint32()&0x80000000
		}
		x[i] = v
	}
	return x
}

func TestEmulatedHalf(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
	// Offsets (elements) of x and y from 16-byte alignment: the eight-,
	// four- and one-wide paths.
	for _, c := range []struct{ n, xoff, yoff int }{{1, 0, 0}, {1000, 0, 0}, {4099, 0, 0}, {4099, 0, 4}, {4099, 0, 1}, {4099, 1, 0}, {13, 0, 4}} {
		n := c.n
		x := floatBits(rng, n)
		for _, op := range []string{"f16 ", "bf16"} {
			got := run(t, exe, op, []uint64{uint64(n), uint64(c.xoff), uint64(c.yoff)}, u32bytes(x))
			for i, v := range x {
				var want uint16
				if op == "f16 " {
					want = float16.F16FromF32(math.Float32frombits(v))
				} else {
					want = float16.BF16FromF32(math.Float32frombits(v))
				}
				if g := binary.LittleEndian.Uint16(got[2*i:]); g != want {
					t.Fatalf("%s n=%d offsets %d, %d: x[%d] = %#08x: got %#04x, want %#04x", op, n, c.xoff, c.yoff, i, v, g, want)
				}
			}
		}
	}
}

// int8Reference is what the lossy int8(bsize) stage stores for x: the
// codes and the scales, read from the segments of its frame.
func int8Reference(t *testing.T, x []float32, bsize int) (q, scale []byte, err error) {
	t.Helper()
	return blockReference(t, x, fmt.Sprintf("int8(%d)", bsize))
}

// blockReference is what the lossy block stage of recipe text (int8(B),
// nf4(B), fp4(B)) stores for x: its codes and scales.
func blockReference(t *testing.T, x []float32, text string) (q, scale []byte, err error) {
	t.Helper()
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	frame, err := enc.AppendTensor(nil, codec.FromFloat32("x", x, int64(len(x))), codec.MustParseRecipe(text))
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(bytes.NewReader(frame))
	h, _, err := codec.ReadFrameHeader(br, br, codec.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	payload := frame[h.HeaderLen:]
	segs := map[string][]byte{}
	for _, s := range h.Entries[0].Stored {
		segs[s.Name], payload = payload[:s.Len], payload[s.Len:]
	}
	return segs["q"], segs["scale"], nil
}

func TestEmulatedInt8(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(2, 2))
	for _, c := range []struct{ n, bsize int }{{1, 64}, {1000, 64}, {4099, 256}, {3000, 1000}} {
		x := make([]float32, c.n)
		for i := range x {
			if i%c.bsize == 0 {
				// A scale per block: ordinary, tiny (below 2^-100), or 0.
				switch rng.IntN(5) {
				case 0:
					x[i] = 0
				case 1:
					x[i] = float32(rng.NormFloat64() * 0x1p-110)
				default:
					x[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(20)-10)))
				}
				continue
			}
			x[i] = float32(rng.NormFloat64()) * float32(math.Abs(float64(x[i-i%c.bsize]))+0x1p-120)
			if x[i-i%c.bsize] == 0 {
				x[i] = 0
			}
		}
		in := u32bytes(floatsBits(x))
		got := run(t, exe, "int8", []uint64{uint64(c.n), uint64(c.bsize)}, in)
		nb := (c.n + c.bsize - 1) / c.bsize
		q, scale, bad := got[:c.n], got[c.n:c.n+4*nb], binary.LittleEndian.Uint32(got[c.n+4*nb:])
		wq, ws, err := int8Reference(t, x, c.bsize)
		if err != nil || bad != 0 {
			t.Fatalf("n=%d B=%d: reference %v, emulation bad %d", c.n, c.bsize, err, bad)
		}
		if !bytes.Equal(q, wq) || !bytes.Equal(scale, ws) {
			t.Fatalf("n=%d B=%d: codes or scales differ from the int8 stage's", c.n, c.bsize)
		}
		// A NaN or an Inf in a block: refused, like the stage refuses it.
		x[c.n/2] = float32(math.Inf(1))
		got = run(t, exe, "int8", []uint64{uint64(c.n), uint64(c.bsize)}, u32bytes(floatsBits(x)))
		if _, _, err := int8Reference(t, x, c.bsize); err == nil || binary.LittleEndian.Uint32(got[c.n+4*nb:]) != 1 {
			t.Fatalf("n=%d B=%d: a block with Inf: stage %v, emulation bad %d", c.n, c.bsize, err, binary.LittleEndian.Uint32(got[c.n+4*nb:]))
		}
	}
}

func floatsBits(x []float32) []uint32 {
	u := make([]uint32, len(x))
	for i, v := range x {
		u[i] = math.Float32bits(v)
	}
	return u
}

func TestEmulatedTopK(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{1, 2, 1000, 5000, 70001} { // 70001: more tiles than threads (the offsets' runs)
		x := floatBits(rng, n)
		// Many equal magnitudes, so that the cut falls among ties.
		for i := range x {
			if rng.IntN(3) == 0 {
				x[i] = x[i]&^0x7fffff80 | 0x3f800000
			}
		}
		xs := make([]float32, n)
		for i, v := range x {
			xs[i] = math.Float32frombits(v)
		}
		for _, k := range slices.Compact([]int{1, max(1, n/100), n / 3, n / 2, n - 1, n}) {
			if k < 1 {
				continue
			}
			want := topk.Exact(nil, xs, k, nil)
			// Five passes, then among the first pass's candidates.
			for _, op := range []string{"topk", "topc"} {
				got := run(t, exe, op, []uint64{uint64(n), uint64(k)}, u32bytes(x))
				for j, w := range want {
					gi := binary.LittleEndian.Uint32(got[4*j:])
					gv := binary.LittleEndian.Uint32(got[4*(k+j):])
					if gi != w || gv != x[w] {
						t.Fatalf("%s n=%d k=%d: element %d: got index %d (%#08x), want %d (%#08x)", op, n, k, j, gi, gv, w, x[w])
					}
				}
				if op != "topk" {
					continue
				}
				// The first pass's state: the bin of the k-th largest
				// magnitude's top 11 bits, the elements still to take in
				// it, the elements in it and above.
				st := got[8*k:]
				need, bin, ge := binary.LittleEndian.Uint32(st), binary.LittleEndian.Uint32(st[4:]), binary.LittleEndian.Uint32(st[8:])
				var above, in uint32
				for _, v := range x {
					switch b := v & 0x7fffffff >> 20; {
					case b > bin:
						above++
					case b == bin:
						in++
					}
				}
				if above >= uint32(k) || above+in < uint32(k) || need != uint32(k)-above || ge != above+in {
					t.Fatalf("n=%d k=%d: first pass: bin %d, need %d, at or above %d; counted %d above, %d in it", n, k, bin, need, ge, above, in)
				}
			}
		}
	}
}

func TestEmulatedErrorFeedbackAdd(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(4, 4))
	n := 3001
	g, r := floatBits(rng, n), floatBits(rng, n)
	got := run(t, exe, "efad", []uint64{uint64(n)}, append(u32bytes(g), u32bytes(r)...))
	for i := range n {
		want := math.Float32frombits(g[i]) + math.Float32frombits(r[i])
		gv := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
		if math.Float32bits(gv) != math.Float32bits(want) && !(gv != gv && want != want) {
			t.Fatalf("c[%d] = %v, want %v", i, gv, want)
		}
	}
}

// TestPTXUpToDate compiles kernels/kernels.cu as go generate does and
// compares the result with the embedded PTX.
func TestPTXUpToDate(t *testing.T) {
	cc, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skipf("checking the PTX needs clang-14 (Debian's clang-14; make test installs it): %v", err)
	}
	out := filepath.Join(t.TempDir(), "kernels.ptx")
	if b, err := exec.Command(cc, "--cuda-device-only", "--cuda-gpu-arch=sm_70", "-nocudalib", "-nocudainc", "-O3",
		"-ffp-contract=off", "-S", "-x", "cuda", "kernels/kernels.cu", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, kernelsPTX) {
		t.Fatal("kernels.ptx is not what kernels/kernels.cu compiles to: run go generate ./gpu")
	}
	for _, name := range []string{"tp_f32_to_f16", "tp_f32_to_bf16", "tp_int8_blocks", "tp_zero", "tp_topk_hist",
		"tp_topk_find", "tp_topk_count", "tp_topk_offsets", "tp_topk_compact", "tp_add_f32", "tp_scatter_zero",
		"tp_dgc_compensate", "tp_gather", "tp_topk_state", "tp_take", "tp_put", "tp_nonfinite_zero", "tp_sumsq_blocks", "tp_pack_sizes", "tp_scan", "tp_pack", "tp_q4_blocks"} {
		if !bytes.Contains(kernelsPTX, []byte(".visible .entry "+name+"(")) {
			t.Errorf("the PTX has no kernel %s", name)
		}
	}
}

// finite returns n random finite float32 bit patterns (the float
// arithmetic kernels: a GPU gives NaN results without their payload).
func finite(rng *rand.Rand, n int) []uint32 {
	x := floatBits(rng, n)
	for i, v := range x {
		if v&0x7f800000 == 0x7f800000 {
			x[i] = math.Float32bits(float32(rng.NormFloat64()))
		}
	}
	return x
}

func TestEmulatedDGCCompensate(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(5, 5))
	n := 2999
	g, u, r := finite(rng, n), finite(rng, n), finite(rng, n)
	const m = float32(0.9)
	for _, tc := range []struct {
		nesterov, hasRes uint64
		scale            float32
	}{{0, 1, 1}, {0, 1, 0.37}, {1, 1, 1}, {1, 1, 0.37}, {0, 0, 1}, {1, 0, 0.37}} {
		in := u32bytes([]uint32{math.Float32bits(m), math.Float32bits(tc.scale)})
		in = append(in, u32bytes(g)...)
		in = append(append(in, u32bytes(u)...), u32bytes(r)...)
		got := run(t, exe, "dgcc", []uint64{uint64(n), tc.nesterov, tc.hasRes}, in)
		var res []float32 // none: nothing added, not a zero (-0 + 0 is +0)
		if tc.hasRes == 1 {
			res = f32s(r)
		}
		wu, c := dgcCompensate(f32s(g), f32s(u), res, m, tc.nesterov == 1, tc.scale)
		for i := range n {
			gu := binary.LittleEndian.Uint32(got[4*i:])
			gc := binary.LittleEndian.Uint32(got[4*(n+i):])
			if gu != math.Float32bits(wu[i]) || gc != math.Float32bits(c[i]) {
				t.Fatalf("%+v, element %d: u %#08x c %#08x, want %#08x %#08x", tc, i, gu, gc, math.Float32bits(wu[i]), math.Float32bits(c[i]))
			}
		}
	}
}

// dgcCompensate is the loop of gradient.DGC.Compensate (with a residual):
// it returns u and c.
func dgcCompensate(g, u, res []float32, m float32, nesterov bool, scale float32) ([]float32, []float32) {
	u, c := slices.Clone(u), make([]float32, len(g))
	for i := range c {
		gi := float32(scale * g[i])
		var v float32
		if nesterov {
			u[i] = m * (u[i] + gi)
			v = u[i] + gi
		} else {
			u[i] = float32(m*u[i]) + gi
			v = u[i]
		}
		if res != nil {
			v += res[i]
		}
		c[i] = v
	}
	return u, c
}

func TestEmulatedSumSquares(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(8, 8))
	for _, c := range []struct{ n, bsize int }{{1, 64}, {5000, 64}, {4099, 4096}} {
		g := finite(rng, c.n)
		got := run(t, exe, "sums", []uint64{uint64(c.n), uint64(c.bsize)}, u32bytes(g))
		var total float64
		for j := 0; j*c.bsize < c.n; j++ {
			total += math.Float64frombits(binary.LittleEndian.Uint64(got[8*j:]))
		}
		if want := gradient.SumSquares(f32s(g), c.bsize); math.Float64bits(total) != math.Float64bits(want) {
			t.Fatalf("n %d, blocks of %d: %v, want %v", c.n, c.bsize, total, want)
		}
	}
}

func f32s(u []uint32) []float32 {
	x := make([]float32, len(u))
	for i, v := range u {
		x[i] = math.Float32frombits(v)
	}
	return x
}

func TestEmulatedSampleAndCount(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(6, 6))
	n := 5003
	x := floatBits(rng, n)
	start, stride := uint64(7), uint64(33)
	num := (uint64(n) - start + stride - 1) / stride
	got := run(t, exe, "gath", []uint64{uint64(n), start, stride, num}, u32bytes(x))
	for j := range num {
		if g, w := binary.LittleEndian.Uint32(got[4*j:]), x[start+j*stride]&0x7fffffff; g != w {
			t.Fatalf("sample %d: %#08x, want %#08x", j, g, w)
		}
	}
	for _, th := range []uint32{0, 0x3f800000, x[17] & 0x7fffffff, 0x7f800000, 0x7fffffff} {
		// x aligned (whole tiles and runs loaded 16 bytes at a time) and
		// not (one by one).
		for _, xoff := range []uint64{0, 1} {
			checkCountAt(t, exe, x, th, xoff)
		}
	}
}

// Enough tiles that the offsets' threads take their counts eight tiles at
// a time (2^19 elements: 512 tiles of the emulator's 1024 elements, 8 a
// thread of 64), without a remainder and with one (552 tiles, 9 a thread).
func TestEmulatedCountManyTiles(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(17, 17))
	for _, n := range []int{1 << 19, 552<<10 - 100} {
		x := floatBits(rng, n)
		checkCountAt(t, exe, x, 0x3f000000, 0)
	}
}

// checkCountAt runs Selector.countAtOrAbove's total from the last tile,
// then the compaction it placed, over x (xoff elements from 16-byte
// alignment) at threshold th: every index at or above, ascending.
func checkCountAt(t *testing.T, exe string, x []uint32, th uint32, xoff uint64) {
	t.Helper()
	want := 0
	for _, v := range x {
		if v&0x7fffffff >= th {
			want++
		}
	}
	got := run(t, exe, "cnta", []uint64{uint64(len(x)), uint64(th), xoff}, u32bytes(x))
	c := int(binary.LittleEndian.Uint32(got))
	if c != want || len(got) != 4+8*c {
		t.Fatalf("count >= %#08x, x at %d: %d (%d bytes), want %d", th, xoff, c, len(got), want)
	}
	j := 0
	for i, v := range x {
		if v&0x7fffffff < th {
			continue
		}
		if gi, gv := binary.LittleEndian.Uint32(got[4+4*j:]), binary.LittleEndian.Uint32(got[4+4*(c+j):]); gi != uint32(i) || gv != v {
			t.Fatalf(">= %#08x, x at %d: element %d: index %d (%#08x), want %d (%#08x)", th, xoff, j, gi, gv, i, v)
		}
		j++
	}
}

func TestEmulatedStaging(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(7, 7))
	n := 3001
	x := floatBits(rng, n)
	x[10], x[2000] = 0x7f800000, 0xff800000 // infinities, zeroed as the NaNs
	idx := topk.Exact(nil, f32s(x), 300, nil)
	k := len(idx)
	got := run(t, exe, "stag", []uint64{uint64(n), uint64(k)}, append(u32bytes(x), u32bytes(idx)...))
	put := slices.Clone(x)
	for j, p := range idx {
		if g := binary.LittleEndian.Uint32(got[4*j:]); g != x[p] {
			t.Fatalf("take %d: %#08x, want %#08x", j, g, x[p])
		}
		put[p] = x[p] + 1
	}
	for i := range n {
		nz := x[i]
		if nz&0x7fffffff >= 0x7f800000 {
			nz = 0
		}
		if g := binary.LittleEndian.Uint32(got[4*(k+i):]); g != put[i] {
			t.Fatalf("put: element %d: %#08x, want %#08x", i, g, put[i])
		}
		if g := binary.LittleEndian.Uint32(got[4*(k+n+i):]); g != nz {
			t.Fatalf("non-finite zero: element %d: %#08x, want %#08x", i, g, nz)
		}
	}
}

func TestEmulatedPack(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(9, 9))
	for _, k := range []int{1, 127, 128, 129, 5000} {
		// Increasing positions with gaps of every size, and a run of
		// consecutive ones (a block of width 1, and of width 0 after idx[0]).
		idx := make([]uint32, k)
		var p uint32
		for i := range idx {
			switch {
			case i > 200 && i < 500:
				p++
			case i%97 == 0:
				p += 1 + rng.Uint32N(1<<20)
			default:
				p += 1 + rng.Uint32N(300)
			}
			idx[i] = p
		}
		got := run(t, exe, "pack", []uint64{uint64(k)}, u32bytes(idx))
		d := make([]uint32, k)
		var prev uint32
		for i, x := range idx {
			d[i], prev = x-prev, x
		}
		want := sparse.AppendBitpack(nil, d)
		if total := binary.LittleEndian.Uint32(got); int(total) != len(want) || !bytes.Equal(got[4:], want) {
			t.Fatalf("k %d: %d bytes, want %d; equal %t", k, total, len(want), bytes.Equal(got[4:], want))
		}
	}
}

// blockData returns n floats in blocks of bsize, each block at its own
// scale: ordinary, tiny (below 2^-100) or zero.
func blockData(rng *rand.Rand, n, bsize int) []float32 {
	x := make([]float32, n)
	var s float64
	for i := range x {
		if i%bsize == 0 {
			switch rng.IntN(5) {
			case 0:
				s = 0
			case 1:
				s = 0x1p-110
			default:
				s = math.Pow(2, float64(rng.IntN(20)-10))
			}
		}
		x[i] = float32(rng.NormFloat64() * s)
	}
	return x
}

func TestEmulatedQ4(t *testing.T) {
	exe := emulator(t)
	rng := rand.New(rand.NewPCG(10, 10))
	for _, fp4 := range []uint64{0, 1} {
		kind := []string{"nf4", "fp4"}[fp4]
		for _, c := range []struct{ n, bsize int }{{1, 64}, {1001, 64}, {4099, 256}} {
			x := blockData(rng, c.n, c.bsize)
			got := run(t, exe, "q4  ", []uint64{uint64(c.n), uint64(c.bsize), fp4}, u32bytes(floatsBits(x)))
			nq, nb := (c.n+1)/2, (c.n+c.bsize-1)/c.bsize
			wq, ws, err := blockReference(t, x, fmt.Sprintf("%s(%d)", kind, c.bsize))
			if err != nil || binary.LittleEndian.Uint32(got[nq+4*nb:]) != 0 {
				t.Fatalf("%s n=%d: %v, bad %d", kind, c.n, err, binary.LittleEndian.Uint32(got[nq+4*nb:]))
			}
			if !bytes.Equal(got[:nq], wq) || !bytes.Equal(got[nq:nq+4*nb], ws) {
				t.Fatalf("%s n=%d B=%d: codes or scales differ from the stage's", kind, c.n, c.bsize)
			}
		}
	}
}
