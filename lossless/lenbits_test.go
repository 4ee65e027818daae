package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// lenbitsTestDeltas returns n zigzag differences of w bytes between two
// versions of N(0, 0.02) weights (w = 4: float32; 2: bfloat16; 8:
// float64), each weight moved by about 3% of its value, as the hub makes
// them between FedAvg rounds; a run of zeros in the middle (weights that
// did not move).
func lenbitsTestDeltas(n, w int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 5))
	b := make([]byte, n*w)
	for i := range n {
		x := r.NormFloat64() * 0.02
		y := x + x*0.03*r.NormFloat64()
		if i > n/3 && i < n/2 {
			y = x
		}
		var d uint64
		switch w {
		case 2:
			c, p := uint16(math.Float32bits(float32(y))>>16), uint16(math.Float32bits(float32(x))>>16)
			z := c - p
			d = uint64(z<<1 ^ uint16(int16(z)>>15))
		case 4:
			z := math.Float32bits(float32(y)) - math.Float32bits(float32(x))
			d = uint64(z<<1 ^ uint32(int32(z)>>31))
		default:
			z := math.Float64bits(y) - math.Float64bits(x)
			d = z<<1 ^ uint64(int64(z)>>63)
		}
		for k := range w {
			b[i*w+k] = byte(d >> (8 * k))
		}
	}
	return b
}

func TestLenbitsRoundTrip(t *testing.T) {
	for _, w := range []int{2, 4, 8} {
		op := fastTestParse(t, "lenbits("+string(rune('0'+w))+")")
		fastTestStringRoundTrip(t, op, op.String())
		elem := map[int]codec.DType{2: codec.U16, 4: codec.U32, 8: codec.U64}[w]
		inputs := map[string]func(n int) []byte{
			"deltas": func(n int) []byte { return lenbitsTestDeltas(n/w+1, w, uint64(n))[:n] },
			"random": func(n int) []byte { return fastTestRandom(n, uint64(n)) },
			"zeros":  func(n int) []byte { return make([]byte, n) },
			"ones":   func(n int) []byte { return bytes.Repeat([]byte{0xff}, n) },
		}
		for name, gen := range inputs {
			for _, n := range []int{0, 1, w - 1, w, w + 1, 100 * w, lenbitsMinCtx*w - 1, 5000*w + 3, 300000 * w} {
				in := gen(n)
				outs := fastTestOpRoundTrip(t, op, "data", elem, in)
				if len(outs[0].Data) >= len(in) { // stored raw by the codec: decode it here
					got, err := op.Decode(&codec.Ctx{Arena: &codec.Arena{}}, make([]byte, 0, len(in)), outs, codec.SegInfo{Name: "data", Elem: elem, Len: len(in)})
					if err != nil || !bytes.Equal(got, in) {
						t.Fatalf("%s %s %d bytes: %v", op, name, n, err)
					}
				}
				if name == "deltas" && n == 300000*w {
					t.Logf("w=%d deltas: %d bytes to %d (%.3fx)", w, n, len(outs[0].Data), float64(n)/float64(len(outs[0].Data)))
				}
			}
		}
	}
}

