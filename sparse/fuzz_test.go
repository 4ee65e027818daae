package sparse

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// FuzzDecode feeds arbitrary index and value bytes to every sparse
// decoder: errors are fine, panics and writes past the output are not.
func FuzzDecode(f *testing.F) {
	f.Add(byte(0), uint16(16), []byte{byte(Bitmap), 0x81, 0}, le32(1, 2))
	f.Add(byte(0), uint16(16), []byte{byte(Gaps), 2, 0x5}, le32(1, 2))
	f.Add(byte(0), uint16(16), []byte{byte(Varint), 3, 4}, le32(1, 2))
	f.Add(byte(0), uint16(16), []byte{byte(Runs), 2, 2}, le32(1, 2))
	f.Add(byte(1), uint16(16), le32(1, 9), le32(1, 2))
	f.Add(byte(2), uint16(8), le32(1, 9), []byte{})
	f.Add(byte(3), uint16(8), []byte{3, 1, 0x80, 0x01}, []byte{})
	f.Add(byte(4), uint16(8), []byte{2, 0x1b}, []byte{})
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	f.Fuzz(func(t *testing.T, which byte, n uint16, idx, val []byte) {
		var op codec.Op
		in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * int(n)}
		switch which % 6 {
		case 5:
			op, in.Elem = widthOp{w: 4, elem: codec.U32}, codec.Byte
			in.Len = int(n)
		case 0:
			op = sparseOp{}
		case 1:
			op = cooOp{}
		case 2:
			op, in.Elem = deltaOp{}, codec.U32
		case 3:
			op, in.Elem = varintOp{}, codec.U32
		default:
			op, in.Elem = bitpackOp{}, codec.U32
		}
		parts := []codec.Segment{{Data: idx}, {Data: val}}
		if w := which % 6; w >= 2 && w <= 4 {
			parts = parts[:1]
		}
		buf := make([]byte, 8, 8+in.Len+8)
		copy(buf, "guardian")
		out, err := op.Decode(ctx, buf, parts, in)
		ctx.Arena.Reset()
		if err != nil {
			return
		}
		if len(out) != 8+in.Len || string(out[:8]) != "guardian" {
			t.Fatalf("%s: decoded %d bytes (want %d) or touched the prefix", op, len(out)-8, in.Len)
		}
	})
}

// FuzzRoundTrip: arbitrary data through every layout decodes to itself.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x80}, byte(0))
	f.Add(make([]byte, 64), byte(3))
	f.Add(bytes.Repeat([]byte{1, 0, 0, 0, 0, 0, 0, 0}, 40), byte(5))
	enc, _ := codec.NewEncoder()
	dec := new(codec.Decoder)
	recipes := []*codec.Recipe{
		codec.MustParseRecipe("sparse | val:shuffle | *:huff0"),
		codec.MustParseRecipe("sparse(bitmap)"), codec.MustParseRecipe("sparse(gaps)"),
		codec.MustParseRecipe("sparse(varint)"), codec.MustParseRecipe("sparse(runs)"),
		codec.MustParseRecipe("coo | idx:delta,bitpack"), codec.MustParseRecipe("coo | idx:delta,varint"),
	}
	f.Fuzz(func(t *testing.T, data []byte, which byte) {
		// Sparsify: keep bytes that are multiples of 7 in element-sized
		// groups, zero the rest.
		data = data[:len(data)/4*4]
		for i := 0; i+4 <= len(data); i += 4 {
			if binary.LittleEndian.Uint32(data[i:])%7 != 0 {
				binary.LittleEndian.PutUint32(data[i:], 0)
			}
		}
		tn := &codec.Tensor{Name: "f", DType: codec.F32, Shape: []int64{int64(len(data) / 4)}, Data: data}
		r := recipes[int(which)%len(recipes)]
		frame, err := enc.AppendTensor(nil, tn, r)
		if err != nil {
			t.Fatal(err)
		}
		fr, _, err := dec.DecodeFrame(frame)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if !bytes.Equal(fr.Tensors[0].Data, data) {
			t.Fatalf("%s: round trip differs", r)
		}
	})
}
