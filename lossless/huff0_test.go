package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
)

// huff0TestPlane3 returns the sign/exponent plane of n float32 weights.
func huff0TestPlane3(n int, seed uint64) []byte {
	f := fastTestFloats(n, seed)
	p := make([]byte, n)
	for i := range p {
		p[i] = f[4*i+3]
	}
	return p
}

// huff0TestSkewed returns n bytes from a geometric-ish distribution
// (about 3 bits each).
func huff0TestSkewed(n int, seed uint64) []byte {
	r := fastTestRandom(n, seed)
	for i, b := range r {
		r[i] = byte(0x40 + bitsLeadingZeros8(b|1)) // 0x40..0x47, P(k) ~ 2^-k
	}
	return r
}

func bitsLeadingZeros8(b byte) int {
	n := 0
	for b&0x80 == 0 {
		b <<= 1
		n++
	}
	return n
}

// huff0TestBlocks lists the kinds of the blocks of a coded segment.
func huff0TestBlocks(t *testing.T, enc []byte, n int) []uint64 {
	t.Helper()
	var kinds []uint64
	for off := 0; off < n; off += huff0Block {
		tag, k := binary.Uvarint(enc)
		if k <= 0 {
			t.Fatalf("bad tag at block %d", off)
		}
		enc = enc[k:]
		kind, size := tag&3, int(tag>>2)
		switch kind {
		case huff0Raw:
			size = min(huff0Block, n-off)
		case huff0RLE:
			size = 1
		}
		enc = enc[size:]
		kinds = append(kinds, kind)
	}
	if len(enc) != 0 {
		t.Fatalf("%d trailing bytes", len(enc))
	}
	return kinds
}

func TestHuff0RoundTrip(t *testing.T) {
	op := fastTestParse(t, "huff0")
	fastTestStringRoundTrip(t, op, "huff0")
	if _, err := codec.ParseRecipe("huff0(1)"); !errors.Is(err, codec.ErrRecipe) {
		t.Errorf("huff0(1): %v, want ErrRecipe", err)
	}
	if _, err := huff0Stage.Load([]byte{0}); !errors.Is(err, codec.ErrCorrupt) {
		t.Errorf("Load(00): %v, want ErrCorrupt", err)
	}
	sizes := []int{0, 1, 2, 11, 12, 13, 100, 1000, 4096, huff0Block - 1, huff0Block, huff0Block + 1, 256 << 10, 300001}
	inputs := map[string]func(n int) []byte{
		"plane3": func(n int) []byte { return huff0TestPlane3(n, uint64(n)) },
		"skewed": func(n int) []byte { return huff0TestSkewed(n, uint64(n)) },
		"zeros":  func(n int) []byte { return make([]byte, n) },
		"random": func(n int) []byte { return fastTestRandom(n, uint64(n)) },
		// A run, then skewed bytes, then noise: RLE, table and raw blocks.
		"mixed": func(n int) []byte {
			b := append(bytes.Repeat([]byte{7}, huff0Block), huff0TestSkewed(huff0Block+100, 1)...)
			b = append(b, fastTestRandom(huff0Block, 2)...)
			return b[:min(n, len(b))]
		},
	}
	for name, gen := range inputs {
		for _, n := range sizes {
			outs := fastTestOpRoundTrip(t, op, "plane3", codec.Byte, gen(n))
			coded := len(outs[0].Data) < n
			switch name {
			case "random":
				if coded {
					t.Errorf("random %d bytes: coded to %d", n, len(outs[0].Data))
				}
			case "plane3", "skewed", "zeros":
				if n >= 100 && !coded {
					t.Errorf("%s %d bytes: not coded", name, n)
				}
			}
		}
	}

	// The mixed input gives one block of each kind; a second plane block
	// reuses the first one's table.
	mixed := inputs["mixed"](1 << 20)
	outs := fastTestOpRoundTrip(t, op, "x", codec.Byte, mixed)
	if kinds := huff0TestBlocks(t, outs[0].Data, len(mixed)); len(kinds) != 4 || kinds[0] != huff0RLE || kinds[1] != huff0Table || kinds[2] != huff0Raw {
		t.Errorf("mixed input: block kinds %v, want [rle table raw raw]", kinds)
	}
	// Blocks that a table fits as well as a new one would reuse it. (On
	// float exponent planes, later blocks mostly hold a rare exponent the
	// first table lacks and get tables of their own.)
	p := bytes.Repeat(huff0TestSkewed(huff0Block, 5), 3)
	outs = fastTestOpRoundTrip(t, op, "x", codec.Byte, p)
	if kinds := huff0TestBlocks(t, outs[0].Data, len(p)); fmt.Sprint(kinds) != "[2 3 3]" {
		t.Errorf("repeated block: kinds %v, want [2 3 3] (table, reuse, reuse)", kinds)
	}
}