// lenbitsTestWiden returns the deltas of w-byte elements that hold
// values of half their width (bfloat16 values in float32, float32 in
// float64: the low half of their bits zero) as the hub makes them: the
// zigzag-coded difference, whose low half is all zeros or all ones.
func lenbitsTestWiden(n, w int, seed uint64) []byte {
	h := w / 2
	half := lenbitsTestDeltas(n, h, seed)
	b := make([]byte, n*w)
	for i := range n {
		z := elem(half[i*h:], h)
		v := z<<(8*h) | -(z&1)&(1<<(8*h)-1)
		for k := range w {
			b[i*w+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// lenbitsTestFrame codes data as a tensor of dt with recipe r through the
// codec, checks that the frame decodes to it and returns its size.
func lenbitsTestFrame(t *testing.T, data []byte, dt codec.DType, r string) int {
	t.Helper()
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	f, err := enc.AppendTensor(nil, fastTestTensor("d", dt, data), codec.MustParseRecipe(r))
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := new(codec.Decoder).DecodeFrame(f)
	if err != nil || !bytes.Equal(got.Tensors[0].Data, data) {
		t.Fatalf("%s: round trip: %v", r, err)
	}
	return len(f)
}

// TestLenbitsShift: elements whose low bits all repeat the bit above them
// (deltas of values of half the width) cost what the narrower deltas do,
// not the repeated bits; shuffle | zstd drops them as zero planes.
func TestLenbitsShift(t *testing.T) {
	size := func(data []byte, dt codec.DType, r string) int { return lenbitsTestFrame(t, data, dt, r) }
	const n = 50000
	for _, w := range []int{4, 8} {
		wide := lenbitsTestWiden(n, w, 11)
		wdt := map[int]codec.DType{4: codec.U32, 8: codec.U64}[w]
		ndt := map[int]codec.DType{4: codec.U16, 8: codec.U32}[w]
		lw := size(wide, wdt, "lenbits")
		ln := size(lenbitsTestDeltas(n, w/2, 11), ndt, "lenbits")
		zw := size(wide, wdt, "shuffle | *:zstd(1)")
		t.Logf("w=%d: lenbits %d bytes, on the narrow deltas %d; shuffle | *:zstd(1) %d", w, lw, ln, zw)
		if lw > ln+16 {
			t.Errorf("w=%d: lenbits %d bytes, %d on the narrow deltas", w, lw, ln)
		}
	}
	// One element that does not repeat its low bits: no shift, still exact.
	wide := lenbitsTestWiden(1000, 4, 12)
	wide[0] ^= 2
	size(wide, codec.U32, "lenbits")
}

// TestLenbitsBind: plain lenbits takes its width from the element type and
// refuses one-byte elements; frames record the width.
func TestLenbitsBind(t *testing.T) {
	op := fastTestParse(t, "lenbits")
	for dt, w := range map[codec.DType]int{codec.F32: 4, codec.BF16: 2, codec.F64: 8, codec.U16: 2} {
		b, err := op.(codec.Binder).Bind(codec.SegInfo{Name: "data", Elem: dt, Len: 64})
		if err != nil || !bytes.Equal(b.AppendParams(nil), []byte{byte(w)}) {
			t.Errorf("Bind(%v) = %v, %v; want width %d", dt, b, err, w)
		}
	}
	if _, err := op.(codec.Binder).Bind(codec.SegInfo{Name: "data", Elem: codec.U8, Len: 64}); err == nil {
		t.Error("Bind(u8): no error")
	}
	for _, bad := range []string{"lenbits(3)", "lenbits(16)", "lenbits(1)", "lenbits(2, 4)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%s: %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{{}, {0}, {3}, {4, 4}} {
		if _, err := lenbitsStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x): %v, want ErrCorrupt", p, err)
		}
	}
	// Through the codec: a float32 tensor of deltas, with the width bound.
	data := lenbitsTestDeltas(10000, 4, 9)
	if n := lenbitsTestFrame(t, data, codec.F32, "lenbits"); n >= len(data)*3/4 {
		t.Errorf("lenbits: %d bytes of %d", n, len(data))
	}
}

// TestLenbitsCorrupt changes coded segments in the ways a decoder must
// catch: each must give ErrCorrupt (the fuzz target covers the rest).
func TestLenbitsCorrupt(t *testing.T) {
	op := lenbitsOp{width: 4}
	data := lenbitsTestDeltas(6000, 4, 1)
	in := codec.SegInfo{Name: "data", Elem: codec.U32, Len: len(data) + 2}
	data = append(data, 7, 9)
	outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: in, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	enc := outs[0].Data
	if got := fastFuzzDecode(t, op, outs, in); !bytes.Equal(got, data) {
		t.Fatal("round trip differs")
	}
	cases := map[string][]byte{
		"cut":           enc[:len(enc)-1],
		"extra":         append(bytes.Clone(enc), 0),
		"shift 32":      append([]byte{32}, enc[1:]...),
		"no contexts":   append([]byte{enc[0], 0}, enc[2:]...),
		"66 contexts":   append([]byte{enc[0], 66}, enc[2:]...),
		"count too big": append([]byte{enc[0], enc[1], 0xff, 0xff, 0x03}, enc[3:]...),
		"padding set": func() []byte {
			b := bytes.Clone(enc)
			b[len(b)-3] |= 0x80 // the last byte of the bits, before the 2-byte tail
			return b
		}(),
	}
	nb := 0
	for i := 0; i+4 <= len(data); i += 4 {
		nb += max(int(lenOf(uint64(binary.LittleEndian.Uint32(data[i:]))))-1, 0)
	}
	if nb%8 == 0 {
		t.Fatalf("%d bits below the leading ones: no padding to test", nb)
	}
	for name, b := range cases {
		if got := fastFuzzDecode(t, op, []codec.Segment{{Data: b}}, in); got != nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// Counts that sum right but tell the wrong contexts: move one element
	// from one context with a stream of its own to another; the streams
	// then run out or decode to the wrong lengths.
	k, m := binary.Uvarint(enc[1:])
	counts := make([]uint64, k)
	rest := enc[1+m:]
	var own []int
	for c := range counts {
		counts[c], m = binary.Uvarint(rest)
		rest = rest[m:]
		if counts[c] >= lenbitsMinCtx {
			own = append(own, c)
		}
	}
	if len(own) < 2 {
		t.Fatalf("counts %v: want two contexts with streams of their own", counts)
	}
	counts[own[0]]--
	counts[own[1]]++
	moved := binary.AppendUvarint([]byte{enc[0]}, k)
	for _, c := range counts {
		moved = binary.AppendUvarint(moved, c)
	}
	moved = append(moved, rest...)
	if got := fastFuzzDecode(t, op, []codec.Segment{{Data: moved}}, in); got != nil {
		t.Error("counts moved between contexts: decoded")
	}
}

// TestLenbitsPoolCounts: the counts of the contexts that share the pool
// must match the elements in them too, so that each input has one coding.
func TestLenbitsPoolCounts(t *testing.T) {
	op := lenbitsOp{width: 4}
	data := lenbitsTestDeltas(6000, 4, 1)
	in := codec.SegInfo{Name: "data", Elem: codec.U32, Len: len(data)}
	outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: in, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	enc := outs[0].Data
	k, m := binary.Uvarint(enc[1:])
	counts := make([]uint64, lenbitsMaxK)
	rest := enc[1+m:]
	for c := range k {
		counts[c], m = binary.Uvarint(rest)
		rest = rest[m:]
	}
	pooled := -1
	for c := range int(k) {
		if counts[c] > 0 && counts[c] < lenbitsMinCtx && (pooled < 0 || counts[c] > counts[pooled]) {
			pooled = c
		}
	}
	if pooled < 0 {
		t.Fatalf("counts %v: no pooled context", counts[:k])
	}
	for _, to := range []int{int(k) - 1, int(k)} { // another pooled context; one past the listed ones
		if counts[to] >= lenbitsMinCtx || to == pooled {
			continue
		}
		c := slices.Clone(counts)
		c[pooled]--
		c[to]++
		kk := max(k, uint64(to+1))
		b := binary.AppendUvarint([]byte{enc[0]}, kk)
		for _, x := range c[:kk] {
			b = binary.AppendUvarint(b, x)
		}
		b = append(b, rest...)
		if got := fastFuzzDecode(t, op, []codec.Segment{{Data: b}}, in); got != nil {
			t.Errorf("one element moved from pooled context %d to %d: decoded", pooled, to)
		}
	}
}

func FuzzLenbitsDecode(f *testing.F) {
	for i, w := range []int{2, 4, 8} {
		for _, s := range [][]byte{lenbitsTestDeltas(700, w, uint64(i)), fastTestRandom(33, 1), make([]byte, 4*w)} {
			op := lenbitsOp{width: uint8(w)}
			outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Len: len(s)}, Data: s})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(op.AppendParams(nil), uint32(len(s)), outs[0].Data)
		}
	}
	f.Fuzz(func(t *testing.T, params []byte, n uint32, data []byte) {
		op, err := lenbitsStage.Load(params)
		if err != nil {
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("Load(%x): %v does not wrap ErrCorrupt", params, err)
			}
			return
		}
		in := codec.SegInfo{Name: "data", Elem: codec.U32, Len: fastFuzzLen(n, data)}
		fastFuzzDecode(t, op, []codec.Segment{{Data: data}}, in)
		fastFuzzRoundTrip(t, op, in, data)
	})
}

