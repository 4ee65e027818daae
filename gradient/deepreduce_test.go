package gradient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
	"github.com/tensorpress/tensorpress/internal/inthash"
)

// specPositives lists the positives of a bloom segment by the formula of
// bloom.go's comment, written out independently of bloomFilter.
func specPositives(filter []byte, h int, seed uint64, offset int64, n int) []uint32 {
	const g = 0x9e3779b97f4a7c15
	key := inthash.Mix64(seed ^ uint64(offset)*g)
	m := uint64(8 * len(filter))
	var out []uint32
	for p := range uint32(n) {
		z := inthash.Mix64(key + (uint64(p)+1)*g)
		a, b := uint32(z), uint32(z>>32)|1
		all := true
		for j := range uint32(h) {
			bit := uint64(a+j*b) * m >> 32
			all = all && filter[bit/8]>>(bit%8)&1 == 1
		}
		if all {
			out = append(out, p)
		}
	}
	return out
}

func mustOp[T codec.Op](t testing.TB, recipe string) T {
	t.Helper()
	r, err := codec.ParseRecipe(recipe)
	if err != nil {
		t.Fatal(err)
	}
	return r.Steps[0].Ops[0].(T)
}

// bloomParts binds and runs a bloom op on x as a chunk at offset.
func bloomParts(t testing.TB, o bloomOp, x []float32, offset int64) (bloomOp, *codec.Ctx, codec.SegInfo, []codec.Segment) {
	t.Helper()
	in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * len(x)}
	b, err := o.Bind(in)
	if err != nil {
		t.Fatal(err)
	}
	o = b.(bloomOp)
	ctx := &codec.Ctx{Tensor: &codec.Tensor{Offset: offset}, Arena: &codec.Arena{}}
	segs, err := o.Encode(ctx, codec.Segment{SegInfo: in, Data: f32Bytes(x)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range segs {
		segs[i].Data = bytes.Clone(segs[i].Data)
		segs[i].Len = len(segs[i].Data)
	}
	return o, ctx, in, segs
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func f32s(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

// sameFloats compares as == does, but NaN equals NaN.
func sameFloats(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return x == y || x != x && y != y })
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// checkBloom encodes x with recipe (a bloom stage) through a frame and
// through the op, and checks both against the wire formula.
func checkBloom(t *testing.T, recipe string, x []float32) (positives, chosen []uint32) {
	t.Helper()
	return checkBloomTop(t, recipe, x, nil)
}

// checkBloomTop is checkBloom given the top-k positions (nil: computed).
func checkBloomTop(t *testing.T, recipe string, x []float32, top []uint32) (positives, chosen []uint32) {
	t.Helper()
	n := len(x)
	o, _, _, segs := bloomParts(t, mustOp[bloomOp](t, recipe), x, 0)
	k := K(o.ratio, n)
	// Sizing as documented.
	fpr := float64(o.fpr)
	if fpr == 0 {
		fpr = 0.1 * float64(k) / float64(n)
	}
	fpr = min(max(fpr, 1e-7), 0.5)
	wantM := max(8, (int(math.Ceil(math.Log2(1/fpr)*float64(k)/math.Ln2))+7)/8*8)
	if 8*len(segs[0].Data) != wantM {
		t.Fatalf("%s n=%d: filter of %d bits, want %d", recipe, n, 8*len(segs[0].Data), wantM)
	}
	if h := min(max(int(math.Ceil(math.Log2(1/fpr))), 1), 32); o.hashes != h && mustOp[bloomOp](t, recipe).hashes == 0 {
		t.Fatalf("%s n=%d: %d hashes, want %d", recipe, n, o.hashes, h)
	}
	positives = specPositives(segs[0].Data, o.hashes, o.seed, 0, n)
	if top == nil {
		top = topRef(x, k)
	}
	for _, p := range top {
		if _, ok := slices.BinarySearch(positives, p); !ok {
			t.Fatalf("%s n=%d: top-k position %d is not a positive", recipe, n, p)
		}
	}
	chosen = positives
	if o.policy == bloomLeftmost {
		chosen = positives[:k]
	}
	if !sameBits(f32s(segs[1].Data), gather(x, chosen)) {
		t.Fatalf("%s n=%d: values are not the input at the %d chosen positions", recipe, n, len(chosen))
	}
	want := make([]float32, n)
	for _, p := range chosen {
		want[p] = x[p]
	}
	frame := mustFrame(t, recipe, x)
	got := decodeAll(t, frame)
	if !sameBits(got, want) {
		t.Fatalf("%s n=%d: decoded tensor differs from the chosen positions", recipe, n)
	}
	if add := decodeAdd(t, frame, n); !sameFloats(add, got) {
		t.Fatalf("%s n=%d: DecodeAdd differs from Decode", recipe, n)
	}
	return positives, chosen
}

// magOrder lists the positions of x by decreasing magnitude, ties by
// increasing position: the first k, sorted, are the reference top-k.
func magOrder(x []float32) []uint32 {
	keys := make([]uint64, len(x))
	for i, v := range x {
		keys[i] = uint64(^(math.Float32bits(v)&^(1<<31)))<<32 | uint64(i)
	}
	slices.Sort(keys)
	order := make([]uint32, len(x))
	for i, key := range keys {
		order[i] = uint32(key)
	}
	return order
}

func gather(x []float32, pos []uint32) []float32 {
	v := make([]float32, len(pos))
	for i, p := range pos {
		v[i] = x[p]
	}
	return v
}

func TestBloomRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 3, 100, 100352} {
		x := normal(n, uint64(n)+7, 1)
		order := magOrder(x)
		var ks []int
		variants := []string{"", ",policy=p0", ",seed=77", ",policy=p0,seed=1"}
		if n <= 100 {
			for k := 1; k <= n; k++ {
				ks = append(ks, k)
			}
		} else {
			ks = []int{1, 1004, 50176, n}
			variants = []string{"", ",policy=p0,seed=1"}
		}
		for _, k := range ks {
			r := float32(k) / float32(n)
			if K(r, n) != k {
				t.Fatalf("K(%v, %d) = %d, want %d", r, n, K(r, n), k)
			}
			top := slices.Sorted(slices.Values(order[:k]))
			for _, v := range variants {
				rs := "bloom(" + formatRatio(r) + v + ")"
				pos, _ := checkBloomTop(t, rs, x, top)
				if n == 100352 && k == 1004 && v == "" {
					t.Logf("%s on %d N(0,1): %d positives for k=%d (%d false, target %.0f)",
						rs, n, len(pos), k, len(pos)-k, 0.1*float64(k))
					if fp := len(pos) - k; fp > 3*k/10+10 {
						t.Errorf("%d false positives, expected about %d", fp, k/10)
					}
				}
			}
		}
	}
}

