package hub

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
)

// A delta's kind.
const (
	noDelta   = iota // the elements as they are
	unchanged        // a bit delta of zeros
	bitDelta         // diff: lossless
	subDelta         // the arithmetic difference (DeltaTag)
)

// DeltaTag marks a tensor whose delta is the arithmetic difference of its
// elements from the base's (in the element's float type), sent through a
// lossy recipe; deltas without it are the lossless diff of the bits.
var DeltaTag = codec.Tag{Key: "tensorpress.delta", Value: "sub"}

// deltaOf returns elements [off, off+count) of t: as they are, or, when
// base holds a tensor of the same name, dtype and shape, as a delta
// against it (Base set to the base version): the arithmetic difference
// when sub and the dtype is a float (tagged DeltaTag), from the base's
// shadow where it has one (shadow.go), else the lossless diff of the bits.
func deltaOf(cur *version, t *codec.Tensor, base *version, off, count int, sub bool, s *scratch) (*codec.Tensor, int, error) {
	c := *t
	data, err := cur.read(t, off, count, s)
	if err != nil {
		return nil, 0, err
	}
	c.Offset, c.Data = int64(off), data
	if base == nil {
		return &c, noDelta, nil
	}
	bt, ok := base.byName[t.Name]
	if !ok || bt.DType != t.DType || !slices.Equal(bt.Shape, t.Shape) {
		return &c, noDelta, nil
	}
	read := base.read
	if sub {
		read = base.lossyBase
	}
	bd, err := read(bt, off, count, s)
	if err != nil {
		return nil, 0, err
	}
	d := s.get(len(c.Data))
	c.Data, c.Base = d, base.id
	if sub && subtract(d, data, bd, t.DType) {
		c.Tags.Extra = append(slices.Clip(c.Tags.Extra), DeltaTag)
		return &c, subDelta, nil
	}
	if !diff(d, data, bd, t.DType.Size()) {
		return &c, unchanged, nil
	}
	return &c, bitDelta, nil
}

// subtract sets d to cur − base element by element, rounded to dt, and
// reports whether dt is a float type it handles.
func subtract(d, cur, base []byte, dt codec.DType) bool {
	le := binary.LittleEndian
	switch dt {
	case codec.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			x := math.Float32frombits(le.Uint32(cur[i:])) - math.Float32frombits(le.Uint32(base[i:]))
			le.PutUint32(d[i:], math.Float32bits(x))
		}
	case codec.F64:
		for i := 0; i+8 <= len(d); i += 8 {
			x := math.Float64frombits(le.Uint64(cur[i:])) - math.Float64frombits(le.Uint64(base[i:]))
			le.PutUint64(d[i:], math.Float64bits(x))
		}
	case codec.F16, codec.BF16:
		to, from := float16.F16ToF32, float16.F16FromF32
		if dt == codec.BF16 {
			to, from = float16.BF16ToF32, float16.BF16FromF32
		}
		for i := 0; i+2 <= len(d); i += 2 {
			le.PutUint16(d[i:], from(to(le.Uint16(cur[i:]))-to(le.Uint16(base[i:]))))
		}
	default:
		return false
	}
	return true
}

// add turns d, a difference made by subtract, into base + d, in place.
func add(d, base []byte, dt codec.DType) {
	le := binary.LittleEndian
	switch dt {
	case codec.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			x := math.Float32frombits(le.Uint32(base[i:])) + math.Float32frombits(le.Uint32(d[i:]))
			le.PutUint32(d[i:], math.Float32bits(x))
		}
	case codec.F64:
		for i := 0; i+8 <= len(d); i += 8 {
			x := math.Float64frombits(le.Uint64(base[i:])) + math.Float64frombits(le.Uint64(d[i:]))
			le.PutUint64(d[i:], math.Float64bits(x))
		}
	case codec.F16, codec.BF16:
		to, from := float16.F16ToF32, float16.F16FromF32
		if dt == codec.BF16 {
			to, from = float16.BF16ToF32, float16.BF16FromF32
		}
		for i := 0; i+2 <= len(d); i += 2 {
			le.PutUint16(d[i:], from(to(le.Uint16(base[i:]))+to(le.Uint16(d[i:]))))
		}
	}
}

