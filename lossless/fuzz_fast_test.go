package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// Fuzz targets for the decoders of shuffle, bytedelta, huff0 and s2. Each
// feeds arbitrary parameters, parts and expected lengths (bounded to
// fastFuzzMaxLen) to Load and Decode, which must return an error wrapping
// codec.ErrCorrupt or exactly the expected number of bytes, never panic
// or write past the output; and each round-trips the fuzzed data through
// Encode and Decode. `go test` runs the seeds; longer runs:
//
//	go test -run '^$' -fuzz '^FuzzHuff0Decode$' -fuzztime 1m ./lossless
//
// (-fuzzminimizetime 5s keeps the minimizer, whose default is a minute per
// new input, from taking most of a short run.)

const fastFuzzMaxLen = 4 << 20

// fastFuzzDecode runs op.Decode on parts and checks the contract. It returns
// the decoded bytes, or nil after an error.
func fastFuzzDecode(t *testing.T, op codec.Op, parts []codec.Segment, in codec.SegInfo) []byte {
	t.Helper()
	const guard = 0xc3
	buf := make([]byte, in.Len+1)
	buf[in.Len] = guard
	got, err := op.Decode(&codec.Ctx{Arena: &codec.Arena{}}, buf[:0:in.Len], parts, in)
	if buf[in.Len] != guard {
		t.Fatalf("%s wrote past its output", op)
	}
	if err != nil {
		if !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("%s: error %v does not wrap ErrCorrupt", op, err)
		}
		return nil
	}
	if len(got) != in.Len {
		t.Fatalf("%s decoded %d bytes, want %d", op, len(got), in.Len)
	}
	return got
}

// fastFuzzRoundTrip encodes data with op and decodes it again.
func fastFuzzRoundTrip(t *testing.T, op codec.Op, in codec.SegInfo, data []byte) {
	t.Helper()
	in.Len = len(data)
	if _, err := op.Outputs(in); err != nil {
		return
	}
	outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: in, Data: data})
	if err != nil {
		t.Fatalf("%s.Encode: %v", op, err)
	}
	if op.Stage().Kind == codec.Coder && len(outs[0].Data) >= len(data) {
		return // stored raw
	}
	if got := fastFuzzDecode(t, op, outs, in); !bytes.Equal(got, data) {
		t.Fatalf("%s: round trip of %d bytes differs", op, len(data))
	}
}

// fastFuzzLen maps the fuzzed expected length n to [0, fastFuzzMaxLen]:
// mostly near the size of the input (the interesting region), and with
// the top four bits of n set anywhere up to the bound (claims far larger
// than the data must fail fast; they are rarer because every run
// allocates the expected length).
func fastFuzzLen(n uint32, data []byte) int {
	if n>>28 == 0xf {
		return int(n % (fastFuzzMaxLen + 1))
	}
	return int(n % uint32(min(16*len(data)+256, fastFuzzMaxLen+1)))
}

// fastFuzzParts cuts data into pieces whose lengths come from cuts (uvarints).
func fastFuzzParts(cuts, data []byte) []codec.Segment {
	var parts []codec.Segment
	for len(cuts) > 0 && len(parts) < 300 {
		v, k := binary.Uvarint(cuts)
		if k <= 0 {
			break
		}
		cuts = cuts[k:]
		n := int(min(v, uint64(len(data))))
		parts = append(parts, codec.Segment{Data: data[:n:n]})
		data = data[n:]
	}
	return append(parts, codec.Segment{Data: data})
}

func FuzzShuffleDecode(f *testing.F) {
	f.Add([]byte{4}, uint8(codec.F32), uint32(34), []byte{8, 8, 8, 8}, make([]byte, 34))
	f.Add([]byte{0}, uint8(codec.F64), uint32(17), []byte{2, 2, 2, 2, 2, 2, 2, 2}, fastTestRandom(17, 1))
	f.Add([]byte{2}, uint8(codec.Byte), uint32(64), []byte{32}, fastTestRandom(64, 2))
	f.Add([]byte{8}, uint8(codec.F32), uint32(300), []byte{37, 37, 37, 37, 37, 37, 37, 37}, fastTestFloats(75, 3))
	f.Add([]byte{3}, uint8(codec.U8), uint32(10), []byte{3, 3, 3}, []byte("0123456789"))
	f.Add([]byte{1}, uint8(codec.F32), uint32(4), []byte{}, []byte{1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, params []byte, elem uint8, n uint32, cuts, data []byte) {
		op, err := shuffleStage.Load(params)
		if err != nil {
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("Load(%x): %v does not wrap ErrCorrupt", params, err)
			}
			return
		}
		in := codec.SegInfo{Name: "data", Elem: codec.DType(elem % 14), Len: fastFuzzLen(n, data)}
		fastFuzzDecode(t, op, fastFuzzParts(cuts, data), in)
		fastFuzzRoundTrip(t, op, in, data)
	})
}

