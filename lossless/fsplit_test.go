package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
)

// fsplitTestBits is n elements of dt (4 or 2 bytes) with every kind of
// bit pattern: normal values, NaNs with payloads, infinities, zeros of
// both signs, subnormals.
func fsplitTestBits(dt codec.DType, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	size := dt.Size()
	b := make([]byte, n*size)
	for i := range n {
		var v uint32
		switch r.IntN(6) {
		case 0:
			v = r.Uint32() // anything: NaNs, infinities, subnormals among them
		case 1:
			v = 0
		case 2:
			v = 0x80000000 // -0
		default:
			v = math.Float32bits(float32(r.NormFloat64() * 0.02))
		}
		if size == 4 {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		} else {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(v>>16)^uint16(r.Uint32()&0x1f))
		}
	}
	return b
}

func TestFsplitRoundTrip(t *testing.T) {
	for _, dt := range []codec.DType{codec.F32, codec.BF16, codec.F16} {
		for _, n := range []int{0, 1, 7, 1000, 70001} {
			data := fsplitTestBits(dt, n, uint64(n))
			tn := &codec.Tensor{Name: "w", DType: dt, Shape: []int64{int64(n)}, Data: data}
			for _, recipe := range []string{"fsplit", "fsplit | exp:huff0b(12)", "fsplit | exp:huff0b(14) | sm:raw",
				"fsplit | exp:huff0 | sm:shuffle2 | sm.plane1:huff0", "fsplit | *:zstd(1)", "fsplit | sm:huff0b(12)"} {
				codectest.Lossless(t, tn, recipe)
			}
		}
	}
	floatPatternsLossless(t, "fsplit")
}

// floatPatternsLossless codes every 16-bit pattern of both 2-byte float
// types, and float32 patterns at every exponent with random other bits,
// with recipe, and checks that they decode exactly.
func floatPatternsLossless(t *testing.T, recipe string) {
	all := make([]byte, 2<<16)
	for v := range 1 << 16 {
		binary.LittleEndian.PutUint16(all[2*v:], uint16(v))
	}
	for _, dt := range []codec.DType{codec.BF16, codec.F16} {
		codectest.Lossless(t, &codec.Tensor{Name: "all", DType: dt, Shape: []int64{1 << 16}, Data: all}, recipe)
	}
	f := make([]byte, 4*256*64)
	r := rand.New(rand.NewPCG(1, 1))
	for e := range 256 {
		for j := range 64 {
			binary.LittleEndian.PutUint32(f[4*(64*e+j):], uint32(e)<<23|r.Uint32()&0x807fffff)
		}
	}
	codectest.Lossless(t, &codec.Tensor{Name: "f", DType: codec.F32, Shape: []int64{256 * 64}, Data: f}, recipe)
}

// TestFsplitBF16Kernels: the AVX2 kernels (where the CPU has AVX2) split
// and join as the pure-Go loops do, at every length around their 32-element
// steps, every bit pattern included.
func TestFsplitBF16Kernels(t *testing.T) {
	if !shuffleHasAVX2 {
		t.Skip("no AVX2 kernels in this build or on this CPU: the Go loops do all the work")
	}
	all := make([]byte, 2<<16)
	for v := range 1 << 16 {
		binary.LittleEndian.PutUint16(all[2*v:], uint16(v))
	}
	r := rand.New(rand.NewPCG(2, 3))
	r.Shuffle(1<<16, func(i, j int) {
		a, b := binary.LittleEndian.Uint16(all[2*i:]), binary.LittleEndian.Uint16(all[2*j:])
		binary.LittleEndian.PutUint16(all[2*i:], b)
		binary.LittleEndian.PutUint16(all[2*j:], a)
	})
	for _, n := range []int{0, 1, 31, 32, 33, 63, 64, 65, 95, 1000, 1 << 16} {
		src := all[:2*n]
		exp, sm, wantExp, wantSM := make([]byte, n), make([]byte, n), make([]byte, n), make([]byte, n)
		fsplitBF16(exp, sm, src)
		fsplitBF16Go(wantExp, wantSM, src)
		if !bytes.Equal(exp, wantExp) || !bytes.Equal(sm, wantSM) {
			t.Fatalf("n %d: the split differs from the pure-Go loop's", n)
		}
		out, want := make([]byte, 2*n), make([]byte, 2*n)
		fjoinBF16(out, exp, sm)
		fjoinBF16Go(want, exp, sm)
		if !bytes.Equal(out, want) || !bytes.Equal(out, src) {
			t.Fatalf("n %d: the join differs from the pure-Go loop's or the input", n)
		}
	}
}