// diff sets d to the delta of the elements of esz bytes in cur against
// base: the zigzag-coded wrapping difference of their bits as unsigned
// little-endian integers (a float that moved a little gives a small
// number, whose high bytes are zero), and reports whether any element
// differs. Elements of other sizes are XORed byte by byte.
func diff(d, cur, base []byte, esz int) bool {
	var any uint64
	switch esz {
	case 2:
		for i := 0; i+2 <= len(d); i += 2 {
			x := binary.LittleEndian.Uint16(cur[i:]) - binary.LittleEndian.Uint16(base[i:])
			z := x<<1 ^ uint16(int16(x)>>15)
			binary.LittleEndian.PutUint16(d[i:], z)
			any |= uint64(z)
		}
	case 4:
		for i := 0; i+4 <= len(d); i += 4 {
			x := binary.LittleEndian.Uint32(cur[i:]) - binary.LittleEndian.Uint32(base[i:])
			z := x<<1 ^ uint32(int32(x)>>31)
			binary.LittleEndian.PutUint32(d[i:], z)
			any |= uint64(z)
		}
	case 8:
		for i := 0; i+8 <= len(d); i += 8 {
			x := binary.LittleEndian.Uint64(cur[i:]) - binary.LittleEndian.Uint64(base[i:])
			z := x<<1 ^ uint64(int64(x)>>63)
			binary.LittleEndian.PutUint64(d[i:], z)
			any |= z
		}
	default:
		for i := range d {
			d[i] = cur[i] ^ base[i]
			any |= uint64(d[i])
		}
	}
	return any != 0
}

// undiff turns d, a delta made by diff against base, back into the
// elements themselves, in place.
func undiff(d, base []byte, esz int) {
	switch esz {
	case 2:
		for i := 0; i+2 <= len(d); i += 2 {
			z := binary.LittleEndian.Uint16(d[i:])
			x := z>>1 ^ -(z & 1)
			binary.LittleEndian.PutUint16(d[i:], binary.LittleEndian.Uint16(base[i:])+x)
		}
	case 4:
		for i := 0; i+4 <= len(d); i += 4 {
			z := binary.LittleEndian.Uint32(d[i:])
			x := z>>1 ^ -(z & 1)
			binary.LittleEndian.PutUint32(d[i:], binary.LittleEndian.Uint32(base[i:])+x)
		}
	case 8:
		for i := 0; i+8 <= len(d); i += 8 {
			z := binary.LittleEndian.Uint64(d[i:])
			x := z>>1 ^ -(z & 1)
			binary.LittleEndian.PutUint64(d[i:], binary.LittleEndian.Uint64(base[i:])+x)
		}
	default:
		for i := range d {
			d[i] ^= base[i]
		}
	}
}

// Codings of lossless deltas, as a fetch asks for them
// (hubpb.FetchRequest.DeltaCoding): the newest the client decodes. The
// hub sends a client that asks for none (an older release) the first.
const (
	// DeltaCodingZstd shuffles the elements' bytes into planes (the high
	// ones mostly zero between successive versions), then zstd(1).
	DeltaCodingZstd = 0
	// DeltaCodingLenbits codes elements of 2, 4 and 8 bytes with the
	// lenbits stage (lossless, ID 10): each difference's bit length,
	// Huffman-coded given the one before, and the bits below its leading
	// one. 2.3% fewer bytes than DeltaCodingZstd between FedAvg rounds of
	// float32 weights, 4-8% as bfloat16, float16 or float64, at a quarter
	// to a seventh of its speed (docs/BENCHMARKS.md).
	DeltaCodingLenbits = 1

	// DeltaCoding is the newest coding, what this release's clients ask for.
	DeltaCoding = DeltaCodingLenbits
)

var deltaRecipes = [...]map[int]*codec.Recipe{
	DeltaCodingZstd: {
		1: codec.MustParseRecipe("*:zstd(1)"),
		2: codec.MustParseRecipe("shuffle2 | *:zstd(1)"),
		4: codec.MustParseRecipe("shuffle4 | *:zstd(1)"),
		8: codec.MustParseRecipe("shuffle8 | *:zstd(1)"),
	},
	DeltaCodingLenbits: {
		2: codec.MustParseRecipe("lenbits(2)"),
		4: codec.MustParseRecipe("lenbits(4)"),
		8: codec.MustParseRecipe("lenbits(8)"),
	},
}

// deltaRecipe is the recipe of a lossless delta of esz-byte elements in
// coding (at most DeltaCoding).
func deltaRecipe(esz int, coding uint32) *codec.Recipe {
	if r, ok := deltaRecipes[coding][esz]; ok {
		return r
	}
	if r, ok := deltaRecipes[DeltaCodingZstd][esz]; ok {
		return r
	}
	return deltaRecipes[DeltaCodingZstd][1]
}
