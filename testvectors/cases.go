package testvectors

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
)

// Case is one golden frame: a deterministic input and the recipe that
// coded it.
type Case struct {
	Name   string
	Recipe string
	// Exact is true when the encoding must match the golden bytes exactly;
	// false for recipes with zstd, xz or s2 segments (klauspost's s2
	// encoder codes differently in its assembly and pure-Go builds).
	Exact bool
	// Lossy cases decode to an approximation of the input: the golden
	// frame and today's encoding must decode to the same bytes.
	Lossy bool
	// Tensor or Bytes is the input.
	Tensor *codec.Tensor
	Bytes  []byte
}

// Cases returns the golden cases. Inputs are generated from fixed seeds and
// never change.
func Cases() []Case {
	w := Normal("w", 256, 0.02, 1)
	grad := Normal("grad", 300, 0.001, 2) // 300 elements: tails on odd widths
	f16 := Ints("h", codec.F16, 128, 3)
	bf16 := Ints("b", codec.BF16, 100, 4)
	f64 := Ints("d", codec.F64, 64, 5)
	i64 := Ramp("steps", codec.I64, 200)
	i8 := Ints("q", codec.I8, 333, 6)
	boolean := Ints("mask", codec.Bool, 50, 7)
	tagged := Normal("layer0.weight", 64, 0.02, 8)
	tagged.Tags = codec.Tags{Lossless: true, Extra: []codec.Tag{{Key: "role", Value: "weight"}}}
	tagged.Version, tagged.Base = 12, 11
	tagged.Shape = []int64{8, 8}
	chunk := Normal("big", 1000, 0.02, 9)
	chunk.Shape = []int64{10, 1000} // elements 0..999 of a 10x1000 tensor
	sp := Sparse("sparse", 2000, 0.02, 10)
	clumps := Sparse("clumps", 1500, 0.02, 11)
	for i := range clumps.Data {
		if i/4%100 >= 30 {
			clumps.Data[i] = 0 // runs of 30 non-zeros (at most) every 100 elements
		}
	}
	// floatcm's paths: float32 values that are bfloat16 values (trailing
	// zeros) and zeros after normal ones; float16 zeros and subnormals.
	fcmF32 := Normal("wc", 3000, 0.02, 24)
	for i := 1500; i < 3000; i++ {
		v := binary.LittleEndian.Uint32(fcmF32.Data[4*i:])
		if i >= 2800 {
			v = 0
		}
		binary.LittleEndian.PutUint32(fcmF32.Data[4*i:], v&0xffff0000)
	}
	fcmF16 := Half("wch", codec.F16, 3000, 26)
	for i := 0; i < 3000; i += 7 {
		binary.LittleEndian.PutUint16(fcmF16.Data[2*i:], uint16(i%3)<<15|uint16(i*37%1024)*uint16(i%2))
	}
	// huff0p's paths: more than 16 exponents in a block (escapes) and an
	// odd last block; bytes of exactly 16 values (no escape code).
	h0pBF16 := Half("wpb", codec.BF16, 9001, 28)
	for i := 0; i < 9001; i += 29 {
		binary.LittleEndian.PutUint16(h0pBF16.Data[2*i:], uint16(i*2654435761>>7))
	}
	h0pBytes := make([]byte, 5001)
	for i := range h0pBytes {
		c := (i*i/3 + i/5) % 16
		if i%4 != 0 {
			c &= 3 // skewed: three in four bytes take one of 4 values
		}
		h0pBytes[i] = "tensor-pack:whyQ"[c]
	}
	runs := Zigzag("dr", codec.U32, 4000, 34) // unchanged in runs: a zstd stream
	for i := range runs.Data {
		if i/4%1000 >= 100 {
			runs.Data[i] = 0
		}
	}
	narrow := Zigzag("dn", codec.U16, 1500, 35) // as deltas of bfloat16 values in float32: shift 16
	widened := codec.NewTensor("dw", codec.U32, 1500)
	for i := range 1500 {
		z := uint32(binary.LittleEndian.Uint16(narrow.Data[2*i:]))
		binary.LittleEndian.PutUint32(widened.Data[4*i:], z<<16|-(z&1)&0xffff)
	}
	text := []byte("tensorpress golden vector: the quick brown fox jumps over the lazy dog. ")
	for len(text) < 3000 {
		text = append(text, text[:min(len(text), 97)]...)
	}
	return []Case{
		{Name: "raw-f32", Recipe: "", Exact: true, Tensor: w},
		{Name: "raw-tagged", Recipe: "", Exact: true, Tensor: tagged},
		{Name: "raw-chunk", Recipe: "", Exact: true, Tensor: chunk},
		{Name: "shuffle4-f32", Recipe: "shuffle4", Exact: true, Tensor: w},
		{Name: "shuffle4-tail", Recipe: "shuffle4", Exact: true, Bytes: text[:1001]},
		{Name: "shuffle2-f16", Recipe: "shuffle2", Exact: true, Tensor: f16},
		{Name: "shuffle-bf16", Recipe: "shuffle", Exact: true, Tensor: bf16},
		{Name: "shuffle8-f64", Recipe: "shuffle8", Exact: true, Tensor: f64},
		{Name: "bytedelta-i64", Recipe: "shuffle8 | bytedelta", Exact: true, Tensor: i64},
		{Name: "huff0-planes", Recipe: "shuffle4 | plane3:huff0 | plane0..2:raw", Exact: true, Tensor: w},
		{Name: "huff0-all", Recipe: "shuffle | *:huff0", Exact: true, Tensor: grad},
		{Name: "huff0-bytes", Recipe: "*:huff0", Exact: true, Bytes: text},
		// More exponents than a huff0b(12) block, of both parities.
		{Name: "fsplit-bf16", Recipe: "fsplit | exp:huff0b(12)", Exact: true, Tensor: Half("wb", codec.BF16, 6000, 21)},
		{Name: "fsplit-f32", Recipe: "fsplit | exp:huff0b(12) | sm:shuffle(3) | sm.plane2:huff0", Exact: true, Tensor: Normal("wf", 5000, 0.02, 22)},
		{Name: "fsplit-f16", Recipe: "fsplit | exp:huff0b(12) | sm:shuffle2 | sm.plane1:huff0", Exact: true, Tensor: Half("wh", codec.F16, 5000, 23)},
		{Name: "floatcm-f32", Recipe: "floatcm", Exact: true, Tensor: fcmF32},
		{Name: "floatcm-bf16", Recipe: "floatcm", Exact: true, Tensor: Half("wcb", codec.BF16, 3000, 25)},
		{Name: "floatcm-f16", Recipe: "floatcm", Exact: true, Tensor: fcmF16},
		{Name: "floatcm-f16-bits", Recipe: "floatcm", Exact: true, Tensor: Ints("hc", codec.F16, 1000, 27)},
		// floatrank on the same paths; any bits escape past rank 15.
		{Name: "floatrank-f32", Recipe: "floatrank", Exact: true, Tensor: fcmF32},
		{Name: "floatrank-bf16", Recipe: "floatrank", Exact: true, Tensor: Half("wrb", codec.BF16, 3000, 28)},
		{Name: "floatrank-f16", Recipe: "floatrank", Exact: true, Tensor: fcmF16},
		{Name: "floatrank-f16-bits", Recipe: "floatrank", Exact: true, Tensor: Ints("hr", codec.F16, 1000, 29)},
		{Name: "huff0p-bf16", Recipe: "fsplit | exp:huff0p(12)", Exact: true, Tensor: h0pBF16},
		{Name: "huff0p-bytes", Recipe: "huff0p(12)", Exact: true, Bytes: h0pBytes},
		// Contexts with streams of their own and the pool; a tail; 64-bit lengths.
		{Name: "lenbits-u32", Recipe: "lenbits", Exact: true, Tensor: Zigzag("dz", codec.U32, 6000, 31)},
		{Name: "lenbits-u16-tail", Recipe: "lenbits(2)", Exact: true, Bytes: append(Zigzag("dh", codec.U16, 2000, 32).Data, 0x5a)},
		{Name: "lenbits-u64", Recipe: "lenbits", Exact: true, Tensor: Zigzag("dd", codec.U64, 700, 33)},
		{Name: "lenbits-runs", Recipe: "lenbits", Exact: false, Tensor: runs},
		{Name: "lenbits-shift", Recipe: "lenbits", Exact: true, Tensor: widened},
		{Name: "s2-text", Recipe: "*:s2", Exact: false, Bytes: text},
		{Name: "s2-better-i64", Recipe: "shuffle8 | *:s2(better)", Exact: false, Tensor: i64},
		{Name: "zstd1-f32", Recipe: "shuffle4 | *:zstd(1)", Exact: false, Tensor: w},
		{Name: "zstd3-text", Recipe: "*:zstd(3)", Exact: false, Bytes: text},
		{Name: "zstd19-i8", Recipe: "*:zstd(19)", Exact: false, Tensor: i8},
		{Name: "xz-text", Recipe: "*:xz", Exact: false, Bytes: text},
		{Name: "mixed-chunk", Recipe: "shuffle4 | plane3:huff0 | plane2:zstd(3) | *:s2", Exact: false, Tensor: chunk},
		{Name: "bool-zstd", Recipe: "*:zstd(1)", Exact: false, Tensor: boolean},
		{Name: "sparse-auto", Recipe: "sparse | val:shuffle | *:huff0", Exact: true, Tensor: sp},
		{Name: "sparse-bitmap", Recipe: "sparse(bitmap)", Exact: true, Tensor: sp},
		{Name: "sparse-gaps", Recipe: "sparse(gaps)", Exact: true, Tensor: sp},
		{Name: "sparse-varint", Recipe: "sparse(varint)", Exact: true, Tensor: sp},
		{Name: "sparse-runs", Recipe: "sparse(runs)", Exact: true, Tensor: clumps},
		{Name: "sparse-dense", Recipe: "sparse(dense) | val:shuffle4", Exact: true, Tensor: w},
		{Name: "coo-delta-bitpack", Recipe: "coo | idx:delta,bitpack", Exact: true, Tensor: sp},
		{Name: "coo-delta-varint", Recipe: "coo | idx:delta,varint | val:shuffle4", Exact: true, Tensor: sp},
		{Name: "width4-sparse-bytes", Recipe: "width(4) | sparse | *:huff0", Exact: true, Bytes: append([]byte{0x0a, 0x80, 0x3e}, sp.Data...)},
		{Name: "fp16", Recipe: "fp16 | shuffle2 | plane1:huff0", Exact: true, Lossy: true, Tensor: grad},
		{Name: "bf16", Recipe: "bf16", Exact: true, Lossy: true, Tensor: grad},
		{Name: "int8-b64", Recipe: "int8(64) | q:huff0", Exact: true, Lossy: true, Tensor: grad},
		{Name: "nf4-double", Recipe: "nf4(64) | scale:int8(256)", Exact: true, Lossy: true, Tensor: grad},
		{Name: "fp4-b64", Recipe: "fp4(64)", Exact: true, Lossy: true, Tensor: grad},
		{Name: "qsgd", Recipe: "qsgd(127, 64, seed=7)", Exact: true, Lossy: true, Tensor: grad},
		{Name: "sign", Recipe: "sign(64)", Exact: true, Lossy: true, Tensor: grad},
		{Name: "ternary", Recipe: "ternary(64)", Exact: true, Lossy: true, Tensor: grad},
		{Name: "fp16-f64", Recipe: "fp16", Exact: true, Lossy: true, Tensor: Normal64("d64", 100, 1, 12)},
	}
}