func TestBloomAdversarial(t *testing.T) {
	equal := make([]float32, 1000)
	for i := range equal {
		equal[i] = 1.5
	}
	zeros := make([]float32, 1000)
	special := normal(500, 3, 1)
	special[7], special[100], special[499] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name string
		x    []float32
	}{{"equal", equal}, {"zeros", zeros}, {"special", special}, {"normal", normal(4000, 9, 1)}} {
		for _, rs := range []string{
			"bloom(0.01)", "bloom(0.01,policy=p0)", "bloom(0.3)", "bloom(1)", "bloom(1,policy=p0)",
			// Much more positives than needed: a half-full one-hash filter.
			"bloom(0.05,fpr=0.5,hashes=1)", "bloom(0.05,fpr=0.5,hashes=1,policy=p0)",
			"bloom(0.05,fpr=1e-07,hashes=32,seed=18446744073709551615)",
		} {
			pos, chosen := checkBloom(t, rs, c.x)
			if c.name == "equal" || c.name == "zeros" {
				// Ties go to the lowest positions: the first k positives.
				k := K(mustOp[bloomOp](t, rs).ratio, len(c.x))
				for i := range k {
					if chosen[i] != uint32(i) {
						t.Fatalf("%s %s: chose %v..., want 0..%d first", c.name, rs, chosen[:min(k, 10)], k-1)
					}
				}
			}
			if rs == "bloom(0.05,fpr=0.5,hashes=1,policy=p0)" && len(pos) < len(c.x)/4 {
				t.Fatalf("%s: only %d positives in a half-full filter", c.name, len(pos))
			}
		}
	}
}

