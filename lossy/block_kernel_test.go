package lossy

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/cpufeature"
)

// The kernels (AVX2 where the CPU has it, then the Go loops) against
// their reference loops, written plainly here, over lengths 0..300 and
// values that stress them: signed zeros, subnormals, exact midpoints and
// ties, large magnitudes. In noasm builds this tests the Go loops alone.

// kernelInput returns n floats mixing N(0,1), signed zeros, subnormals,
// huge values and exact nf4/fp4 midpoints (times 1.5).
func kernelInput(n int, seed uint64) []float32 {
	r := quantRand(seed)
	x := make([]float32, n)
	for i := range x {
		switch r.IntN(12) {
		case 0:
			x[i] = float32(math.Copysign(0, -1))
		case 1:
			x[i] = 0
		case 2:
			x[i] = math.Float32frombits(uint32(r.IntN(1 << 23))) // subnormal
		case 3:
			x[i] = float32(r.NormFloat64() * 1e30)
		case 4:
			x[i] = nf4Mid[r.IntN(15)] * 1.5
		case 5:
			x[i] = -fp4Mid[r.IntN(7)] * 1.5
		default:
			x[i] = float32(r.NormFloat64())
		}
	}
	return x
}

func TestSums8Kernel(t *testing.T) {
	for n := range 300 {
		x := kernelInput(n, uint64(n))
		for _, sq := range []bool{false, true} {
			var got, want [16]float64
			got[3], want[3] = 1.25, 1.25 // sums continue from acc
			m := sums16(x, sq, &got)
			var wm uint32
			for i, v := range x {
				f := math.Abs(float64(v))
				if sq {
					f = float64(f * f)
				}
				want[i%16] += f
				wm = max(wm, math.Float32bits(v)&0x7fffffff)
			}
			if got != want || m != wm {
				t.Fatalf("sums16(n=%d, sq=%v) = %v, %#x; want %v, %#x", n, sq, got, m, want, wm)
			}
		}
		tb := math.Float32bits(0.6)
		var got, want [16]float64
		cnt := sumAbove(x, tb, &got)
		wc := 0
		for i, v := range x {
			if a := float32(math.Abs(float64(v))); a > 0.6 {
				want[i%16] += float64(a)
				wc++
			} else {
				want[i%16] += 0
			}
		}
		if got != want || cnt != wc {
			t.Fatalf("sumAbove(n=%d) = %v, %d; want %v, %d", n, got, cnt, want, wc)
		}
	}
}

func TestPackKernels(t *testing.T) {
	for n := range 300 {
		x := kernelInput(n, uint64(n)+1000)
		const guard = 0xa5
		q := bytes.Repeat([]byte{guard}, n+40)
		packSigns(q[:(n+7)/8], x)
		want := make([]byte, (n+7)/8)
		for i, v := range x {
			if math.Signbit(float64(v)) {
				want[i/8] |= 1 << (i % 8)
			}
		}
		if !bytes.Equal(q[:len(want)], want) {
			t.Fatalf("packSigns(n=%d) = %x, want %x", n, q[:len(want)], want)
		}
		quantCheckGuard(t, "packSigns", q[len(want):], guard)

		const th = float32(0.5)
		q = bytes.Repeat([]byte{guard}, n+40)
		packTernary(q[:(n+3)/4], x, math.Float32bits(th))
		want = make([]byte, (n+3)/4)
		for i, v := range x {
			var c byte
			if float32(math.Abs(float64(v))) > th {
				c = 1
				if math.Signbit(float64(v)) {
					c = 2
				}
			}
			want[i/4] |= c << (2 * (i % 4))
		}
		if !bytes.Equal(q[:len(want)], want) {
			t.Fatalf("packTernary(n=%d) = %x, want %x", n, q[:len(want)], want)
		}
		quantCheckGuard(t, "packTernary", q[len(want):], guard)
	}
}