// Zigzag returns n hub deltas (docs/FORMAT.md, "Delta updates") between
// N(0, 0.02) weights and the same weights moved by about 3% of their
// value, as dt (U16: the bits of bfloat16, U32: float32, U64: float64):
// the zigzag-mapped wrapping difference of the bits.
func Zigzag(name string, dt codec.DType, n int, seed uint64) *codec.Tensor {
	t := codec.NewTensor(name, dt, int64(n))
	r := rand.New(rand.NewPCG(seed, 0x2162))
	for i := range n {
		x := r.NormFloat64() * 0.02
		y := x * (1 + 0.03*r.NormFloat64())
		switch dt {
		case codec.U16:
			d := float16.BF16FromF32(float32(y)) - float16.BF16FromF32(float32(x))
			binary.LittleEndian.PutUint16(t.Data[2*i:], d<<1^uint16(int16(d)>>15))
		case codec.U32:
			d := math.Float32bits(float32(y)) - math.Float32bits(float32(x))
			binary.LittleEndian.PutUint32(t.Data[4*i:], d<<1^uint32(int32(d)>>31))
		default:
			d := math.Float64bits(y) - math.Float64bits(x)
			binary.LittleEndian.PutUint64(t.Data[8*i:], d<<1^uint64(int64(d)>>63))
		}
	}
	return t
}