func TestBloomChunks(t *testing.T) {
	x := normal(10000, 5, 1)
	for _, rs := range []string{"bloom(0.05)", "bloom(0.05,policy=p0,seed=3) | val:polyfit | val.perm:bitpack | *:huff0"} {
		got := codectest.Stream(t, codec.FromFloat32("g", x, 10000), codec.WithRecipe(codec.MustParseRecipe(rs)), codec.WithChunkSize(16000))
		v, _ := codec.View[float32](got)
		if rs == "bloom(0.05)" {
			// Each chunk of 4000 (and the last of 2000) keeps exactly its k,
			// which only holds when the decoder keyed each chunk as the
			// encoder did.
			for off := 0; off < 10000; off += 4000 {
				end := min(off+4000, 10000)
				if kept := len(nonZeros(v[off:end])); kept != K(0.05, end-off) {
					t.Fatalf("chunk at %d: kept %d, want %d", off, kept, K(0.05, end-off))
				}
			}
			for _, p := range nonZeros(v) {
				if v[p] != x[p] {
					t.Fatalf("element %d: %v, want %v", p, v[p], x[p])
				}
			}
		} else if len(nonZeros(v)) < 500 {
			t.Fatalf("%s: %d elements", rs, len(nonZeros(v)))
		}
		// The same chunk at another offset has another filter.
		_, _, _, s0 := bloomParts(t, mustOp[bloomOp](t, "bloom(0.05)"), x[:4000], 0)
		_, _, _, s1 := bloomParts(t, mustOp[bloomOp](t, "bloom(0.05)"), x[:4000], 4000)
		if bytes.Equal(s0[0].Data, s1[0].Data) {
			t.Fatal("the chunk offset does not change the filter")
		}
	}
}

func TestBloomParams(t *testing.T) {
	for _, s := range []string{
		"bloom(0.01)", "bloom(0.5,policy=p0)", "bloom(1,seed=3)", "bloom(0.001,fpr=0.0001)",
		"bloom(0.01,fpr=0.5,hashes=1,policy=p0,seed=18446744073709551615)", "bloom(0.25,hashes=32)",
	} {
		r, err := codec.ParseRecipe(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if r.String() != s {
			t.Fatalf("%q prints as %q", s, r.String())
		}
		o := r.Steps[0].Ops[0].(bloomOp)
		for _, n := range []int{1, 1000, 100352} {
			b, _ := o.Bind(codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * n})
			p := b.AppendParams(nil)
			l, err := bloomStage.Load(p)
			if err != nil {
				t.Fatalf("%s: Load(%x): %v", s, p, err)
			}
			if !bytes.Equal(l.AppendParams(nil), p) {
				t.Fatalf("%s: params %x load as %x", s, p, l.AppendParams(nil))
			}
			// The loaded op prints a recipe that records the same params.
			r2, err := codec.ParseRecipe(l.String())
			if err != nil {
				t.Fatalf("%s: loaded op prints %q: %v", s, l.String(), err)
			}
			b2, _ := r2.Steps[0].Ops[0].(bloomOp).Bind(codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * n})
			if !bytes.Equal(b2.AppendParams(nil), p) {
				t.Fatalf("%s: %q records %x, want %x", s, l.String(), b2.AppendParams(nil), p)
			}
		}
	}
	for _, s := range []string{"bloom", "bloom()", "bloom(0)", "bloom(1.5)", "bloom(0.1,policy=random)", "bloom(0.1,fpr=0.9)",
		"bloom(0.1,fpr=0)", "bloom(0.1,hashes=0)", "bloom(0.1,hashes=33)", "bloom(0.1,seed=-1)", "bloom(0.1,0.2)",
		"bloom(0.1,ratio=0.2)", "bloom(0.1,x=1)", "bloom(0.1,seed=1,seed=2)"} {
		if _, err := codec.ParseRecipe(s); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%s: %v, want ErrRecipe", s, err)
		}
	}
	good := bloomOp{ratio: 0.01, hashes: 10, policy: bloomP0, seed: 300}.AppendParams(nil)
	bad := [][]byte{nil, good[:4], good[:len(good)-1], append(slices.Clone(good), 0),
		{0, 0, 0, 0, 10, 0, 0},                     // ratio 0
		{0, 0, 0xc0, 0x7f, 10, 0, 0},               // NaN
		{0, 0, 0x80, 0x3f, 0, 0, 0},                // 0 hashes
		{0, 0, 0x80, 0x3f, 33, 0, 0},               // 33 hashes
		{0, 0, 0x80, 0x3f, 10, 2, 0},               // policy 2
		{0, 0, 0x80, 0x3f, 0x80, 0x80, 0x80, 0, 0}, // hashes overflow the range
	}
	for _, p := range bad {
		if _, err := bloomStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x): %v, want ErrCorrupt", p, err)
		}
	}
}