// TestFsplitFields: the segments hold the fields where FORMAT.md puts them.
func TestFsplitFields(t *testing.T) {
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	for _, c := range []struct {
		dt      codec.DType
		in      []byte
		exp, sm []byte
	}{
		{codec.F32, le32(0xc0490fdb), []byte{0x80}, []byte{0xdb, 0x0f, 0xc9}}, // -pi: s 1, e 128, m 0x490fdb
		{codec.BF16, []byte{0x49, 0xc0}, []byte{0x80}, []byte{0xc9}},          // -pi in bf16 (0xc049)
		{codec.F16, []byte{0x48, 0xc2}, []byte{0x10}, []byte{0x48, 0x06}},     // -pi in f16 (0xc248): s 1, e 16, m 0x248
	} {
		outs, err := fsplitOp{}.Encode(ctx, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: c.dt, Len: len(c.in)}, Data: c.in})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].Name != "exp" || outs[1].Name != "sm" || !bytes.Equal(outs[0].Data, c.exp) || !bytes.Equal(outs[1].Data, c.sm) {
			t.Errorf("%v %x: %s %x, %s %x; want exp %x, sm %x", c.dt, c.in, outs[0].Name, outs[0].Data, outs[1].Name, outs[1].Data, c.exp, c.sm)
		}
	}
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestFsplitRefuses(t *testing.T) {
	for _, bad := range []string{"fsplit(1)", "huff0b(11)", "huff0b(18)", "huff0b(14, 2)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%q: %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{{0}} {
		if _, err := fsplitStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("fsplit params %x: %v", p, err)
		}
	}
	for _, p := range [][]byte{nil, {11}, {18}, {14, 0}} {
		if _, err := huff0bStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("huff0b params %x: %v", p, err)
		}
	}
	enc, _ := codec.NewEncoder()
	for _, dt := range []codec.DType{codec.U8, codec.I32, codec.F64} {
		tn := &codec.Tensor{Name: "x", DType: dt, Shape: []int64{8}, Data: make([]byte, 8*dt.Size())}
		if _, err := enc.AppendTensor(nil, tn, codec.MustParseRecipe("fsplit")); err == nil {
			t.Errorf("%v: fsplit accepted it", dt)
		}
	}
	op := fsplitOp{}
	for _, c := range []struct {
		dt      codec.DType
		n       int
		exp, sm []byte
	}{
		{codec.F32, 8, []byte{1, 2}, make([]byte, 5)}, // sm short
		{codec.F32, 8, []byte{1}, make([]byte, 3)},    // one exponent short
		{codec.F16, 2, []byte{0x20}, []byte{0, 0}},    // exponent above 31
		{codec.F16, 2, []byte{0x1f}, []byte{0, 0x08}}, // sign and mantissa above 2^11
		{codec.BF16, 3, []byte{1}, []byte{2}},         // half an element
		{codec.U8, 2, []byte{1, 2}, []byte{1, 2}},     // not a float
	} {
		_, err := op.Decode(nil, nil, []codec.Segment{{Data: c.exp}, {Data: c.sm}}, codec.SegInfo{Name: "data", Elem: c.dt, Len: c.n})
		if !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%v, %d bytes, exp %x, sm %x: %v, want ErrCorrupt", c.dt, c.n, c.exp, c.sm, err)
		}
	}
}

// TestHuff0bBlocks: huff0b cuts at its block size (a table or a reuse per
// block) and decodes what huff0's layout allows.
func TestHuff0bBlocks(t *testing.T) {
	src := append(huff0TestPlane3(40000, 3), huff0TestSkewed(30000, 4)...)
	for _, p := range []int{12, 14, 17} {
		op := huff0Op{log2: uint8(p)}
		outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.Byte, Len: len(src)}, Data: src})
		if err != nil {
			t.Fatal(err)
		}
		if len(outs[0].Data) >= len(src) {
			t.Fatalf("huff0b(%d): %d bytes for %d", p, len(outs[0].Data), len(src))
		}
		got, err := op.Decode(nil, make([]byte, 0, len(src)), outs, codec.SegInfo{Name: "data", Elem: codec.Byte, Len: len(src)})
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("huff0b(%d): %v", p, err)
		}
		// Decoded with another block size, the blocks do not line up.
		other := huff0Op{log2: uint8(p%17 + 12)}
		if p == 12 {
			other = huff0Op{log2: 13}
		}
		if _, err := other.Decode(nil, make([]byte, 0, len(src)), outs, codec.SegInfo{Name: "data", Elem: codec.Byte, Len: len(src)}); err == nil {
			t.Errorf("huff0b(%d)'s blocks decoded as huff0b(%d)'s", p, other.log2)
		}
	}
}

// TestHuff0MinimalHeaders: a block header must be a minimal uvarint (in
// huff0 and huff0b alike); the same block with a longer one is corrupt.
func TestHuff0MinimalHeaders(t *testing.T) {
	in := codec.SegInfo{Name: "exp", Elem: codec.Byte, Len: 1}
	for _, op := range []huff0Op{{}, {log2: 12}} {
		if got, err := op.Decode(nil, make([]byte, 0, 1), []codec.Segment{{Data: []byte{0x01, 'A'}}}, in); err != nil || string(got) != "A" {
			t.Errorf("%s: minimal RLE block: %q, %v", op, got, err)
		}
		if _, err := op.Decode(nil, make([]byte, 0, 1), []codec.Segment{{Data: []byte{0x81, 0x00, 'A'}}}, in); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%s: non-minimal header: %v, want ErrCorrupt", op, err)
		}
	}
}

// BenchmarkFsplitBF16: the split and the join of 1 MiB of bfloat16, the
// kernels used (AVX2 where the CPU has it) against the pure-Go loops.
//
//	go test -run '^$' -bench FsplitBF16 -cpu 1 ./lossless
func BenchmarkFsplitBF16(b *testing.B) {
	const n = 1 << 19
	src := fsplitTestBits(codec.BF16, n, 1)
	exp, sm, out := make([]byte, n), make([]byte, n), make([]byte, 2*n)
	for _, k := range []struct {
		name        string
		split, join func()
	}{
		{"kernel", func() { fsplitBF16(exp, sm, src) }, func() { fjoinBF16(out, exp, sm) }},
		{"go", func() { fsplitBF16Go(exp, sm, src) }, func() { fjoinBF16Go(out, exp, sm) }},
	} {
		b.Run("split/"+k.name, func(b *testing.B) {
			b.SetBytes(2 * n)
			b.ReportAllocs()
			for b.Loop() {
				k.split()
			}
		})
		b.Run("join/"+k.name, func(b *testing.B) {
			b.SetBytes(2 * n)
			b.ReportAllocs()
			for b.Loop() {
				k.join()
			}
		})
	}
}