// Half returns n N(0, 1) values, scaled by a power of two that changes
// every 500 elements, as bfloat16 or float16 (dt), rounded to nearest
// even.
func Half(name string, dt codec.DType, n int, seed uint64) *codec.Tensor {
	r := rand.New(rand.NewPCG(seed, 5))
	b := make([]byte, 2*n)
	s := 1.0
	for i := range n {
		if i%500 == 0 {
			s = math.Pow(2, float64(r.IntN(8)-4))
		}
		v := float32(r.NormFloat64() * s)
		var h uint16
		if dt == codec.BF16 {
			h = float16.BF16FromF32(v)
		} else {
			h = float16.F16FromF32(v)
		}
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return &codec.Tensor{Name: name, DType: dt, Shape: []int64{int64(n)}, Data: b}
}

// Normal64 returns a float64 tensor of n values drawn from N(0, sd²) with
// a fixed seed.
func Normal64(name string, n int, sd float64, seed uint64) *codec.Tensor {
	t := codec.NewTensor(name, codec.F64, int64(n))
	rng := rand.New(rand.NewPCG(seed, 0x7e5))
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(t.Data[8*i:], math.Float64bits(rng.NormFloat64()*sd))
	}
	return t
}

// Sparse returns a float32 tensor of n values, each non-zero (N(0, 0.02))
// with probability density, and -0.0 at element 1, with a fixed seed.
func Sparse(name string, n int, density float64, seed uint64) *codec.Tensor {
	t := codec.NewTensor(name, codec.F32, int64(n))
	rng := rand.New(rand.NewPCG(seed, 0x5a5))
	for i := 0; i < n; i++ {
		if rng.Float64() < density {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
		}
	}
	binary.LittleEndian.PutUint32(t.Data[4:], 0x80000000)
	return t
}

