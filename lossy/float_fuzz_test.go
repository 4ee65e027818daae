package lossy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// FuzzFloatDecode feeds random bytes to the fp16 and bf16 stages, as the
// coded segment a frame would hand to Decode (with a length that may not
// fit), as wire parameters, and as raw f32/f64 input for a round trip.
// Nothing may panic; whatever decodes must equal the scalar reference,
// and round trips must equal the reference loops, in this build's kernels
// and in the Go loops.
func FuzzFloatDecode(f *testing.F) {
	seed := func(bits ...uint32) []byte { return halfBitsBytes(bits) }
	f.Add([]byte{}, uint8(0), int8(0))
	f.Add([]byte{0x00, 0x3c, 0x00, 0x7c, 0x01, 0x7c, 0xff, 0xff}, uint8(1), int8(0))
	f.Add(seed(0x7fc00000, 0xffc00001, 0x7f800001, 0x477ff000, 0x33000000, 0x00000001, 0x80000000, 0x3f808000), uint8(0), int8(0))
	f.Add(seed(0x7fc00000, 0xffc00001, 0x7f800001, 0x477ff000, 0x33000000, 0x00000001, 0x80000000, 0x3f808000), uint8(1), int8(0))
	f.Add(bytes.Repeat(seed(0x7f7f8000, 0x3f818000, 0xff800000, 0x7fbfffff), 17), uint8(2), int8(-1))
	f.Add(bytes.Repeat([]byte{0xab, 0x7e, 0x12}, 70), uint8(3), int8(3))
	f.Add(bytes.Repeat([]byte{0xff}, 130), uint8(5), int8(-8))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8, lenDelta int8) {
		m := halfModes[int(mode)%len(halfModes)]
		op := halfOp{bf: m.bf}
		sz := m.elem.Size()

		// Wire parameters: only none are valid.
		if p, err := op.Stage().Load(data); (err == nil) != (len(data) == 0) || err != nil && !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("%s: Load(%x) = %v, %v", op, data, p, err)
		}

		// data as a coded segment, told it decodes to n elements of elem
		// (lenDelta off from what data holds).
		in := codec.SegInfo{Name: "data", Elem: m.elem, Len: len(data)/2*sz + int(lenDelta)}
		part := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: op.elem(), Len: len(data)}, Data: data}
		dst := make([]byte, 1, 1+max(in.Len, 0)+8)
		got, err := op.Decode(nil, dst, []codec.Segment{part}, in)
		fits := lenDelta == 0 && len(data)%2 == 0
		switch {
		case fits && err != nil:
			t.Fatalf("%s %v: Decode of %d bytes: %v", op, m.elem, len(data), err)
		case !fits && err == nil:
			t.Fatalf("%s %v: Decode of %d bytes into %d accepted", op, m.elem, len(data), in.Len)
		case err != nil:
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("%s: Decode error %v is not ErrCorrupt", op, err)
			}
		default:
			if want := halfRefDecode(data, m.elem, m.bf); !bytes.Equal(got[1:], want) || len(got) != 1+in.Len {
				t.Fatalf("%s %v: Decode differs from the reference", op, m.elem)
			}
		}

		// data as input: a round trip against the reference loops.
		src := data[:len(data)/sz*sz]
		if m.elem == codec.F32 && len(src) >= 4 && mode&0x80 != 0 {
			src = src[1 : len(src)-3] // misaligned
		}
		out := floatOpRoundTrip(t, op, m.elem, src)
		if want := halfRefDecode(halfRefEncode(src, m.elem, m.bf), m.elem, m.bf); !bytes.Equal(out, want) {
			t.Fatalf("%s %v: round trip differs from the reference", op, m.elem)
		}
		if m.elem == codec.F32 {
			enc := make([]byte, len(src)/2)
			if m.bf {
				bf16EncodeGo(enc, src)
			} else {
				fp16EncodeGo(enc, src)
			}
			if !bytes.Equal(enc, halfRefEncode(src, m.elem, m.bf)) {
				t.Fatalf("%s: the Go encode loop differs from the reference", op)
			}
			// Every decoded value narrows back to the same pattern (NaNs
			// to the canonical ones).
			for i := 0; i+4 <= len(out); i += 4 {
				x := math.Float32frombits(binary.LittleEndian.Uint32(out[i:]))
				h := binary.LittleEndian.Uint16(enc[i/2:])
				back := make([]byte, 2)
				halfEncode(back, out[i:i+4], codec.F32, m.bf)
				if x == x && binary.LittleEndian.Uint16(back) != h {
					t.Fatalf("%s: %#04x widens to %g, which narrows to %#04x", op, h, x, binary.LittleEndian.Uint16(back))
				}
			}
		}
	})
}