func TestQSGDKernel(t *testing.T) {
	for n := range 300 {
		x := kernelInput(n, uint64(n)+2000)
		for i := range x {
			x[i] = max(-3, min(3, x[i])) // |x| <= norm, as in a block
		}
		for _, s := range []uint32{1, 5, 127} {
			for _, idx := range []uint64{0, 77, 1<<32 - 100, 5 << 32} {
				k := float32(s) / 3
				q := bytes.Repeat([]byte{0xa5}, n+40)
				quantQSGD(q[:n], x, k, 1, 42, idx, s)
				for i, v := range x {
					j := idx + uint64(i)
					a := float32(math.Abs(float64(v)))
					V := uint64(float32(a*k) * (1 << 24))
					U := uint64(qsgdDither(42, j))
					l := int(min((V+U)>>24, uint64(s)))
					if math.Signbit(float64(v)) {
						l = -l
					}
					if int8(q[i]) != int8(l) {
						t.Fatalf("quantQSGD(n=%d, s=%d, idx=%d): element %d (%v): %d, want %d", n, s, idx, i, v, int8(q[i]), l)
					}
				}
				quantCheckGuard(t, "quantQSGD", q[n:], 0xa5)
			}
		}
	}
}

// TestFastKernels runs the multi-block kernels (where the CPU has them)
// against the per-block Go path, on blocks that they take and blocks that
// they must leave to it.
func TestFastKernels(t *testing.T) {
	for _, text := range []string{"int8(32)", "int8(64)", "int8(96)", "int8(4096)", "nf4(32)", "nf4(64)", "nf4(4096)",
		"fp4(64)", "fp4(160)", "qsgd(127,64)", "qsgd(3,4096)"} {
		op := mustBlockOp(t, text)
		if !blockHasAVX2 || op.kind.quantizeFast == nil && op.kind.dequantizeFast == nil {
			continue
		}
		B := op.block
		nb := 40
		x := kernelInput(nb*B, uint64(B))
		special := map[int]string{}
		for b, kind := range map[int]string{3: "zero", 7: "tiny", 11: "subnormal", 15: "nan", 19: "inf", 23: "one-nonzero", 27: "ties"} {
			blk := x[b*B : (b+1)*B]
			for i := range blk {
				switch kind {
				case "zero":
					blk[i] = float32(math.Copysign(0, float64(1-2*(i%2))))
				case "tiny":
					blk[i] = float32(i%7-3) * 0x1p-110
				case "subnormal":
					blk[i] = math.Float32frombits(uint32(i))
				case "one-nonzero":
					blk[i] = 0
					if i == B/2 {
						blk[i] = -1
					}
				case "ties":
					blk[i] = float32(i%255-127) + 0.5
				}
			}
			switch kind {
			case "nan":
				blk[B-1] = float32(math.NaN())
			case "inf":
				blk[0] = float32(math.Inf(-1))
			}
			special[b] = kind
		}
		// Quantize: block by block with the Go path, and with the fast
		// kernel from every block on (stopping where it must).
		qw := make([]byte, op.qLen(len(x)))
		sw := make([]byte, 4*nb)
		okw := make([]bool, nb)
		for b := range nb {
			s, err := op.kind.quantize(op, qw[op.qLen(b*B):op.qLen((b+1)*B)], x[b*B:(b+1)*B], uint64(b*B))
			okw[b] = err == nil
			binary.LittleEndian.PutUint32(sw[4*b:], math.Float32bits(s))
		}
		if op.kind.quantizeFast != nil {
			for b := range nb {
				qf := bytes.Repeat([]byte{0xa5}, op.qLen(len(x)))
				sf := bytes.Repeat([]byte{0xa5}, 4*nb)
				d := op.kind.quantizeFast(op, qf[op.qLen(b*B):], sf[4*b:], x[b*B:])
				if d%B != 0 {
					t.Fatalf("%s: fast quantize did %d elements", op, d)
				}
				end := b + d/B
				for c := b; c < end; c++ {
					if !okw[c] || special[c] == "zero" || special[c] == "tiny" || special[c] == "subnormal" {
						t.Fatalf("%s: fast quantize took block %d (%s)", op, c, special[c])
					}
				}
				if end < nb && okw[end] && special[end] == "" {
					t.Fatalf("%s: fast quantize stopped before block %d, an ordinary one", op, end)
				}
				lo, hi := op.qLen(b*B), op.qLen(end*B)
				if !bytes.Equal(qf[lo:hi], qw[lo:hi]) || !bytes.Equal(sf[4*b:4*end], sw[4*b:4*end]) {
					t.Fatalf("%s: fast quantize from block %d differs from the Go path", op, b)
				}
				quantCheckGuard(t, "fast quantize", qf[hi:], 0xa5)
			}
		}
		// Dequantize: valid codes and scales from the Go path, with some
		// scales the kernels must leave alone.
		for b := range nb {
			if !okw[b] {
				binary.LittleEndian.PutUint32(sw[4*b:], math.Float32bits(0.5))
			}
		}
		binary.LittleEndian.PutUint32(sw[4*5:], math.Float32bits(float32(math.Copysign(0, -1))))
		binary.LittleEndian.PutUint32(sw[4*9:], math.Float32bits(0x1p127))
		binary.LittleEndian.PutUint32(sw[4*13:], 0x7fc00000)
		binary.LittleEndian.PutUint32(sw[4*17:], math.Float32bits(-2))
		stops := map[int]bool{5: true, 9: true, 13: true, 17: true}
		want := make([]float32, len(x))
		for b := range nb {
			s := math.Float32frombits(binary.LittleEndian.Uint32(sw[4*b:]))
			if !stops[b] {
				if !op.kind.dequantize(op, want[b*B:(b+1)*B], qw[op.qLen(b*B):op.qLen((b+1)*B)], s) {
					t.Fatalf("%s: block %d refused", op, b)
				}
			}
		}
		if op.kind.dequantizeFast != nil {
			for b := range nb {
				got := make([]float32, len(x)+8)
				for i := range got {
					got[i] = 1234.5
				}
				d, ok := op.kind.dequantizeFast(op, got[b*B:len(x)], qw[op.qLen(b*B):], sw[4*b:])
				end := b + d/B
				if !ok || d%B != 0 {
					t.Fatalf("%s: fast dequantize from %d: %d, %v", op, b, d, ok)
				}
				for c := b; c < end; c++ {
					if stops[c] {
						t.Fatalf("%s: fast dequantize took block %d", op, c)
					}
				}
				if end < nb && !stops[end] {
					t.Fatalf("%s: fast dequantize stopped before block %d", op, end)
				}
				if !quantEqualBits(got[b*B:end*B], want[b*B:end*B]) {
					t.Fatalf("%s: fast dequantize from block %d differs from the Go path", op, b)
				}
				for i := end * B; i < len(got); i++ {
					if got[i] != 1234.5 {
						t.Fatalf("%s: fast dequantize wrote element %d past block %d", op, i, end)
					}
				}
			}
			if op.kind.bits == 8 {
				bad := bytes.Clone(qw)
				bad[2*B+5] = 0x80
				if op.kind.id == QSGDID && op.levels < 127 {
					bad[2*B+5] = byte(op.levels + 1)
				}
				if _, ok := op.kind.dequantizeFast(op, make([]float32, len(x)), bad, sw); ok {
					t.Fatalf("%s: fast dequantize accepts an invalid code", op)
				}
			}
		}
	}
}

