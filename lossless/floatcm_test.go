package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
	"github.com/tensorpress/tensorpress/internal/float16"
)

// floatcmTestRuns is n elements of dt in stretches that exercise every
// path of the model: weights at drifting scales, zeros, values of a lower
// precision (trailing zeros), subnormals, and any bits at all.
func floatcmTestRuns(dt codec.DType, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 12))
	size := dt.Size()
	b := make([]byte, n*size)
	for i := 0; i < n; {
		k := min(n-i, 1+r.IntN(3000))
		kind, scale := r.IntN(5), math.Ldexp(1, -2-r.IntN(12))
		for j := i; j < i+k; j++ {
			var v uint32
			switch kind {
			case 0:
				v = r.Uint32()
			case 1:
				v = 0
			case 2: // float16 values in float32 (or their 2-byte kin)
				v = math.Float32bits(float32(r.NormFloat64()*scale)) &^ 0x1fff
			case 3:
				v = uint32(r.IntN(1024)) | r.Uint32()&0x80000000 // subnormals
			default:
				v = math.Float32bits(float32(r.NormFloat64() * scale))
			}
			if size == 4 {
				binary.LittleEndian.PutUint32(b[4*j:], v)
			} else if kind == 3 {
				binary.LittleEndian.PutUint16(b[2*j:], uint16(v&0x3ff|v>>16&0x8000))
			} else {
				binary.LittleEndian.PutUint16(b[2*j:], uint16(v>>16))
			}
		}
		i += k
	}
	return b
}

// floatcmOps is the two stages of floatcm.go: floatcm and floatrank.
var floatcmOps = []floatcmOp{{model: floatcmMix}, {model: floatcmRank}}

func TestFloatcmRoundTrip(t *testing.T) {
	for _, op := range floatcmOps {
		recipe := op.String()
		for _, dt := range []codec.DType{codec.F32, codec.BF16, codec.F16} {
			for _, n := range []int{0, 1, 2, 7, 1000, 70001} {
				for _, data := range [][]byte{floatcmTestRuns(dt, n, uint64(n)), fsplitTestBits(dt, n, uint64(n))} {
					tn := &codec.Tensor{Name: "w", DType: dt, Shape: []int64{int64(n)}, Data: data}
					codectest.Lossless(t, tn, recipe)
				}
			}
		}
		floatPatternsLossless(t, recipe)
		// Through a stream of several frames (the model starts afresh in each).
		w := floatcmTestRuns(codec.F32, 50000, 9)
		codectest.Stream(t, &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{50000}, Data: w},
			codec.WithRecipe(codec.MustParseRecipe(recipe)), codec.WithChunkSize(codec.MinChunkSize))
	}
}

// TestFloatrankRanks: exponents move up the ranks as they are counted,
// past those counted less often, and the order stays a permutation.
func TestFloatrankRanks(t *testing.T) {
	f, _ := floatFieldsOf(codec.F16)
	m := getFCM(f, floatcmRank)
	defer fcmPool.Put(m)
	for _, ex := range []uint32{9, 9, 4, 4, 4, 30, 9} {
		m.promote(ex)
	}
	// Counts: 4 three times (it reached 3 first), 9 three times, 30 once.
	want := []uint8{4, 9, 30, 0, 1, 2, 3, 5}
	if got := m.order[:8]; !bytes.Equal(got, want) {
		t.Fatalf("ranks %v, want %v", got, want)
	}
	seen := make([]bool, 32)
	for r, ex := range m.order[:32] {
		if seen[ex] || m.rank[ex] != uint8(r) {
			t.Fatalf("order %v, rank %v: not a permutation and its inverse", m.order[:32], m.rank[:32])
		}
		seen[ex] = true
	}
}

