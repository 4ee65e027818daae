package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
	"github.com/tensorpress/tensorpress/internal/float16"
)

// huff0pTestExps returns the exponent bytes (fsplit's exp) of n bfloat16
// weights, N(0, 0.02) with one in 50 a zero and one in 20 scaled down by
// up to 2^-15: over 20 values, so that blocks escape their rarest ones.
func huff0pTestExps(n int, seed uint64) []byte { return huff0pTestExpsTail(n, seed, 20) }

// huff0pTestExpsTail is huff0pTestExps with one in tail scaled down (none
// for tail 0).
func huff0pTestExpsTail(n int, seed uint64, tail int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		v := r.NormFloat64() * 0.02
		if tail > 0 && r.IntN(tail) == 0 {
			v = math.Ldexp(v, -r.IntN(16))
		}
		if r.IntN(50) != 0 {
			b[i] = byte(math.Float32bits(float32(v)) >> 23)
		}
	}
	return b
}

// huff0pTestValues returns n bytes drawn from k values (skewed towards
// the first ones), the values themselves scattered over 0..255.
func huff0pTestValues(n, k int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 8))
	vals := r.Perm(256)[:k]
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(vals[min(int(r.ExpFloat64()*float64(k)/4), k-1)])
	}
	return b
}

// huff0pTestBlock is what a block's header says.
type huff0pTestBlock struct {
	k, escapes int
	kind       uint64 // the huff0 block's kind
}

// huff0pTestBlocks walks the blocks of a coded segment of n bytes.
func huff0pTestBlocks(t *testing.T, op huff0pOp, enc []byte, n int) []huff0pTestBlock {
	t.Helper()
	var blocks []huff0pTestBlock
	for off := 0; off < n; off += 1 << op.log2 {
		k := int(enc[0])
		e, m := binary.Uvarint(enc[1+k:])
		enc = enc[1+k+m+int(e):]
		size := min(1<<op.log2, n-off)
		if size&1 == 1 {
			enc = enc[1:] // the last byte
		}
		if size < 2 {
			blocks = append(blocks, huff0pTestBlock{k, int(e), huff0Raw})
			continue
		}
		tag, m := binary.Uvarint(enc)
		enc = enc[m:]
		switch tag & 3 {
		case huff0Raw:
			enc = enc[size/2:]
		case huff0RLE:
			enc = enc[1:]
		default:
			enc = enc[tag>>2:]
		}
		blocks = append(blocks, huff0pTestBlock{k, int(e), tag & 3})
	}
	if len(enc) != 0 {
		t.Fatalf("%d bytes after the last block", len(enc))
	}
	return blocks
}

func TestHuff0pRoundTrip(t *testing.T) {
	op := fastTestParse(t, "huff0p")
	fastTestStringRoundTrip(t, op, "huff0p(14)")
	fastTestStringRoundTrip(t, fastTestParse(t, "huff0p(12)"), "huff0p(12)")
	for _, bad := range []string{"huff0p(11)", "huff0p(18)", "huff0p(1, 2)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%s: %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{nil, {11}, {18}, {14, 0}} {
		if _, err := huff0pStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x): %v, want ErrCorrupt", p, err)
		}
	}
	gens := map[string]func(n int) []byte{
		"exps":     func(n int) []byte { return huff0pTestExps(n, uint64(n)) },
		"values1":  func(n int) []byte { return bytes.Repeat([]byte{0x7c}, n) },
		"values2":  func(n int) []byte { return huff0pTestValues(n, 2, uint64(n)) },
		"values15": func(n int) []byte { return huff0pTestValues(n, 15, uint64(n)) },
		"values16": func(n int) []byte { return huff0pTestValues(n, 16, uint64(n)) },
		"values17": func(n int) []byte { return huff0pTestValues(n, 17, uint64(n)) },
		"values40": func(n int) []byte { return huff0pTestValues(n, 40, uint64(n)) },
		"skewed":   func(n int) []byte { return huff0TestSkewed(n, uint64(n)) },
		"random":   func(n int) []byte { return fastTestRandom(n, uint64(n)) },
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 1000, 4095, 4096, 4097, 1<<14 + 33, 100001} {
			for _, p := range []uint8{12, 14, 17} {
				fastTestOpRoundTrip(t, huff0pOp{log2: p}, name, codec.Byte, gen(n))
			}
		}
	}
}