// expectCorrupt runs Decode and DecodeAdd of op on parts: both must fail
// with ErrCorrupt (or, when maybe is set, may succeed), and a failing
// DecodeAdd must leave acc alone.
func expectCorrupt(t *testing.T, what string, op codec.Op, ctx *codec.Ctx, parts []codec.Segment, in codec.SegInfo, maybe bool) {
	t.Helper()
	dst := make([]byte, 3, 3+max(in.Len, 0))
	out, err := op.Decode(ctx, dst, parts, in)
	switch {
	case err == nil && !maybe:
		t.Fatalf("%s: decoded", what)
	case err == nil && len(out) != 3+in.Len:
		t.Fatalf("%s: decoded %d bytes", what, len(out)-3)
	case err != nil && !errors.Is(err, codec.ErrCorrupt):
		t.Fatalf("%s: %v, want ErrCorrupt", what, err)
	}
	ad, ok := op.(codec.AddDecoder)
	if !ok {
		return
	}
	acc := make([]float32, max(in.Len, 0)/4)
	for i := range acc {
		acc[i] = 1
	}
	err2 := ad.DecodeAdd(ctx, acc, 1, parts, in)
	if (err == nil) != (err2 == nil) {
		t.Fatalf("%s: Decode says %v, DecodeAdd %v", what, err, err2)
	}
	if err2 != nil && slices.ContainsFunc(acc, func(v float32) bool { return v != 1 }) {
		t.Fatalf("%s: a failing DecodeAdd changed the accumulator", what)
	}
}

func TestBloomCorrupt(t *testing.T) {
	x := normal(400, 11, 1)
	for _, rs := range []string{"bloom(0.05)", "bloom(0.05,policy=p0)"} {
		o, ctx, in, segs := bloomParts(t, mustOp[bloomOp](t, rs), x, 0)
		with := func(filter, val []byte) []codec.Segment {
			return []codec.Segment{{Data: filter}, {Data: val}}
		}
		filter, val := segs[0].Data, segs[1].Data
		p0 := o.policy == bloomP0
		expectCorrupt(t, rs+" empty filter", o, ctx, with(nil, val), in, false)
		expectCorrupt(t, rs+" ragged values", o, ctx, with(filter, val[:len(val)-1]), in, false)
		expectCorrupt(t, rs+" more values than elements", o, ctx, with(filter, make([]byte, 4*401)), in, false)
		expectCorrupt(t, rs+" one more value", o, ctx, with(filter, append(slices.Clone(val), 0, 0, 0, 0)), in, !p0)
		expectCorrupt(t, rs+" one value less", o, ctx, with(filter, val[:len(val)-4]), in, !p0)
		expectCorrupt(t, rs+" clear filter", o, ctx, with(make([]byte, len(filter)), val), in, false)
		expectCorrupt(t, rs+" full filter", o, ctx, with(bytes.Repeat([]byte{0xff}, len(filter)), val), in, !p0)
		expectCorrupt(t, rs+" one part", o, ctx, with(filter, val)[:1], in, false)
		expectCorrupt(t, rs+" not f32", o, ctx, with(filter, val), codec.SegInfo{Name: "data", Elem: codec.U32, Len: in.Len}, false)
		unbound := o
		unbound.hashes = 0
		expectCorrupt(t, rs+" no hashes", unbound, ctx, with(filter, val), in, false)
		for i := range 8 * len(filter) {
			bad := slices.Clone(filter)
			bad[i/8] ^= 1 << (i % 8)
			expectCorrupt(t, rs+" flipped filter bit", o, ctx, with(bad, val), in, true)
		}
		for l := range len(filter) {
			expectCorrupt(t, rs+" cut filter", o, ctx, with(filter[:l], val), in, true)
		}
		// With the chunk offset of another chunk the filter means
		// something else: p0 notices.
		other := &codec.Ctx{Tensor: &codec.Tensor{Offset: 400}, Arena: &codec.Arena{}}
		expectCorrupt(t, rs+" other offset", o, other, with(filter, val), in, !p0)
	}
	// Through frames: a damaged frame never panics.
	frame := mustFrame(t, "bloom(0.05) | val:polyfit | val.perm:bitpack", x)
	for i := range frame {
		bad := slices.Clone(frame)
		bad[i] ^= 0x5a
		decodeLoose(reseal(bad))
	}
}