// TestFloatcmRatio: on weights the model codes the fields as intended:
// fewer bytes than fsplit with huff0b on the exponents, and float32 values
// that are bfloat16 values at about bfloat16's cost.
func TestFloatcmRatio(t *testing.T) {
	const n = 1 << 17
	f32 := floatcmTestWeights(n, 3)
	bf := make([]byte, 2*n)
	widened := make([]byte, 4*n)
	for i := range n {
		v := binary.LittleEndian.Uint32(f32[4*i:])
		binary.LittleEndian.PutUint16(bf[2*i:], uint16(v>>16))
		binary.LittleEndian.PutUint32(widened[4*i:], v&0xffff0000)
	}
	size := func(dt codec.DType, data []byte, recipe string) int {
		return len(codectest.Lossless(t, &codec.Tensor{Name: "w", DType: dt, Shape: []int64{n}, Data: data}, recipe))
	}
	for _, c := range []struct {
		dt   codec.DType
		data []byte
		peer string
	}{
		{codec.F32, f32, "fsplit | exp:huff0b(13) | sm:shuffle(3) | *:huff0b(13)"},
		{codec.BF16, bf, "fsplit | exp:huff0b(13)"},
	} {
		cm, rank, peer := size(c.dt, c.data, "floatcm"), size(c.dt, c.data, "floatrank"), size(c.dt, c.data, c.peer)
		t.Logf("%v: floatcm %d bytes, floatrank %d, %q %d", c.dt, cm, rank, c.peer, peer)
		if cm >= peer || rank >= peer {
			t.Errorf("%v: floatcm %d bytes, floatrank %d: not both below %q's %d", c.dt, cm, rank, c.peer, peer)
		}
		// The lighter model gives up a little, not much.
		if rank > cm+cm/100 {
			t.Errorf("%v: floatrank %d bytes, over 1%% more than floatcm's %d", c.dt, rank, cm)
		}
	}
	for _, recipe := range []string{"floatcm", "floatrank"} {
		if got, half := size(codec.F32, widened, recipe), size(codec.BF16, bf, recipe); got > half+half/50 {
			t.Errorf("%s: float32 holding bfloat16 values: %d bytes, bfloat16 itself %d", recipe, got, half)
		}
	}
}

// floatcmTestWeights is n float32 weights, normal at scales that change
// every 8192 elements, as along a model's tensors.
func floatcmTestWeights(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	f32 := make([]byte, 4*n)
	for i := range n {
		scale := 0.02 * math.Ldexp(1, -(i/8192)%4)
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(r.NormFloat64()*scale)))
	}
	return f32
}

// BenchmarkFloatcm codes 1 MiB of weights (floatcmTestWeights; as
// bfloat16 and float16 too) with floatcm, floatrank and, in the same run, with the
// fsplit chain of each type:
//
//	go test -run '^$' -bench Floatcm ./lossless
func BenchmarkFloatcm(b *testing.B) {
	f32 := floatcmTestWeights(1<<18, 5)
	bf, h := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range 1 << 18 {
		v := binary.LittleEndian.Uint32(f32[4*i:])
		binary.LittleEndian.PutUint16(bf[2*i:], float16.BF16FromF32(math.Float32frombits(v)))
		binary.LittleEndian.PutUint16(h[2*i:], float16.F16FromF32(math.Float32frombits(v)))
	}
	// The 2-byte inputs are twice as long, 1 MiB each.
	for i := range 1 << 18 {
		v := binary.LittleEndian.Uint32(f32[4*((i+5)%(1<<18)):])
		binary.LittleEndian.PutUint16(bf[2*(i+1<<18):], float16.BF16FromF32(math.Float32frombits(v)))
		binary.LittleEndian.PutUint16(h[2*(i+1<<18):], float16.F16FromF32(math.Float32frombits(v)))
	}
	for _, c := range []struct {
		dt     codec.DType
		data   []byte
		chains []string
	}{
		{codec.F32, f32, []string{"floatcm", "floatrank", "fsplit | exp:huff0b(13) | sm:shuffle(3) | *:huff0b(13)"}},
		{codec.BF16, bf, []string{"floatcm", "floatrank", "fsplit | exp:huff0b(13)"}},
		{codec.F16, h, []string{"floatcm", "floatrank", "fsplit | exp:huff0b(13) | sm:shuffle2 | sm.plane1:huff0"}},
	} {
		for _, rs := range c.chains {
			benchmarkChain(b, c.dt.String()+"/"+rs, fastTestTensor("w", c.dt, c.data), rs)
		}
	}
}