// TestHuff0pBlocks: each block names its own values (few values: no
// escapes; more than 16: 15 named, the rest escaped), shares huff0 tables
// with the blocks before, and a segment of many values is stored raw.
func TestHuff0pBlocks(t *testing.T) {
	op := huff0pOp{log2: 12}
	for _, tc := range []struct {
		name    string
		src     []byte
		k       int
		escapes bool
	}{
		{"values16", huff0pTestValues(3<<12, 16, 1), 16, false},
		{"values9", huff0pTestValues(3<<12, 9, 2), 9, false},
		{"values17", huff0pTestValues(3<<12, 17, 3), 15, true},
		{"exps", huff0pTestExps(3<<12, 4), 15, true},
	} {
		outs := fastTestOpRoundTrip(t, op, tc.name, codec.Byte, tc.src)
		if outs[0].Len == len(tc.src) {
			t.Fatalf("%s: stored raw", tc.name)
		}
		blocks := huff0pTestBlocks(t, op, outs[0].Data, len(tc.src))
		for i, b := range blocks {
			if b.k != tc.k || (b.escapes > 0) != tc.escapes {
				t.Errorf("%s: block %d: %d values, %d escapes; want %d values, escapes %v", tc.name, i, b.k, b.escapes, tc.k, tc.escapes)
			}
		}
		if blocks[0].kind != huff0Table {
			t.Errorf("%s: first block of kind %d, want a table", tc.name, blocks[0].kind)
		}
	}
	rle := fastTestOpRoundTrip(t, op, "rle", codec.Byte, bytes.Repeat([]byte{3}, 5000))
	if b := huff0pTestBlocks(t, op, rle[0].Data, 5000); b[0].k != 1 || b[0].kind != huff0RLE {
		t.Errorf("one value: %+v, want k 1 and an RLE block", b)
	}
	if r := fastTestOpRoundTrip(t, op, "random", codec.Byte, fastTestRandom(5000, 1)); r[0].Len != 5000 {
		t.Errorf("random bytes coded to %d bytes, want stored raw", r[0].Len)
	}
}

// TestHuff0pKernel: the AVX2 expansion writes what the Go loop writes,
// for every k and every pair byte.
func TestHuff0pKernel(t *testing.T) {
	if !shuffleHasAVX2 {
		t.Skip("no AVX2 kernel in this build or on this CPU: the Go loop does all the work")
	}
	pairs := make([]byte, 512+16)
	for i := range 512 {
		pairs[i] = byte(i * 37)
	}
	tab := [16]byte{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5}
	for k := 1; k <= 16; k++ {
		for _, n := range []int{0, 31, 32, 33, 64, 1024, 1055} {
			dst := make([]byte, n)
			mask := make([]uint32, n/32+1)
			done := huff0pExpandAsm(dst, pairs, &tab, k, mask)
			if done != n&^31 {
				t.Fatalf("k %d, n %d: did %d bytes", k, n, done)
			}
			for j := range done {
				c := pairs[j/2] >> (4 - 4*(j&1)) & 15
				esc := mask[j/32]>>(j%32)&1 == 1
				if esc != (int(c) >= k) || int(c) < k && dst[j] != tab[c] {
					t.Fatalf("k %d, byte %d (code %d): %#x escape %v", k, j, c, dst[j], esc)
				}
			}
		}
	}
}