// BenchmarkLenbits codes 1 MiB of float32 deltas (lenbitsTestDeltas) with
// lenbits and, for comparison in the same run, with the chain the hub
// used before it, shuffle4 | *:zstd(1):
//
//	go test -run '^$' -bench Lenbits ./lossless
func BenchmarkLenbits(b *testing.B) {
	data := lenbitsTestDeltas(256<<10, 4, 7)
	for _, rs := range []string{"lenbits", "shuffle4 | *:zstd(1)"} {
		benchmarkChain(b, rs, fastTestTensor("d", codec.U32, data), rs)
	}
}

// benchmarkChain runs sub-benchmarks name/encode and name/decode: tn
// coded with the recipe rs into a frame, and that frame decoded.
func benchmarkChain(b *testing.B, name string, tn *codec.Tensor, rs string) {
	r := codec.MustParseRecipe(rs)
	enc, err := codec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	frame, err := enc.AppendTensor(nil, tn, r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run(name+"/encode", func(b *testing.B) {
		b.SetBytes(int64(len(tn.Data)))
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			if buf, err = enc.AppendTensor(buf[:0], tn, r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(tn.Data))/float64(len(frame)), "ratio")
	})
	b.Run(name+"/decode", func(b *testing.B) {
		b.SetBytes(int64(len(tn.Data)))
		b.ReportAllocs()
		var dec codec.Decoder
		for b.Loop() {
			if _, _, err := dec.DecodeFrame(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestLenbitsRuns: where most elements did not change, in runs, their
// zero lengths go through zstd (a bit each in Huffman codes), and lenbits
// stays close to shuffle4 | *:zstd(1), which codes the runs as matches.
func TestLenbitsRuns(t *testing.T) {
	data := lenbitsTestDeltas(100000, 4, 3)
	for i := range 100000 {
		if i/1000%10 != 0 {
			clear(data[4*i : 4*i+4]) // 90% unchanged, in runs of 9000
		}
	}
	lb := lenbitsTestFrame(t, data, codec.U32, "lenbits")
	zs := lenbitsTestFrame(t, data, codec.U32, "shuffle4 | *:zstd(1)")
	t.Logf("90%% zeros in runs: lenbits %d bytes, shuffle4 | *:zstd(1) %d", lb, zs)
	if 10*lb > 11*zs {
		t.Errorf("lenbits %d bytes, shuffle4 | *:zstd(1) %d: want at most 10%% more", lb, zs)
	}
}