func TestFloatcmRefuses(t *testing.T) {
	for _, op := range floatcmOps {
		for _, dt := range []codec.DType{codec.Byte, codec.F64, codec.I32, codec.U16} {
			if _, err := op.Outputs(codec.SegInfo{Name: "x", Elem: dt, Len: 64}); err == nil {
				t.Errorf("%v took %v", op, dt)
			}
		}
		if _, err := op.Outputs(codec.SegInfo{Name: "x", Elem: codec.F32, Len: 6}); err == nil {
			t.Errorf("%v took 6 bytes of float32", op)
		}
	}
	for _, p := range [][]byte{nil, {0}, {2}, {1, 1}} {
		if _, err := floatcmStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("floatcm: Load(%x): %v", p, err)
		}
	}
	for _, p := range [][]byte{{0}, {1}, {2}} {
		if _, err := floatrankStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("floatrank: Load(%x): %v", p, err)
		}
	}
	for _, r := range []string{"floatcm(1)", "floatrank(1)", "floatrank(model=2)"} {
		if _, err := codec.ParseRecipe(r); err == nil {
			t.Errorf("recipe %q accepted", r)
		}
	}

	// Every cut of a stream is refused, and so is a byte more.
	for _, op := range floatcmOps {
		for _, dt := range []codec.DType{codec.F32, codec.BF16, codec.F16} {
			data := floatcmTestRuns(dt, 3000, 5)
			in := codec.SegInfo{Name: "data", Elem: dt, Len: len(data)}
			outs, err := op.Encode(nil, codec.Segment{SegInfo: in, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			s := outs[0].Data
			if got := fastFuzzDecode(t, op, []codec.Segment{{Data: s}}, in); !bytes.Equal(got, data) {
				t.Fatalf("%v %v: round trip differs", op, dt)
			}
			for k := 0; k < len(s); k += 1 + k/8 {
				if got := fastFuzzDecode(t, op, []codec.Segment{{Data: s[:k]}}, in); got != nil {
					t.Fatalf("%v %v: %d of %d bytes decoded", op, dt, k, len(s))
				}
			}
			if got := fastFuzzDecode(t, op, []codec.Segment{{Data: append(s[:len(s):len(s)], 0)}}, in); got != nil {
				t.Fatalf("%v %v: a byte after the stream accepted", op, dt)
			}
			// Longer or shorter than the stream says.
			for _, l := range []int{len(data) - dt.Size(), len(data) + dt.Size()} {
				if got := fastFuzzDecode(t, op, []codec.Segment{{Data: s}}, codec.SegInfo{Name: "data", Elem: dt, Len: l}); got != nil {
					t.Fatalf("%v %v: %d elements decoded from a stream of %d", op, dt, l/dt.Size(), len(data)/dt.Size())
				}
			}
			// Flipped bits: an error or other bytes, never a panic.
			r := rand.New(rand.NewPCG(7, uint64(dt)))
			for range 200 {
				c := bytes.Clone(s)
				c[r.IntN(len(c))] ^= byte(1 << r.IntN(8))
				fastFuzzDecode(t, op, []codec.Segment{{Data: c}}, in)
			}
		}
	}
}

// TestFloatrankRefusesBadStreams: the streams' lengths are minimal
// uvarints within the segment, each range-coded stream starts as the
// range coder's, the low bits end with the last element (zero padding),
// and an escape may not code an exponent that has a rank of its own.
func TestFloatrankRefusesBadStreams(t *testing.T) {
	op := floatcmOp{model: floatcmRank}
	data := floatcmTestRuns(codec.BF16, 2000, 3)
	in := codec.SegInfo{Name: "data", Elem: codec.BF16, Len: len(data)}
	outs, err := op.Encode(nil, codec.Segment{SegInfo: in, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	s := outs[0].Data
	lx, k1 := binary.Uvarint(s)
	lr, k2 := binary.Uvarint(s[k1:])
	body := s[k1+k2:]
	xs, rest, lows := body[:lx], body[lx:lx+lr], body[lx+lr:]
	head := func(a, b uint64) []byte { return binary.AppendUvarint(binary.AppendUvarint(nil, a), b) }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, bad := range map[string][]byte{
		"non-minimal length":  join([]byte{byte(lx) | 0x80, byte(lx >> 7), 0}, s[k1:]),
		"length past the end": join(head(uint64(len(s)), lr), body),
		"lengths past it":     join(head(lx, uint64(len(body))-lx+1), body),
		"streams swapped":     join(head(lr, lx), rest, xs, lows),
		"no low bits":         join(head(lx, lr), xs, rest),
		"no rest":             join(head(lx, 0), xs, lows),
		"empty":               nil,
	} {
		if got := fastFuzzDecode(t, op, []codec.Segment{{Data: bad}}, in); got != nil {
			t.Errorf("%s: decoded", name)
		}
	}

	// One element of bfloat16: 5 low bits, 3 bits of padding, which must
	// be zeros.
	one := []byte{0x37, 0x3f}
	in1 := codec.SegInfo{Name: "data", Elem: codec.BF16, Len: 2}
	outs, err = op.Encode(nil, codec.Segment{SegInfo: in1, Data: one})
	if err != nil {
		t.Fatal(err)
	}
	good := outs[0].Data
	if got := fastFuzzDecode(t, op, []codec.Segment{{Data: good}}, in1); !bytes.Equal(got, one) {
		t.Fatalf("one element: %x", got)
	}
	padded := bytes.Clone(good)
	padded[len(padded)-1] |= 0x80
	if got := fastFuzzDecode(t, op, []codec.Segment{{Data: padded}}, in1); got != nil {
		t.Error("a padding bit set: decoded")
	}

	// One element whose exponent escapes although its rank is 3 (every
	// exponent starts at the rank of its value).
	f, _ := floatFieldsOf(codec.F16)
	m := getFCM(f, floatcmRank)
	var x, e rcEncoder
	x.reset(nil)
	e.reset(nil)
	x.tree(m.ro1[0][:], fcmRankEsc, fcmRankBits, fcmExpLimit)
	x.tree(m.o0[:], 3, f.eb, fcmExpLimit)
	fcmPool.Put(m)
	xb, eb := x.finish(), e.finish()
	bad := join(head(uint64(len(xb)), uint64(len(eb))), xb, eb)
	in2 := codec.SegInfo{Name: "data", Elem: codec.F16, Len: 2}
	if _, err := op.Decode(nil, nil, []codec.Segment{{Data: bad}}, in2); !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), "escape") {
		t.Errorf("an escape for an exponent of rank 3: %v", err)
	}
}

func TestFloatcmStretch(t *testing.T) {
	// squash and stretch are inverse where stretch is defined, and monotone.
	for p := 1; p < 4096; p++ {
		d := fcmStretchTable[p]
		if p > 1 && d < fcmStretchTable[p-1] {
			t.Fatalf("stretch(%d) = %d < stretch(%d) = %d", p, d, p-1, fcmStretchTable[p-1])
		}
		if s := fcmSquash(int64(d)); s < int32(p) && d != 2047 {
			t.Fatalf("squash(stretch(%d)) = %d", p, s)
		}
	}
	if fcmSquash(-1<<40) != 1 || fcmSquash(1<<40) != 4095 || fcmSquash(0) != 2048 {
		t.Fatal("squash at its ends")
	}
}

func FuzzFloatcmDecode(f *testing.F)   { fuzzFloatcm(f, floatcmOp{model: floatcmMix}) }
func FuzzFloatrankDecode(f *testing.F) { fuzzFloatcm(f, floatcmOp{model: floatcmRank}) }

func fuzzFloatcm(f *testing.F, op floatcmOp) {
	for i, dt := range []codec.DType{codec.F32, codec.BF16, codec.F16} {
		s := floatcmTestRuns(dt, 500, uint64(i))
		outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Elem: dt, Len: len(s)}, Data: s})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(dt), uint32(len(s)), outs[0].Data)
	}
	f.Fuzz(func(t *testing.T, elem uint8, n uint32, data []byte) {
		dt := codec.DType(elem % 14)
		// Up to 256 KiB: a stream of a few zero bytes decodes to long runs
		// of zeros, at the model's speed (some ms per 100 KiB).
		in := codec.SegInfo{Name: "data", Elem: dt, Len: min(fastFuzzLen(n, data), 256<<10)}
		if _, err := op.Outputs(in); err != nil {
			return
		}
		fastFuzzDecode(t, op, []codec.Segment{{Data: data}}, in)
		fastFuzzRoundTrip(t, op, in, data[:len(data)/dt.Size()*dt.Size()])
	})
}