// TestHuff0pPackKernel: the AVX2 packing writes the codes the Go loop
// writes and marks the escapes, for every k.
func TestHuff0pPackKernel(t *testing.T) {
	if !shuffleHasAVX2 {
		t.Skip("no AVX2 kernel in this build or on this CPU: the Go loop does all the work")
	}
	src := huff0pTestValues(1<<12+40, 24, 9)
	vals := make([]byte, 0, 24)
	for _, b := range src {
		if !bytes.Contains(vals, []byte{b}) {
			vals = append(vals, b)
		}
	}
	for k := 1; k <= 16; k++ {
		var code [256]byte
		for i := range code {
			code[i] = huff0pEscape
		}
		for i, v := range vals[:k] {
			code[v] = byte(i)
		}
		for _, n := range []int{0, 31, 32, 64, 1 << 12} {
			pairs := make([]byte, n/2+1)
			mask := make([]uint32, n/32+1)
			done := huff0pPackAsm(pairs, src[:n], vals[:k], mask)
			if done != n&^31 {
				t.Fatalf("k %d, n %d: did %d bytes", k, n, done)
			}
			for j := range done {
				c := pairs[j/2] >> (4 - 4*(j&1)) & 15
				if c != code[src[j]] || (mask[j/32]>>(j%32)&1 == 1) != (c == huff0pEscape) {
					t.Fatalf("k %d, byte %d (%#x): code %d, want %d; mask %08x", k, j, src[j], c, code[src[j]], mask[j/32])
				}
			}
		}
	}
}

// TestHuff0pAgainstHuff0b: on the exponents of Gaussian weights, drawn
// independently (no context for the pairs to take), huff0p codes within 2%
// of huff0b with blocks of the same size. Escapes cost a byte each: with
// one weight in 20 scaled down (about 3% of the exponents escaped) huff0p
// codes about 3.5% larger, which the test logs. On real weights it codes
// smaller (BENCHMARKS).
func TestHuff0pAgainstHuff0b(t *testing.T) {
	for _, tail := range []int{0, 20} {
		src := huff0pTestExpsTail(1<<18, 5, tail)
		p := fastTestOpRoundTrip(t, huff0pOp{log2: 14}, "exp", codec.Byte, src)
		b := fastTestOpRoundTrip(t, huff0Op{log2: 14}, "exp", codec.Byte, src)
		t.Logf("exponents of 256Ki bf16 weights, tail 1 in %d: huff0p(14) %d bytes, huff0b(14) %d", tail, p[0].Len, b[0].Len)
		if tail == 0 && 100*p[0].Len > 102*b[0].Len {
			t.Errorf("huff0p(14) %d bytes, huff0b(14) %d: want at most 2%% more", p[0].Len, b[0].Len)
		}
	}
}

func TestHuff0pChains(t *testing.T) {
	for _, tc := range []struct {
		recipe string
		dt     codec.DType
	}{
		{"fsplit | exp:huff0p", codec.BF16},
		{"fsplit | exp:huff0p(12)", codec.F32},
		{"fsplit | exp:huff0p(13) | sm:shuffle2 | sm.plane1:huff0", codec.F16},
		{"huff0p", codec.I8},
	} {
		for _, n := range []int{0, 1, 33, 5000, 70001} {
			data := fastTestFloats((n*tc.dt.Size()+3)/4, uint64(n))[:n*tc.dt.Size()]
			codectest.Lossless(t, fastTestTensor("w", tc.dt, data), tc.recipe)
		}
	}
}