var errDiffer = errors.New("DecodeAdd differs from Decode")

// decodeLoose decodes a frame and adds it, ignoring errors; it checks that
// the two agree when both succeed.
func decodeLoose(frame []byte) error {
	d, err := codec.NewDecoder(codec.WithLimits(codec.Limits{MaxDecodedSize: 1 << 22, MaxFrameSize: 1 << 22, MaxTensorSize: 1 << 22}))
	if err != nil {
		return err
	}
	f, _, err := d.DecodeFrame(frame)
	var acc []float32
	_, err2 := d.DecodeAdd(frame, 1, func(t *codec.Tensor) ([]float32, error) {
		n := t.NumElements()
		if n < 0 || n > 1<<20 {
			return nil, errors.New("too large")
		}
		acc = make([]float32, n)
		return acc, nil
	})
	if err != nil || err2 != nil || len(f.Tensors) != 1 || f.Tensors[0].DType != codec.F32 {
		return errors.Join(err, err2)
	}
	t := f.Tensors[0]
	v, _ := codec.View[float32](t)
	for i, x := range v {
		if a := acc[t.Offset+int64(i)]; a != x && !(a != a && x != x) {
			return errDiffer
		}
	}
	return nil
}

// reseal rewrites the header and payload CRCs of a frame that ends at
// the end of b, so that damage reaches the stages behind the checksums.
func reseal(b []byte) []byte {
	if len(b) < 2 {
		return b
	}
	hlen, n := binary.Uvarint(b[1:])
	end := 1 + n + int(hlen)
	if n <= 0 || hlen > uint64(len(b)) || end+4 > len(b) {
		return b
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], tab))
	if b[0]&(1<<4) != 0 && len(b) >= end+8 {
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[end+4:len(b)-4], tab))
	}
	return b
}

func TestPolySegments(t *testing.T) {
	for n, want := range map[int][]int{
		0: nil, 1: {1}, 30: {30}, 154: {154}, 155: {31, 93, 31}, 309: {61, 187, 61}, 310: {31, 62, 124, 62, 31},
		1000: {33, 100, 200, 334, 200, 100, 33},
	} {
		if got := polySegments(nil, n); !slices.Equal(got, want) {
			t.Errorf("segments(%d) = %v, want %v", n, got, want)
		}
	}
	for n := 0; n < 4_000_000; n = n*5/4 + 1 {
		segs := polySegments(nil, n)
		sum := 0
		for _, l := range segs {
			if l <= 0 {
				t.Fatalf("segments(%d) = %v", n, segs)
			}
			sum += l
		}
		if sum != n || len(segs) > maxPolySegments/2 {
			t.Fatalf("segments(%d) = %v", n, segs)
		}
	}
}

// polyRoundTrip codes x (as a tensor) with recipe, a polyfit stage first,
// and returns the decoded values.
func polyRoundTrip(t *testing.T, recipe string, x []float32) []float32 {
	t.Helper()
	got := decodeAll(t, mustFrame(t, recipe, x))
	if add := decodeAdd(t, mustFrame(t, recipe, x), len(x)); !sameFloats(add, got) {
		t.Fatalf("%s: DecodeAdd differs from Decode", recipe)
	}
	return got
}