// Normal returns a float32 tensor of n values drawn from N(0, sd²) with a
// fixed seed.
func Normal(name string, n int, sd float64, seed uint64) *codec.Tensor {
	t := codec.NewTensor(name, codec.F32, int64(n))
	rng := rand.New(rand.NewPCG(seed, 0x7e5))
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(float32(rng.NormFloat64()*sd)))
	}
	return t
}

// Ints returns a tensor of n random elements of dt (random bit patterns,
// bools as 0/1, small signed values for i8).
func Ints(name string, dt codec.DType, n int, seed uint64) *codec.Tensor {
	t := codec.NewTensor(name, dt, int64(n))
	rng := rand.New(rand.NewPCG(seed, 0x1a7))
	for i := range t.Data {
		switch dt {
		case codec.Bool:
			t.Data[i] = byte(rng.IntN(2))
		case codec.I8:
			t.Data[i] = byte(int8(rng.NormFloat64() * 20))
		default:
			t.Data[i] = byte(rng.Uint32())
		}
	}
	if dt == codec.F16 || dt == codec.BF16 {
		// Realistic halves: sign and exponent near 1.0, random mantissa.
		for i := 0; i < n; i++ {
			v := uint16(rng.Uint32()) & 0x83ff
			if dt == codec.BF16 {
				v = 0x3c00 | uint16(rng.Uint32())&0x807f
			} else {
				v |= 0x3800
			}
			binary.LittleEndian.PutUint16(t.Data[2*i:], v)
		}
	}
	return t
}

// Ramp returns an integer tensor 0, 3, 6, ... (delta-friendly data).
func Ramp(name string, dt codec.DType, n int) *codec.Tensor {
	t := codec.NewTensor(name, dt, int64(n))
	sz := dt.Size()
	for i := 0; i < n; i++ {
		v := uint64(3 * i)
		for k := 0; k < sz; k++ {
			t.Data[i*sz+k] = byte(v >> (8 * k))
		}
	}
	return t
}