// TestKernelPaths checks that Encode and Decode give the same bytes on
// aligned float32 (fast kernels), misaligned float32 and float64 input
// (block by block), for data with special blocks.
func TestKernelPaths(t *testing.T) {
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		B := op.block
		x := kernelInput(5*B+3, 9)
		for i := range x {
			x[i] = max(-1e30, min(1e30, x[i]))
		}
		for i := B; i < 2*B; i++ {
			x[i] = 0
		}
		want, parts := quantRoundTrip(t, op, x)
		x64 := make([]float64, len(x))
		for i, v := range x {
			x64[i] = float64(v)
		}
		in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F64, Len: 8 * len(x)}}
		in.Data = make([]byte, in.Len)
		for i, v := range x64 {
			binary.LittleEndian.PutUint64(in.Data[8*i:], math.Float64bits(v))
		}
		outs, err := op.Encode(&codec.Ctx{Tensor: &codec.Tensor{}}, in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range outs {
			if !bytes.Equal(outs[i].Data, parts[i].Data) {
				t.Fatalf("%s: float64 path gives other %s", op, outs[i].Name)
			}
		}
		out, err := op.Decode(nil, make([]byte, 0, in.Len), parts, in.SegInfo)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got := math.Float64frombits(binary.LittleEndian.Uint64(out[8*i:])); math.Float64bits(got) != math.Float64bits(float64(want[i])) {
				t.Fatalf("%s: float64 decode of element %d: %v, want %v", op, i, got, want[i])
			}
		}
	}
}