// TestHuff0pCorrupt damages coded segments: every result must be an error
// wrapping ErrCorrupt or the right number of bytes, never a panic.
func TestHuff0pCorrupt(t *testing.T) {
	op := huff0pOp{log2: 12}
	src := append(huff0pTestExps(3<<12+1001, 8), bytes.Repeat([]byte{3}, 500)...)
	outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "p", Len: len(src)}, Data: src})
	if err != nil {
		t.Fatal(err)
	}
	enc := outs[0].Data
	// decode is nil after an error (which must wrap ErrCorrupt), else n
	// bytes, none written past them.
	decode := func(b []byte, n int) []byte {
		return fastFuzzDecode(t, op, []codec.Segment{{Data: b}}, codec.SegInfo{Name: "p", Elem: codec.Byte, Len: n})
	}
	if decode(enc, len(src)) == nil {
		t.Fatal("the coded segment does not decode")
	}
	for cut := range len(enc) {
		if decode(enc[:cut], len(src)) != nil {
			t.Errorf("truncated to %d bytes: no error", cut)
		}
	}
	if decode(append(bytes.Clone(enc), 0), len(src)) != nil {
		t.Error("trailing byte: no error")
	}
	for _, n := range []int{0, 1, len(src) - 1, len(src) + 1, len(src) + 4096} {
		if decode(enc, n) != nil {
			t.Errorf("length %d (coded %d): no error", n, len(src))
		}
	}
	r := fastTestRandom(len(enc), 99)
	for i := range enc {
		b := bytes.Clone(enc)
		b[i] ^= r[i] | 1
		decode(b, len(src))
	}
	// Hand-made blocks of 4 bytes (2 pairs, raw).
	raw := func(head []byte, pairs ...byte) []byte {
		return append(append(head, huff0Raw), pairs...)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"k 0", raw([]byte{0, 0}, 0, 0)},
		{"k 17", raw(append([]byte{17}, make([]byte, 17)...), 0, 0)},
		{"escapes with k 16", raw(append(append([]byte{16}, make([]byte, 16)...), 1, 5), 0, 0)},
		{"more escapes than bytes", raw([]byte{1, 7, 5, 1, 2, 3, 4, 5}, 0, 0)},
		{"an escape code, no escaped byte", raw([]byte{1, 7, 0}, 0x0f, 0)},
		{"an escaped byte unused", raw([]byte{1, 7, 1, 9}, 0, 0)},
		{"non-minimal escape count", raw([]byte{1, 7, 0x80, 0}, 0, 0)},
	} {
		if decode(tc.b, 4) != nil {
			t.Errorf("%s (%x): no error", tc.name, tc.b)
		}
	}
	// An odd block ends in its last byte, before the pairs.
	if decode(raw([]byte{2, 7, 8, 1, 9, 0xaa}, 0x0f), 3) == nil {
		t.Error("a valid odd block: an error")
	}
	if decode([]byte{2, 7, 8, 0}, 1) != nil {
		t.Error("a block of one byte without it: no error")
	}
}

// BenchmarkHuff0p: bfloat16's chains with the exponents one to a Huffman
// symbol (huff0b) and two (huff0p), on 1 MiB of synthetic weights; the
// real ones: `codec-bench run --weights --tensors human-bf16` (BENCHMARKS).
func BenchmarkHuff0p(b *testing.B) {
	f32 := floatcmTestWeights(1<<19, 6)
	bf := make([]byte, 1<<20)
	for i := range 1 << 19 {
		v := binary.LittleEndian.Uint32(f32[4*i:])
		binary.LittleEndian.PutUint16(bf[2*i:], float16.BF16FromF32(math.Float32frombits(v)))
	}
	for _, rs := range []string{"fsplit | exp:huff0b(14)", "fsplit | exp:huff0p(15)", "fsplit | exp:huff0p(14)"} {
		benchmarkChain(b, rs, fastTestTensor("w", codec.BF16, bf), rs)
	}
}

// TestHuff0pConcurrent: huff0p and huff0b share pooled huff0 state (huff0p
// sets its table log on it and puts it back at huff0's default); running
// both at once, every round trip holds and huff0b's bytes do not change.
func TestHuff0pConcurrent(t *testing.T) {
	p := huff0pTestExps(300000, 6)
	b, err := huff0Op{log2: 14}.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "p", Len: len(p)}, Data: p})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(b[0].Data)
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for i := range 6 {
				var op codec.Op = huff0pOp{log2: uint8(12 + g)}
				if (g+i)%2 == 1 {
					op = huff0Op{log2: 14}
				}
				outs, e := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: codec.SegInfo{Name: "p", Len: len(p)}, Data: p})
				if e != nil {
					err = e
					break
				}
				if _, ok := op.(huff0Op); ok && !bytes.Equal(outs[0].Data, want) {
					err = errors.New("huff0b's bytes changed beside huff0p")
					break
				}
				got, e := op.Decode(nil, make([]byte, 0, len(p)), outs, codec.SegInfo{Name: "p", Len: len(p)})
				if e != nil || !bytes.Equal(got, p) {
					err = errors.Join(e, fmt.Errorf("%s: round trip differs", op))
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