// TestHuff0Ratio checks the float32 exponent plane against its order-0
// bound (2.68 bits per byte for N(0, 0.02)).
func TestHuff0Ratio(t *testing.T) {
	p := huff0TestPlane3(256<<10, 1)
	outs := fastTestOpRoundTrip(t, huff0Op{}, "plane3", codec.Byte, p)
	bits := float64(8*len(outs[0].Data)) / float64(len(p))
	if bits > 2.75 {
		t.Errorf("plane3: %.3f bits per byte, want about 2.7", bits)
	}
	est := float64(8*huff0Estimate(p)) / float64(len(p))
	if est < 2.5 || est > 2.9 {
		t.Errorf("plane3: estimate %.3f bits per byte, want about 2.7", est)
	}
	// Noise and the mantissa planes are not worth trying.
	f := fastTestFloats(1<<18, 3)
	plane1, plane2 := make([]byte, 1<<18), make([]byte, 1<<18)
	for i := range plane1 {
		plane1[i], plane2[i] = f[4*i+1], f[4*i+2]
	}
	for _, b := range [][]byte{fastTestRandom(1<<20, 1), plane1, plane2, fastTestRandom(100, 2)} {
		if e := huff0Estimate(b); e <= len(b)-len(b)>>huff0MinGain {
			t.Errorf("estimate %d of %d bytes of noise passes the gate", e, len(b))
		}
	}
}

func TestHuff0Recipes(t *testing.T) {
	for _, tc := range []struct {
		recipe string
		dt     codec.DType
	}{
		{"shuffle4 | bytedelta | *:huff0", codec.F32},
		{"shuffle4 | plane3:huff0 | plane0..2:raw", codec.F32},
		{"shuffle8 | plane7:huff0", codec.F64},
		{"shuffle | *:huff0", codec.F64},
		{"huff0", codec.I8},
	} {
		for _, n := range []int{0, 1, 2, 3, 17, 1000, 100003} {
			var data []byte
			if tc.dt == codec.F64 {
				f := fastTestFloats(2*n, uint64(n))
				data = make([]byte, 8*n)
				for i := range n { // float64 with the float32's bits in its top half
					copy(data[8*i+4:8*i+8], f[4*i:4*i+4])
				}
			} else {
				data = fastTestFloats((n*tc.dt.Size()+3)/4, uint64(n))[:n*tc.dt.Size()]
			}
			codectest.Lossless(t, fastTestTensor("w", tc.dt, data), tc.recipe)
		}
	}
}