// TestFloatcmSlowDecodeLimit: a frame decoding more through floatcm than
// Limits.MaxSlowDecoded is refused from its header, before any decoding;
// zeros code to a few bytes per KiB, which is why the limit exists.
func TestFloatcmSlowDecodeLimit(t *testing.T) {
	for _, recipe := range []string{"floatcm", "floatrank"} {
		tn := fastTestTensor("z", codec.F32, make([]byte, 1<<20))
		enc, err := codec.NewEncoder()
		if err != nil {
			t.Fatal(err)
		}
		frame, err := enc.AppendTensor(nil, tn, codec.MustParseRecipe(recipe))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: 1 MiB of float32 zeros: a frame of %d bytes", recipe, len(frame))
		if len(frame) > 8<<10 {
			t.Errorf("%s: 1 MiB of zeros took %d bytes", recipe, len(frame))
		}
		dec, err := codec.NewDecoder(codec.WithLimits(codec.Limits{MaxSlowDecoded: 1<<20 - 4}))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := dec.DecodeFrame(frame); !errors.Is(err, codec.ErrLimit) {
			t.Fatalf("%s: a frame over MaxSlowDecoded: %v", recipe, err)
		}
		var def codec.Decoder
		if _, _, err := def.DecodeFrame(frame); err != nil {
			t.Fatalf("%s: the default limits: %v", recipe, err)
		}
	}
}

