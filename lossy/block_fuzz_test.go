package lossy

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// blockStageIDs are the stages the fuzz targets pick from.
var blockStageIDs = []codec.StageID{Int8ID, FP4ID, NF4ID, QSGDID, SignID, TernaryID}

// FuzzBlockDecode feeds random parameters, lengths and parts to every
// blockwise decoder: none may panic, write past in.Len or return other
// than in.Len bytes without an error.
func FuzzBlockDecode(f *testing.F) {
	uv := func(v ...uint64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.AppendUvarint(b, x)
		}
		return b
	}
	x := quantNormals(100, 1, 1)
	for k, id := range blockStageIDs {
		params := uv(64)
		if id == QSGDID {
			params = uv(5, 64, 7)
		}
		s, _ := codec.Lookup(id)
		op, _ := s.Load(params)
		_, parts := quantRoundTrip(f, op, x)
		f.Add(uint8(k), params, uint16(len(x)), false, parts[0].Data, parts[1].Data)
		f.Add(uint8(k), params, uint16(len(x)-1), true, parts[0].Data, parts[1].Data)
		f.Add(uint8(k), params, uint16(7), false, []byte{0xff, 0x80, 0x03, 0x7f}, []byte{0, 0, 0xc0, 0x7f})
		f.Add(uint8(k), uv(8), uint16(9), false, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{0xff, 0xff, 0x7f, 0x7f, 0, 0, 0x80, 0x7f})
	}
	f.Add(uint8(3), uv(127, 8, 0), uint16(8), false, []byte{0x80, 0x7f, 0x81, 1, 2, 3, 4, 5}, []byte{0xff, 0xff, 0x7f, 0x7f})
	f.Add(uint8(0), []byte{0x80, 0x00}, uint16(1), false, []byte{0}, []byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, k uint8, params []byte, n uint16, f64 bool, q, scale []byte) {
		s, _ := codec.Lookup(blockStageIDs[int(k)%len(blockStageIDs)])
		op, err := s.Load(params)
		if err != nil {
			return
		}
		in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * int(n)}
		if f64 {
			in = codec.SegInfo{Name: "val", Elem: codec.F64, Len: 8 * int(n)}
		}
		outs, err := op.Outputs(in)
		if err != nil {
			t.Fatalf("%s: Outputs(%+v): %v", op, in, err)
		}
		parts := []codec.Segment{{SegInfo: outs[0], Data: q}, {SegInfo: outs[1], Data: scale}}
		const guard = 0x5a
		buf := make([]byte, in.Len+16)
		for i := range buf {
			buf[i] = guard
		}
		out, err := op.Decode(&codec.Ctx{Arena: &codec.Arena{}}, buf[:3:3+in.Len], parts, in)
		for i := 3 + in.Len; i < len(buf); i++ {
			if buf[i] != guard {
				t.Fatalf("%s wrote past its output", op)
			}
		}
		if err != nil {
			return
		}
		if len(out) != 3+in.Len {
			t.Fatalf("%s: %d bytes out, want %d", op, len(out)-3, in.Len)
		}
		if len(q) != outs[0].Len || len(scale) != outs[1].Len {
			t.Fatalf("%s accepted parts of %d and %d bytes, want %d and %d", op, len(q), len(scale), outs[0].Len, outs[1].Len)
		}
	})
}

// FuzzBlockRoundTrip quantizes random floats with random parameters and
// checks the round trip against the stated bound; non-finite inputs must
// give an error, not a panic.
func FuzzBlockRoundTrip(f *testing.F) {
	seed := func(v []float32) []byte { return append([]byte(nil), view.Of(v)...) }
	f.Add(uint8(0), uint16(64), uint8(127), uint64(0), seed(quantNormals(100, 1, 2)))
	f.Add(uint8(1), uint16(8), uint8(3), uint64(5), seed(quantNormals(33, 0.02, 3)))
	f.Add(uint8(2), uint16(16), uint8(1), uint64(9), seed([]float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-45, 3e38, -3e38}))
	f.Add(uint8(3), uint16(8), uint8(1), uint64(1), seed([]float32{1, 2, 3, float32(math.NaN()), 4}))
	f.Add(uint8(4), uint16(24), uint8(9), uint64(1), seed([]float32{1e-30, 1e-31, -1e-32, 0, 0, 0, 0, 0, 5}))
	f.Add(uint8(5), uint16(8), uint8(9), uint64(1), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Fuzz(func(t *testing.T, k uint8, block uint16, levels uint8, seed uint64, data []byte) {
		id := blockStageIDs[int(k)%len(blockStageIDs)]
		B := max(8, int(block)&^7)
		p := binary.AppendUvarint(nil, uint64(B))
		if id == QSGDID {
			p = binary.AppendUvarint(nil, uint64(1+int(levels)%127))
			p = binary.AppendUvarint(p, uint64(B))
			p = binary.AppendUvarint(p, seed)
		}
		s, _ := codec.Lookup(id)
		op, err := s.Load(p)
		if err != nil {
			t.Fatalf("Load(%x): %v", p, err)
		}
		x := make([]float32, len(data)/4)
		finite := true
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			v := float64(x[i])
			finite = finite && !math.IsNaN(v) && !math.IsInf(v, 0)
		}
		if !finite {
			src := view.Of(x)
			if _, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: len(src)}, Data: src}); err == nil {
				t.Fatalf("%s accepts a non-finite input", op)
			}
			return
		}
		if id == QSGDID {
			var sum float64
			for _, v := range x {
				sum += float64(v) * float64(v)
			}
			if math.Sqrt(sum) > math.MaxFloat32/2 {
				return // a block norm may overflow float32: an error
			}
		}
		checkQuantBound(t, op, x)
	})
}
