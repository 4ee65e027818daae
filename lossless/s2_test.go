package lossless

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
)

// s2TestRepetitive returns n bytes of small integers in which most runs
// of 16 bytes repeat a run from up to 4 KiB back: the kind of data s2 is
// for.
func s2TestRepetitive(n int, seed uint64) []byte {
	r := fastTestRandom(n+16, seed)
	b := make([]byte, 0, n+16)
	for i := 0; len(b) < n; i++ {
		if len(b) >= 4096 && r[i] < 200 {
			from := len(b) - 16 - int(r[i+1])*16
			b = append(b, b[from:from+16]...)
		} else {
			b = append(b, r[i]&15)
		}
	}
	return b[:n]
}

func TestS2Op(t *testing.T) {
	for _, tc := range []struct{ recipe, text string }{
		{"s2", "s2"}, {"s2()", "s2"}, {"s2(default)", "s2"}, {"s2(better)", "s2(better)"}, {"s2(mode=better)", "s2(better)"},
	} {
		fastTestStringRoundTrip(t, fastTestParse(t, tc.recipe), tc.text)
	}
	for _, bad := range []string{"s2(best)", "s2(1)", "s2(better,better)", "s2(level=1)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{nil, {2}, {0, 0}} {
		if _, err := s2Stage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x) = %v, want ErrCorrupt", p, err)
		}
	}
	for _, recipe := range []string{"s2", "s2(better)"} {
		op := fastTestParse(t, recipe)
		for _, n := range []int{0, 1, 16, 17, 100, 4096, 1 << 20} {
			outs := fastTestOpRoundTrip(t, op, "idx", codec.Byte, s2TestRepetitive(n, uint64(n)))
			if n >= 1<<20 && len(outs[0].Data) > n/2 {
				t.Errorf("%s: %d bytes coded to %d", recipe, n, len(outs[0].Data))
			}
			fastTestOpRoundTrip(t, op, "idx", codec.Byte, fastTestRandom(n, 1))
		}
	}
	for _, recipe := range []string{"shuffle2 | *:s2", "s2", "shuffle4 | plane3:s2(better)"} {
		for _, n := range []int{0, 1, 3, 1000, 100001} {
			codectest.Lossless(t, fastTestTensor("w", codec.F32, fastTestFloats(n, 7)), recipe)
			codectest.Lossless(t, fastTestTensor("i", codec.I32, s2TestRepetitive(4*n, 7)), recipe)
		}
	}
}

func TestS2Corrupt(t *testing.T) {
	src := s2TestRepetitive(10000, 3)
	enc := s2.Encode(nil, src)
	in := codec.SegInfo{Name: "idx", Elem: codec.Byte, Len: len(src)}
	decode := func(b []byte, n int) error {
		in := in
		in.Len = n
		got, err := s2Op{}.Decode(nil, make([]byte, 0, n), []codec.Segment{{Data: b}}, in)
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
	for _, n := range []int{0, len(src) - 1, len(src) + 1} {
		if decode(enc, n) == nil {
			t.Errorf("length %d (block says %d): no error", n, len(src))
		}
	}
	for cut := 0; cut < len(enc); cut += 1 + cut/8 {
		if decode(enc[:cut], len(src)) == nil {
			t.Errorf("truncated to %d bytes: no error", cut)
		}
	}
	// A block claiming 4 GiB is refused before anything is allocated.
	if decode([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0}, 10) == nil {
		t.Error("huge claimed length: no error")
	}
	r := fastTestRandom(len(enc), 5)
	for i := range enc {
		b := bytes.Clone(enc)
		b[i] ^= r[i] | 1
		decode(b, len(src))
	}
}

func BenchmarkS2(b *testing.B) {
	src := s2TestRepetitive(1<<20, 1)
	for _, op := range []s2Op{{}, {better: true}} {
		ctx := &codec.Ctx{Arena: &codec.Arena{}}
		seg := codec.Segment{SegInfo: codec.SegInfo{Name: "idx", Len: len(src)}, Data: src}
		b.Run(op.String()+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := op.Encode(ctx, seg); err != nil {
					b.Fatal(err)
				}
				ctx.Arena.Reset()
			}
		})
		outs, _ := op.Encode(nil, seg)
		dst := make([]byte, len(src))
		b.Run(op.String()+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := op.Decode(nil, dst[:0], outs, seg.SegInfo); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