// The accelerated kernels run exactly where blockHasAVX2 says: never on a
// CPU without AVX2 (nor in noasm builds, where it is false), and on every
// whole group of elements where it is true; the other elements are left
// to the Go loops.
func TestBlockHasAVX2(t *testing.T) {
	t.Logf("blockHasAVX2 = %v", blockHasAVX2)
	if blockHasAVX2 && !cpufeature.AVX2 {
		t.Fatal("blockHasAVX2 on a CPU without AVX2")
	}
	x := kernelInput(70, 5)
	q := make([]byte, len(x))
	for _, c := range []struct {
		name  string
		done  int
		group int
	}{
		{"packSigns", packSignsAsm(q, x), 32},
		{"packTernary", packTernaryAsm(q, x, math.Float32bits(0.5)), 32},
		{"quantQSGD", quantQSGDAsm(q, x, 1, 1, 0, 1), 32},
		{"signDequant", signDequantAsm(make([]float32, len(x)), q, math.Float32bits(0.75)), 32},
	} {
		want := 0
		if blockHasAVX2 {
			want = len(x) &^ (c.group - 1)
		}
		if c.done != want {
			t.Errorf("%s: the kernel did %d of %d elements, want %d (blockHasAVX2 %v)", c.name, c.done, len(x), want, blockHasAVX2)
		}
	}
}

func TestDequantKernels(t *testing.T) {
	r := quantRand(77)
	for n := range 300 {
		q := make([]byte, (n+7)/8)
		for i := range q {
			q[i] = byte(r.Uint32())
		}
		if n%8 != 0 {
			q[len(q)-1] &= 1<<(n%8) - 1
		}
		x := make([]float32, n+8)
		for i := range x {
			x[i] = 1234.5
		}
		if !signDequantize(nil, x[:n], q, 0.75) {
			t.Fatalf("sign dequantize(n=%d) refuses valid bits", n)
		}
		for i := range n {
			want := float32(0.75)
			if q[i/8]>>(i%8)&1 != 0 {
				want = -0.75
			}
			if x[i] != want {
				t.Fatalf("sign dequantize(n=%d): element %d: %v, want %v", n, i, x[i], want)
			}
		}
		for i := n; i < len(x); i++ {
			if x[i] != 1234.5 {
				t.Fatalf("sign dequantize(n=%d) wrote past its end", n)
			}
		}

		t4 := make([]byte, (n+3)/4)
		for i := range n {
			t4[i/4] |= byte(r.IntN(3)) << (2 * (i % 4))
		}
		if !ternaryDequantize(nil, x[:n], t4, 2.5) {
			t.Fatalf("ternary dequantize(n=%d) refuses valid codes", n)
		}
		for i := range n {
			want := [3]float32{0, 2.5, -2.5}[t4[i/4]>>(2*(i%4))&3]
			if math.Float32bits(x[i]) != math.Float32bits(want) {
				t.Fatalf("ternary dequantize(n=%d): element %d: %v, want %v", n, i, x[i], want)
			}
		}
		for i := n; i < len(x); i++ {
			if x[i] != 1234.5 {
				t.Fatalf("ternary dequantize(n=%d) wrote past its end", n)
			}
		}
		for i := range n {
			bad := bytes.Clone(t4)
			bad[i/4] |= 3 << (2 * (i % 4))
			if ternaryDequantize(nil, x[:n], bad, 2.5) {
				t.Fatalf("ternary dequantize(n=%d) accepts code 3 at %d", n, i)
			}
		}
	}
}