func TestPolyFitRoundTrip(t *testing.T) {
	big := normal(100352, 1, 1)
	top := gather(big, topRef(big, 1004))
	for _, k := range []int{1, 2, 3, 6, 7, 50, 155, 1004, 10036} {
		x := normal(k, uint64(k), 1)
		if k == 1004 {
			x = top
		}
		for d := range maxPolyDegree + 1 {
			rs := "polyfit(" + string(rune('0'+d)) + ") | perm:bitpack"
			got := polyRoundTrip(t, rs, x)
			e := relErr(got, x)
			switch {
			case k <= 2 && d >= 1 || k <= d+1:
				// One interpolating segment a part: exact up to float32
				// coefficients.
				if e > 1e-3 {
					t.Errorf("k=%d d=%d: error %g", k, d, e)
				}
			case k == 1004 && d == 5:
				t.Logf("polyfit(5) on the top 1%% of 100352 N(0,1): relative L2 error %.4f", e)
				if e > 0.02 {
					t.Errorf("error %g on the top 1%%", e)
				}
			case d >= 1 && e > 0.5:
				t.Errorf("k=%d d=%d: error %g", k, d, e)
			}
		}
	}
	// Special values.
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negz := float32(math.Copysign(0, -1))
	for name, x := range map[string][]float32{
		"equal": slices.Repeat([]float32{0.25}, 700),
		"zeros": make([]float32, 500),
		"negative": func() []float32 {
			v := normal(300, 2, 1)
			for i := range v {
				v[i] = -abs32(v[i])
			}
			return v
		}(),
		"positive": func() []float32 {
			v := normal(300, 2, 1)
			for i := range v {
				v[i] = abs32(v[i])
			}
			return v
		}(),
		"signed 0": {0, negz, 0, negz, 1, -1},
		"special":  {nan, 1, inf, -inf, 2, -nan, negz, 0, 3},
		"one":      {42},
	} {
		got := polyRoundTrip(t, "polyfit | perm:bitpack", x)
		switch name {
		case "equal", "zeros", "signed 0", "one":
			for i := range x {
				if math.Abs(float64(got[i]-x[i])) > 1e-6 {
					t.Fatalf("%s: element %d decoded %v, want %v", name, i, got[i], x[i])
				}
			}
		case "negative", "positive":
			if e := relErr(got, x); e > 0.1 {
				t.Fatalf("%s: error %g", name, e)
			}
			for i := range x {
				if (got[i] < 0) != (x[i] < 0) && got[i] != 0 {
					t.Fatalf("%s: element %d changed sign: %v for %v", name, i, got[i], x[i])
				}
			}
		}
	}
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

func TestPolyFitPerm(t *testing.T) {
	x := []float32{-1, 3, 0, 2, 3, -5, float32(math.Copysign(0, -1))}
	o := polyfitOp{degree: 5}
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	segs, err := o.Encode(ctx, codec.Segment{SegInfo: codec.SegInfo{Name: "val", Elem: codec.F32, Len: 28}, Data: f32Bytes(x)})
	if err != nil {
		t.Fatal(err)
	}
	if segs[0].Name != "val.perm" || segs[1].Name != "val.coef" {
		t.Fatalf("outputs %q, %q", segs[0].Name, segs[1].Name)
	}
	perm := make([]uint32, 7)
	for i := range perm {
		perm[i] = binary.LittleEndian.Uint32(segs[0].Data[4*i:])
	}
	// 3, 3 (ties by index), 2, +0 | -0, -1, -5
	if want := []uint32{1, 4, 3, 2, 6, 0, 5}; !slices.Equal(perm, want) {
		t.Fatalf("perm %v, want %v", perm, want)
	}
	if segs[1].Data[0] != 4 || len(segs[1].Data) != 1+4*(4+3) {
		t.Fatalf("coef %x", segs[1].Data)
	}
}

func TestPolyFitCorrupt(t *testing.T) {
	x := normal(400, 4, 1)
	o := polyfitOp{degree: 5}
	in := codec.SegInfo{Name: "val", Elem: codec.F32, Len: 4 * len(x)}
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	segs, err := o.Encode(ctx, codec.Segment{SegInfo: in, Data: f32Bytes(x)})
	if err != nil {
		t.Fatal(err)
	}
	perm, coef := bytes.Clone(segs[0].Data), bytes.Clone(segs[1].Data)
	if _, err := o.Decode(ctx, make([]byte, 0, in.Len), []codec.Segment{{Data: perm}, {Data: coef}}, in); err != nil {
		t.Fatal(err)
	}
	with := func(p, c []byte) []codec.Segment { return []codec.Segment{{Data: p}, {Data: c}} }
	setPerm := func(i int, v uint32) []byte {
		p := bytes.Clone(perm)
		binary.LittleEndian.PutUint32(p[4*i:], v)
		return p
	}
	dup := binary.LittleEndian.Uint32(perm[4:])
	for what, parts := range map[string][]codec.Segment{
		"duplicate in perm": with(setPerm(0, dup), coef),
		"perm out of range": with(setPerm(3, 400), coef),
		"huge perm":         with(setPerm(3, math.MaxUint32), coef),
		"short perm":        with(perm[:len(perm)-4], coef),
		"long perm":         with(append(bytes.Clone(perm), 0, 0, 0, 0), coef),
		"coef one short":    with(perm, coef[:len(coef)-1]),
		"coef one long":     with(perm, append(bytes.Clone(coef), 0)),
		"coef a float long": with(perm, append(bytes.Clone(coef), 0, 0, 0, 0)),
		"no coef":           with(perm, nil),
		"count past k":      with(perm, append(binary.AppendUvarint(nil, 401), coef[2:]...)),
		"count other":       with(perm, append(binary.AppendUvarint(nil, 150), coef[2:]...)),
		"long uvarint":      with(perm, append([]byte{coef[0] | 0x80, coef[1] | 0x80, 0}, coef[2:]...)),
		"one part":          with(perm, coef)[:1],
	} {
		expectCorrupt(t, what, o, ctx, parts, in, false)
	}
	expectCorrupt(t, "not f32", o, ctx, with(perm, coef), codec.SegInfo{Name: "val", Elem: codec.U32, Len: in.Len}, false)
	for _, p := range [][]byte{nil, {9}, {5, 0}, {255}} {
		if _, err := polyfitStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x): %v", p, err)
		}
	}
	for _, s := range []string{"polyfit", "polyfit(0)", "polyfit(8)", "val:polyfit(3)"} {
		r, err := codec.ParseRecipe(s)
		if err != nil || r.String() != s {
			t.Errorf("%q parses to %q (%v)", s, r, err)
		}
	}
	for _, s := range []string{"polyfit(9)", "polyfit(-1)", "polyfit(1,2)", "polyfit(x=1)", "polyfit(3,degree=3)"} {
		if _, err := codec.ParseRecipe(s); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%q parsed", s)
		}
	}
	// Damaged frames never panic.
	frame := mustFrame(t, "topk(0.05) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0", normal(4000, 2, 1))
	for i := range frame {
		bad := slices.Clone(frame)
		bad[i] ^= 0x21
		if err := decodeLoose(reseal(bad)); err == errDiffer {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
}

// TestDeepReduceSizes reports frame sizes and errors of DeepReduce's
// codecs against TopK at 1% of 100352 N(0,1) values.
func TestDeepReduceSizes(t *testing.T) {
	const n = 100352
	x := normal(n, 2021, 1)
	k := K(0.01, n)
	ref := make([]float32, n)
	for _, p := range topRef(x, k) {
		ref[p] = x[p]
	}
	enc, _ := codec.NewEncoder()
	tt := codec.FromFloat32("g", x, n)
	size := map[string]int{}
	for _, rs := range []string{
		"topk(0.01)",
		"topk(0.01) | idx:delta,bitpack | val:shuffle | *:huff0",
		"bloom(0.01)",
		"bloom(0.01,policy=p0)",
		"bloom(0.01) | val:polyfit | val.perm:bitpack | *:huff0",
		"topk(0.01) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0",
		"topk(0.01) | idx:delta,bitpack | val:qsgd(127) | *:huff0",
	} {
		frame, stats, err := enc.AppendTensorsStats(nil, nil, []*codec.Tensor{tt}, []*codec.Recipe{codec.MustParseRecipe(rs)})
		if err != nil {
			t.Fatalf("%s: %v", rs, err)
		}
		got := decodeAll(t, frame)
		if add := decodeAdd(t, frame, n); relErr(add, got) > 1e-6 {
			t.Fatalf("%s: DecodeAdd differs from Decode", rs)
		}
		size[rs] = len(frame)
		var segs string
		for _, s := range stats {
			segs += " " + s.Name + "=" + strconv.Itoa(s.StoredLen)
		}
		t.Logf("%-76s %6d bytes (%5.2f bits/kept) err vs top-k %.4f, vs input %.4f;%s",
			rs, len(frame), 8*float64(len(frame))/float64(k), relErr(got, ref), relErr(got, x), segs)
		if rs == "topk(0.01) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0" {
			for _, s := range stats {
				if s.Name == "val.perm" {
					w := bits.Len(uint(k - 1))
					if want := (k*w+7)/8 + (k+127)/128; s.StoredLen > want+8 {
						t.Errorf("perm takes %d bytes, want about %d (%d bits a value)", s.StoredLen, want, w)
					}
				}
			}
			if e := relErr(got, ref); e > 0.02 {
				t.Errorf("%s: error %g vs top-k", rs, e)
			}
		}
	}
	raw := size["topk(0.01)"]
	for _, rs := range []string{
		"bloom(0.01) | val:polyfit | val.perm:bitpack | *:huff0",
		"topk(0.01) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0",
	} {
		if 2*size[rs] > raw {
			t.Errorf("%s: %d bytes, not 2x below TopK's %d", rs, size[rs], raw)
		}
	}
}

// The DeepReduce recipes work as Sender specs with error feedback: what
// the receiver got plus the residual is what was sent.
func TestDeepReduceFeedback(t *testing.T) {
	for _, spec := range []string{
		"bloom(0.02) | val:polyfit | val.perm:bitpack | *:huff0",
		"bloom(0.02,policy=p0)",
		"topk(0.02) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0",
	} {
		checkConserves(t, spec, []int64{50, 100}, 8, 100)
	}
}

func deepReduceSeeds(f *testing.F) {
	x := normal(300, 8, 1)
	for _, rs := range []string{
		"bloom(0.1)", "bloom(0.1,policy=p0,seed=5)", "bloom(0.05) | val:polyfit | val.perm:bitpack | *:huff0",
		"topk(0.1) | idx:delta,bitpack | val:polyfit(3)", "polyfit(8)",
	} {
		enc, _ := codec.NewEncoder()
		fr, err := enc.AppendTensor(nil, codec.FromFloat32("g", x, 300), codec.MustParseRecipe(rs))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fr)
	}
}