// TestFloatcmEncoderLimit: the encoder refuses a frame that readers with
// the default limits would refuse for its floatcm bytes, before coding it;
// so does it a frame of several tensors whose floatcm bytes add up past it.
func TestFloatcmEncoderLimit(t *testing.T) {
	n := codec.DefaultLimits().MaxSlowDecoded/4 + 1
	tn := fastTestTensor("big", codec.F32, make([]byte, 4*n))
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	r := codec.MustParseRecipe("floatcm")
	if _, err := enc.AppendTensor(nil, tn, r); !errors.Is(err, codec.ErrLimit) {
		t.Fatalf("a frame of %d bytes through floatcm: %v", 4*n, err)
	}
	// Two tensors of 1 MiB, under a limit made small for the test through
	// what the encoder checks: the sum over the frame.
	a := floatcmTestWeights(1<<18, 1)
	ts := []*codec.Tensor{fastTestTensor("a", codec.F32, a), fastTestTensor("b", codec.F32, a)}
	frame, err := enc.AppendTensors(nil, ts, []*codec.Recipe{r, r})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := codec.NewDecoder(codec.WithLimits(codec.Limits{MaxSlowDecoded: 3 << 19}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dec.DecodeFrame(frame); !errors.Is(err, codec.ErrLimit) {
		t.Fatalf("two tensors of 1 MiB through floatcm, a limit of 1.5 MiB: %v", err)
	}
}

// TestFloatcmConcurrent: floatcm and floatrank share their pool of model
// state; on four goroutines at once, over every float type, each codes
// the bytes it codes alone and decodes them back.
func TestFloatcmConcurrent(t *testing.T) {
	dts := []codec.DType{codec.F32, codec.BF16, codec.F16}
	data := make([][]byte, len(dts))
	want := make([][][]byte, len(floatcmOps))
	for k, op := range floatcmOps {
		want[k] = make([][]byte, len(dts))
		for j, dt := range dts {
			data[j] = floatcmTestRuns(dt, 20000, uint64(j))
			outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "w", Elem: dt, Len: len(data[j])}, Data: data[j]})
			if err != nil {
				t.Fatal(err)
			}
			want[k][j] = bytes.Clone(outs[0].Data)
		}
	}
	done := make(chan error)
	for g := range 4 {
		go func() {
			var err error
			for i := range 6 {
				k, j := (g+i)%len(floatcmOps), (g+2*i)%len(dts)
				op, in := floatcmOps[k], codec.SegInfo{Name: "w", Elem: dts[j], Len: len(data[j])}
				outs, e := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: in, Data: data[j]})
				if e != nil || !bytes.Equal(outs[0].Data, want[k][j]) {
					err = errors.Join(e, fmt.Errorf("%v %v: other bytes than alone", op, dts[j]))
					break
				}
				got, e := op.Decode(nil, nil, outs, in)
				if e != nil || !bytes.Equal(got, data[j]) {
					err = errors.Join(e, fmt.Errorf("%v %v: round trip differs", op, dts[j]))
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