func FuzzByteDeltaDecode(f *testing.F) {
	f.Add(uint32(0), []byte{})
	f.Add(uint32(9), []byte{1, 255, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint32(100), fastTestRandom(100, 1))
	f.Fuzz(func(t *testing.T, n uint32, data []byte) {
		in := codec.SegInfo{Name: "plane3", Elem: codec.Byte, Len: fastFuzzLen(n, data)}
		got := fastFuzzDecode(t, byteDeltaOp{}, []codec.Segment{{Data: data}}, in)
		if got != nil {
			want := make([]byte, len(data))
			byteDeltaDecodeRef(want, data)
			if !bytes.Equal(got, want) {
				t.Fatal("decode differs from the reference loop")
			}
		}
		fastFuzzRoundTrip(t, byteDeltaOp{}, in, data)
	})
}

func FuzzHuff0Decode(f *testing.F) {
	seeds := [][]byte{
		huff0TestPlane3(1000, 1),
		huff0TestSkewed(3000, 2),
		bytes.Repeat([]byte{9}, 500),
		append(bytes.Repeat([]byte{1}, huff0Block), huff0TestSkewed(200, 3)...),
		bytes.Repeat(huff0TestSkewed(huff0Block, 4), 2), // table, then reuse
	}
	for _, s := range seeds {
		outs, err := huff0Op{}.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Len: len(s)}, Data: s})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint32(len(s)), outs[0].Data)
		f.Add(uint32(len(s)), s)
	}
	f.Add(uint32(10), []byte{huff0Reuse | 4<<2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, n uint32, data []byte) {
		in := codec.SegInfo{Name: "plane3", Elem: codec.Byte, Len: fastFuzzLen(n, data)}
		fastFuzzDecode(t, huff0Op{}, []codec.Segment{{Data: data}}, in)
		fastFuzzRoundTrip(t, huff0Op{}, in, data)
	})
}

func FuzzS2Decode(f *testing.F) {
	for i, s := range [][]byte{s2TestRepetitive(5000, 1), {}, []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), fastTestRandom(100, 2)} {
		op := s2Op{better: i%2 == 1}
		outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Len: len(s)}, Data: s})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(op.AppendParams(nil), uint32(len(s)), outs[0].Data)
	}
	f.Fuzz(func(t *testing.T, params []byte, n uint32, data []byte) {
		op, err := s2Stage.Load(params)
		if err != nil {
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("Load(%x): %v does not wrap ErrCorrupt", params, err)
			}
			return
		}
		in := codec.SegInfo{Name: "idx", Elem: codec.Byte, Len: fastFuzzLen(n, data)}
		fastFuzzDecode(t, op, []codec.Segment{{Data: data}}, in)
		fastFuzzRoundTrip(t, op, in, data)
	})
}

func FuzzHuff0bDecode(f *testing.F) {
	fastFuzzBlockCoder(f, huff0bStage, func(p uint8) codec.Op { return huff0Op{log2: p} },
		huff0TestPlane3(20000, 1), huff0TestSkewed(9000, 2), bytes.Repeat([]byte{9}, 5000))
}

// fastFuzzBlockCoder fuzzes a coder whose one parameter is a block size's
// log2 (huff0b, huff0p): seeds coded with blocks of 2^12, 2^13, ... bytes
// (mk makes the op), then arbitrary parameters, lengths and data.
func fastFuzzBlockCoder(f *testing.F, st *codec.Stage, mk func(p uint8) codec.Op, seeds ...[]byte) {
	for i, s := range seeds {
		op := mk(uint8(12 + i))
		outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Len: len(s)}, Data: s})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(op.AppendParams(nil), uint32(len(s)), outs[0].Data)
	}
	f.Fuzz(func(t *testing.T, params []byte, n uint32, data []byte) {
		op, err := st.Load(params)
		if err != nil {
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("Load(%x): %v does not wrap ErrCorrupt", params, err)
			}
			return
		}
		in := codec.SegInfo{Name: "exp", Elem: codec.Byte, Len: fastFuzzLen(n, data)}
		fastFuzzDecode(t, op, []codec.Segment{{Data: data}}, in)
		fastFuzzRoundTrip(t, op, in, data)
	})
}

func FuzzFsplitDecode(f *testing.F) {
	f.Add(uint8(codec.F32), uint32(8), []byte{3}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint8(codec.BF16), uint32(6), []byte{3}, []byte{1, 2, 3, 4, 5, 6})
	f.Add(uint8(codec.F16), uint32(4), []byte{2}, []byte{0x1f, 0x20, 0xff, 0x07, 0, 0})
	f.Fuzz(func(t *testing.T, elem uint8, n uint32, cuts, data []byte) {
		in := codec.SegInfo{Name: "data", Elem: codec.DType(elem % 14), Len: fastFuzzLen(n, data)}
		fastFuzzDecode(t, fsplitOp{}, fastFuzzParts(cuts, data), in)
		fastFuzzRoundTrip(t, fsplitOp{}, in, data)
	})
}

func FuzzHuff0pDecode(f *testing.F) {
	fastFuzzBlockCoder(f, huff0pStage, func(p uint8) codec.Op { return huff0pOp{log2: p} },
		huff0pTestExps(20001, 1), huff0TestSkewed(9000, 2), bytes.Repeat([]byte{9}, 5000), huff0pTestValues(7000, 16, 3))
}