// FuzzDeepReduceDecode: arbitrary bytes, with their CRCs made right, never
// make DecodeFrame or DecodeAdd panic, and the two agree.
func FuzzDeepReduceDecode(f *testing.F) {
	deepReduceSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, b := range [][]byte{in, reseal(slices.Clone(in))} {
			if err := decodeLoose(b); err == errDiffer {
				t.Fatal(err)
			}
		}
	})
}

// FuzzDeepReduceParts feeds arbitrary segments straight to the bloom and
// polyfit decoders: errors are fine; panics, writes outside the output
// and a DecodeAdd that disagrees with Decode are not.
func FuzzDeepReduceParts(f *testing.F) {
	x := normal(64, 3, 1)
	for _, rs := range []string{"bloom(0.1)", "bloom(0.2,policy=p0,seed=9)"} {
		_, _, _, segs := bloomParts(f, mustOp[bloomOp](f, rs), x, 0)
		f.Add(byte(len(rs)), uint16(64), uint64(0), segs[0].Data, segs[1].Data)
	}
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	segs, _ := polyfitOp{degree: 5}.Encode(ctx, codec.Segment{SegInfo: codec.SegInfo{Name: "val", Elem: codec.F32, Len: 256}, Data: f32Bytes(x)})
	f.Add(byte(1), uint16(64), uint64(0), bytes.Clone(segs[0].Data), bytes.Clone(segs[1].Data))
	f.Fuzz(func(t *testing.T, which byte, n uint16, params uint64, a, b []byte) {
		var op codec.Op
		switch which % 4 {
		case 0, 2:
			op = bloomOp{ratio: 0.1, hashes: int(params%32) + 1, policy: which / 2 % 2, seed: params >> 5}
		default:
			op = polyfitOp{degree: int(params % 9)}
		}
		in := codec.SegInfo{Name: "val", Elem: codec.F32, Len: 4 * int(n%4096)}
		ctx := &codec.Ctx{Tensor: &codec.Tensor{Offset: int64(params >> 40)}, Arena: &codec.Arena{}}
		parts := []codec.Segment{{Data: a}, {Data: b}}
		buf := make([]byte, 8, 8+in.Len+8)
		copy(buf, "guardian")
		out, err := op.Decode(ctx, buf, parts, in)
		if err != nil {
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Fatalf("%s: %v", op, err)
			}
		} else if len(out) != 8+in.Len || string(out[:8]) != "guardian" {
			t.Fatalf("%s: decoded %d bytes (want %d) or touched the prefix", op, len(out)-8, in.Len)
		}
		ad, ok := op.(codec.AddDecoder)
		if !ok {
			return
		}
		acc := make([]float32, in.Len/4)
		err2 := ad.DecodeAdd(ctx, acc, 1, parts, in)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("%s: Decode %v, DecodeAdd %v", op, err, err2)
		}
		if err == nil && !sameFloats(acc, f32s(out[8:])) {
			t.Fatalf("%s: DecodeAdd differs from Decode", op)
		}
	})
}