// TestHuff0Corrupt damages coded segments: every result must be an error
// wrapping ErrCorrupt or the right bytes, never a panic or an overrun.
func TestHuff0Corrupt(t *testing.T) {
	src := append(huff0TestPlane3(2*huff0Block+1000, 8), bytes.Repeat([]byte{3}, 500)...)
	outs, err := huff0Op{}.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "p", Len: len(src)}, Data: src})
	if err != nil {
		t.Fatal(err)
	}
	enc := outs[0].Data
	in := codec.SegInfo{Name: "p", Elem: codec.Byte, Len: len(src)}
	decode := func(b []byte, n int) error {
		in := in
		in.Len = n
		dst := make([]byte, 0, n+1)
		got, err := huff0Op{}.Decode(nil, dst[:0:n], []codec.Segment{{Data: b}}, in)
		if err == nil && len(got) != n {
			t.Fatalf("decoded %d bytes, want %d", len(got), n)
		}
		if err != nil && !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
		return err
	}
	if err := decode(enc, len(src)); err != nil {
		t.Fatal(err)
	}
	for cut := range len(enc) {
		if cut%97 != 0 && cut > 64 && cut < len(enc)-64 {
			continue
		}
		if decode(enc[:cut], len(src)) == nil {
			t.Errorf("truncated to %d bytes: no error", cut)
		}
	}
	if decode(append(bytes.Clone(enc), 0), len(src)) == nil {
		t.Error("trailing byte: no error")
	}
	for _, n := range []int{0, 1, len(src) - 1, len(src) + 1, len(src) + huff0Block} {
		if decode(enc, n) == nil {
			t.Errorf("length %d (coded %d): no error", n, len(src))
		}
	}
	// Flipped bits may decode to other bytes (the frame CRC catches
	// those); they must not panic or overrun.
	r := fastTestRandom(len(enc), 99)
	for i := 0; i < len(enc); i += 1 + i/16 {
		b := bytes.Clone(enc)
		b[i] ^= r[i] | 1
		decode(b, len(src))
	}
	// Hand-made blocks.
	for _, b := range [][]byte{
		{huff0Reuse | 10<<2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, // reuse without a table
		{huff0Raw | 1<<2, 0}, // raw with a length
		{huff0RLE},           // RLE without its byte
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // bad uvarint
	} {
		if decode(b, 10) == nil {
			t.Errorf("%x: no error", b)
		}
	}
}

func TestHuff0Concurrent(t *testing.T) {
	p := huff0TestPlane3(300000, 4)
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for range 5 {
				outs, e := huff0Op{}.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: codec.SegInfo{Name: "p", Len: len(p)}, Data: p[g:]})
				if e != nil {
					err = e
					break
				}
				dst := make([]byte, 0, len(p)-g)
				got, e := huff0Op{}.Decode(nil, dst, outs, codec.SegInfo{Name: "p", Len: len(p) - g})
				if e != nil || !bytes.Equal(got, p[g:]) {
					err = errors.Join(e, errors.New("round trip differs"))
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

func BenchmarkHuff0(b *testing.B) {
	p := huff0TestPlane3(256<<10, 1)
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	seg := codec.Segment{SegInfo: codec.SegInfo{Name: "plane3", Len: len(p)}, Data: p}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		var n int
		for b.Loop() {
			outs, err := huff0Op{}.Encode(ctx, seg)
			if err != nil {
				b.Fatal(err)
			}
			n = len(outs[0].Data)
			ctx.Arena.Reset()
		}
		b.ReportMetric(float64(8*n)/float64(len(p)), "bits/B")
	})
	outs, _ := huff0Op{}.Encode(nil, seg)
	dst := make([]byte, len(p))
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (huff0Op{}).Decode(nil, dst[:0], outs, seg.SegInfo); err != nil {
				b.Fatal(err)
			}
		}
	})
	noise := fastTestRandom(256<<10, 1)
	b.Run("skip-noise", func(b *testing.B) {
		b.SetBytes(int64(len(noise)))
		b.ReportAllocs()
		for b.Loop() {
			huff0Op{}.Encode(ctx, codec.Segment{SegInfo: codec.SegInfo{Name: "n", Len: len(noise)}, Data: noise})
		}
	})
}

// TestHuff0Stream sends float weights through a Writer and a Reader with
// the float32 recipe, in several frames.
func TestHuff0Stream(t *testing.T) {
	data := fastTestFloats(300000, 6) // 1.2 MB: two frames of 1 MiB chunks
	var buf bytes.Buffer
	w, err := codec.NewWriter(&buf, codec.WithRecipe(codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw")), codec.WithEncoderConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor(fastTestTensor("w", codec.F32, data)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ratio := float64(len(data)) / float64(buf.Len()); ratio < 1.18 {
		t.Errorf("stream ratio %.3f", ratio)
	}
	rd, err := codec.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rd.ReadTensor()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, data) {
		t.Fatal("stream round trip differs")
	}
}
