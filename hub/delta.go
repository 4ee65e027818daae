package hub

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

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

// A lossless delta of floats whose elements go in the order of their base
// element's exponent (DeltaCodingOrdered) is tagged tensorpress.delta =
// exp:K: the order is kept within runs of K elements from the tensor's
// first (the hub's chunks, so that each chunk decodes on its own, and a
// tensor joined from its chunks as well).
const orderPrefix = "exp:"

// orderTag is the tag of a delta ordered in runs of k elements.
func orderTag(k int) codec.Tag {
	return codec.Tag{Key: DeltaTag.Key, Value: orderPrefix + strconv.Itoa(k)}
}

// orderRun finds the tag of an ordered delta in tags: its index (-1 for
// none) and its run length, or an error for a malformed one.
func orderRun(tags []codec.Tag) (int, int, error) {
	for i, tg := range tags {
		if tg.Key != DeltaTag.Key || !strings.HasPrefix(tg.Value, orderPrefix) {
			continue
		}
		v := tg.Value[len(orderPrefix):]
		k, err := strconv.Atoi(v)
		if err != nil || k <= 0 || strconv.Itoa(k) != v {
			return -1, 0, fmt.Errorf("%w: hub: delta tag %q: want exp:K, K a positive number", codec.ErrCorrupt, tg.Value)
		}
		return i, k, nil
	}
	return -1, 0, nil
}

// deltaOf returns elements [off, off+count) of t: as they are, or, when
// base holds a tensor of the same name, dtype and shape, as a delta
// against it (Base set to the base version): the arithmetic difference
// when sub and the dtype is a float (tagged DeltaTag), from the base's
// shadow where it has one (shadow.go), else the lossless diff of the bits,
// of floats in the order of their base element's exponent in runs of
// order elements where order > 0 (DeltaCodingOrdered; off a multiple of
// it).
func deltaOf(cur *version, t *codec.Tensor, base *version, off, count int, sub bool, order int, s *scratch) (*codec.Tensor, int, error) {
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
	if w, _ := expField(t.DType); order > 0 && w > 0 {
		c.Data = s.get(len(d))
		inRuns(c.Data, d, bd, t.DType, order, false)
		c.Tags.Extra = append(slices.Clip(c.Tags.Extra), orderTag(order))
	}
	return &c, bitDelta, nil
}

// expField gives the bits of a float's biased exponent field: its width
// (0 for types other than f16, bf16, f32 and f64) and its shift.
func expField(dt codec.DType) (width, shift uint) {
	switch dt {
	case codec.F16:
		return 5, 10
	case codec.BF16:
		return 8, 7
	case codec.F32:
		return 8, 23
	case codec.F64:
		return 11, 52
	}
	return 0, 0
}

// inRuns applies byExponent to each run of k elements of src (the last
// one shorter).
func inRuns(dst, src, base []byte, dt codec.DType, k int, back bool) {
	run := min(k, len(src)/dt.Size()) * dt.Size()
	if run == 0 {
		return
	}
	for o := 0; o < len(src); o += run {
		e := min(o+run, len(src))
		byExponent(dst[o:e], src[o:e], base[o:e], dt, back)
	}
}

// byExponent moves the elements of src (floats of dt, or their deltas)
// into dst in the order of the exponent of the same element of base,
// exponents ascending, keeping the order of elements with the same one:
// a stable counting sort on base's exponents, which a receiver that holds
// base undoes. With back, it undoes it: src is in that order, dst gets
// the elements back in theirs. Runs shorter than the exponents' range are
// sorted instead of counted, so that what a run costs stays in proportion
// to its length whatever run length a tag names.
func byExponent(dst, src, base []byte, dt codec.DType, back bool) {
	width, shift := expField(dt)
	esz := dt.Size()
	n := len(src) / esz
	exp := func(i int) int {
		var u uint64
		switch esz {
		case 2:
			u = uint64(binary.LittleEndian.Uint16(base[2*i:]))
		case 4:
			u = uint64(binary.LittleEndian.Uint32(base[4*i:]))
		default:
			u = binary.LittleEndian.Uint64(base[8*i:])
		}
		return int(u >> shift & (1<<width - 1))
	}
	move := func(i, j int) { // element i of the natural order is element j of the sorted one
		if back {
			copy(dst[i*esz:(i+1)*esz], src[j*esz:(j+1)*esz])
		} else {
			copy(dst[j*esz:(j+1)*esz], src[i*esz:(i+1)*esz])
		}
	}
	if n < 1<<width {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return exp(a) - exp(b) })
		for j, i := range idx {
			move(i, j)
		}
		return
	}
	next := make([]int, 1<<width) // where the next element of each exponent goes
	for i := range n {
		next[exp(i)]++
	}
	at := 0
	for e := range next {
		next[e], at = at, at+next[e]
	}
	for i := range n {
		e := exp(i)
		move(i, next[e])
		next[e]++
	}
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
	// float32 weights (4% as bfloat16, 8% as float16, 20% as float64
	// holding float32 values), at a fifth to a sixth of its speed
	// (docs/BENCHMARKS.md).
	DeltaCodingLenbits = 1
	// DeltaCodingOrdered is DeltaCodingLenbits with the differences of
	// floats in the order of their base element's exponent (tagged
	// tensorpress.delta=exp): elements of one magnitude move by similar
	// amounts, and lenbits' contexts see them side by side.
	DeltaCodingOrdered = 2

	// DeltaCoding is the newest coding, what this release's clients ask for.
	DeltaCoding = DeltaCodingOrdered
)

var deltaRecipes = [...]map[int]*codec.Recipe{
	DeltaCodingZstd: {
		1: codec.MustParseRecipe("*:zstd(1)"),
		2: codec.MustParseRecipe("shuffle2 | *:zstd(1)"),
		4: codec.MustParseRecipe("shuffle4 | *:zstd(1)"),
		8: codec.MustParseRecipe("shuffle8 | *:zstd(1)"),
	},
	DeltaCodingLenbits: lenbitsRecipes,
	DeltaCodingOrdered: lenbitsRecipes,
}

var lenbitsRecipes = map[int]*codec.Recipe{
	2: codec.MustParseRecipe("lenbits(2)"),
	4: codec.MustParseRecipe("lenbits(4)"),
	8: codec.MustParseRecipe("lenbits(8)"),
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
