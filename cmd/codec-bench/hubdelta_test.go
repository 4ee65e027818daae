package main

import (
	"encoding/binary"
	"math"
	"math/bits"
	"os"
	"testing"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/internal/float16"
)

// BenchmarkHubDeltasFL measures the hub's lossless deltas on the global
// models of a FedAvg run (Fashion-MNIST, the MLP, 10 clients, IID, 20
// rounds of one local epoch, batch 64, lr 0.05, momentum 0.9, seed 1: the
// testvectors/fl run): for rounds 10 to 19, the frames of version r+1 as
// deltas against version r (in the coding this release's clients ask for,
// hub.DeltaCoding; full/zstd1 is the coding older clients get), against
// the hub's full lossless frames of version r+1; and a fine-tune that
// freezes the first layer (92% of the bytes), where only fc2 and fc3
// change. About a minute:
//
//	go test -run '^$' -bench HubDeltasFL -benchtime 1x ./cmd/codec-bench
func BenchmarkHubDeltasFL(b *testing.B) {
	if _, err := os.Stat(fl.DefaultDir); err != nil {
		b.Skip("Fashion-MNIST not installed (make test installs dataset-fashion-mnist)")
	}
	train, test, err := fl.LoadFashionMNIST(fl.DefaultDir)
	if err != nil {
		b.Fatal(err)
	}
	var models [][]*codec.Tensor // after rounds 10 to 20
	cfg := fl.Config{Mode: fl.FedAvg, Clients: 10, Rounds: 20, Batch: 64, LR: 0.05, Momentum: 0.9, Seed: 1,
		Progress: func(p fl.Progress) {
			if p.Round >= 10 {
				var ts []*codec.Tensor
				for _, prm := range p.Model.Params() {
					ts = append(ts, codec.FromFloat32(prm.Name, append([]float32(nil), prm.W...), prm.Shape...))
				}
				models = append(models, ts)
			}
		}}
	if _, err := fl.Run(cfg, train, test, fl.Exact{}); err != nil {
		b.Fatal(err)
	}
	var bfull, bdelta float64
	lenCtx := []func(e, prev uint32) uint32{lenGivenNothing, lenGivenPrev, lenGivenBaseExp}
	var lens [3]float64 // deltaLenBits in each of lenCtx
	var zstd1 int64     // the differences coded as the hub codes them for older clients
	var sorted int64    // the differences in base-exponent order, shuffle4 | *:zstd(1)
	enc, err := codec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	for r := 0; r+1 < len(models); r++ {
		for i, t := range models[r+1] {
			f, d := entropyBits(t.Data, models[r][i].Data)
			bfull += f
			bdelta += d
			for c, ctx := range lenCtx {
				lens[c] += deltaLenBits(t.Data, models[r][i].Data, ctx)
			}
			n, err := deltaBytes(enc, t, models[r][i].Data, false)
			if err != nil {
				b.Fatal(err)
			}
			zstd1 += n
			if n, err = deltaBytes(enc, t, models[r][i].Data, true); err != nil {
				b.Fatal(err)
			}
			sorted += n
		}
	}
	var full, delta, frozen int64
	for b.Loop() {
		full, delta, frozen = 0, 0, 0
		for r := 0; r+1 < len(models); r++ {
			f, err := hub.FrameBytes(models[r+1], nil)
			if err != nil {
				b.Fatal(err)
			}
			d, err := hub.FrameBytes(models[r+1], models[r])
			if err != nil {
				b.Fatal(err)
			}
			full += f
			delta += d
			// Frozen backbone: fc1 as in version r, the rest as in r+1.
			ft := append([]*codec.Tensor(nil), models[r+1]...)
			for i, t := range ft {
				if t.Name == "fc1.weight" || t.Name == "fc1.bias" {
					ft[i] = models[r][i]
				}
			}
			fr, err := hub.FrameBytes(ft, models[r])
			if err != nil {
				b.Fatal(err)
			}
			frozen += fr
		}
	}
	b.ReportMetric(float64(full)/float64(delta), "full/delta")
	b.ReportMetric(float64(frozen)/float64(full), "frozen/full")
	b.ReportMetric(bfull/bdelta, "bound-full/delta")
	b.ReportMetric(float64(full)/(lens[0]/8), "full/len-o0")
	b.ReportMetric(float64(full)/(lens[1]/8), "full/len-prev")
	b.ReportMetric(float64(full)/(lens[2]/8), "full/len-base-exp")
	b.ReportMetric(float64(full)/float64(zstd1), "full/zstd1")
	b.ReportMetric(float64(full)/float64(sorted), "full/sorted-zstd1")
	b.Logf("rounds 10-20: full %d bytes, deltas %d (%.3fx smaller; in the coding older clients get, %d: %.3fx); frozen first layer: %d bytes, %.1f%% of full",
		full, delta, float64(full)/float64(delta), zstd1, float64(full)/float64(zstd1), frozen, 100*float64(frozen)/float64(full))
	// The same models in other float types: as bfloat16 and float16
	// (rounded), and as float64 (float32 values, their low 29 bits zero).
	for _, dt := range []codec.DType{codec.BF16, codec.F16, codec.F64} {
		var full, delta, zstd1 int64
		for r := 0; r+1 < len(models); r++ {
			prev, cur := asDType(models[r], dt), asDType(models[r+1], dt)
			f, err := hub.FrameBytes(cur, nil)
			if err != nil {
				b.Fatal(err)
			}
			d, err := hub.FrameBytes(cur, prev)
			if err != nil {
				b.Fatal(err)
			}
			full += f
			delta += d
			for i, t := range cur {
				n, err := deltaBytes(enc, t, prev[i].Data, false)
				if err != nil {
					b.Fatal(err)
				}
				zstd1 += n
			}
		}
		b.ReportMetric(float64(full)/float64(delta), dt.String()+"-full/delta")
		b.ReportMetric(float64(full)/float64(zstd1), dt.String()+"-full/zstd1")
		b.Logf("as %v: full %d bytes, deltas %d (%.3fx smaller; in the coding older clients get, %d: %.3fx)",
			dt, full, delta, float64(full)/float64(delta), zstd1, float64(full)/float64(zstd1))
	}
	b.Logf("entropy bounds, each element coded given its base and the element before it: full %.0f bytes, deltas %.0f (%.3fx smaller)",
		bfull/8, bdelta/8, bfull/bdelta)
}

// entropyBits estimates what an ideal coder that codes each float32
// element given the element before it (and, for deltas, the base's
// element) would need, in bits, for the tensor cur: in full, its sign and
// exponent given the previous element's, and its 23 mantissa bits; as the
// hub's delta against base, the bit length of the zigzag difference given
// the base element's exponent and the previous difference's bit length,
// and the bits below the leading one (deltaLenBits, lenGivenBoth). The
// counts are of the whole tensor (a static model that costs nothing to
// send), so both are lower bounds for coders of this kind; their ratio is
// what modelling the elements one by one can reach.
func entropyBits(cur, base []byte) (full, delta float64) {
	n := len(cur) / 4
	fullCtx := map[[2]uint32]float64{}
	fullSym := map[uint32]float64{}
	var prevSE uint32
	for i := range n {
		se := binary.LittleEndian.Uint32(cur[4*i:]) >> 23
		fullCtx[[2]uint32{prevSE, se}]++
		fullSym[prevSE]++
		prevSE = se
		full += 23
	}
	for k, v := range fullCtx {
		full -= v * math.Log2(v/fullSym[k[0]])
	}
	return full, deltaLenBits(cur, base, lenGivenBoth)
}

// The contexts of deltaLenBits: from the base element's exponent e and
// the bit length of the difference before, prev.
var (
	lenGivenNothing = func(e, prev uint32) uint32 { return 0 }
	lenGivenPrev    = func(e, prev uint32) uint32 { return prev }
	lenGivenBaseExp = func(e, prev uint32) uint32 { return e }
	lenGivenBoth    = func(e, prev uint32) uint32 { return e<<8 | prev }
)

// deltaLenBits is what coding the hub's delta of cur against base as the
// bit length L of each zigzag difference and the L-1 bits below its
// leading one needs, in bits, with L's counts over the whole tensor
// (tables not counted: a bound) in the context ctx gives.
func deltaLenBits(cur, base []byte, ctx func(e, prev uint32) uint32) float64 {
	n := len(cur) / 4
	joint := map[[2]uint32]float64{}
	marg := map[uint32]float64{}
	var total float64
	var prevLen uint32
	for i := range n {
		bs := binary.LittleEndian.Uint32(base[4*i:])
		l := uint32(bits.Len32(zigzagDiff(binary.LittleEndian.Uint32(cur[4*i:]), bs)))
		c := ctx(bs>>23&0xff, prevLen)
		joint[[2]uint32{c, l}]++
		marg[c]++
		prevLen = l
		total += float64(max(int(l)-1, 0))
	}
	for k, v := range joint {
		total -= v * math.Log2(v/marg[k[0]])
	}
	return total
}

// zigzagDiff is the hub's delta of a 4-byte element (docs/FORMAT.md,
// "Delta updates"): the wrapping difference, zigzag-mapped.
func zigzagDiff(cur, base uint32) uint32 {
	x := cur - base
	return x<<1 ^ uint32(int32(x)>>31)
}

// deltaBytes is the size of the frames of t's delta against base (as the
// hub makes it: zigzag differences of the bits of elements of 2, 4 or 8
// bytes) coded as the hub codes them for clients that ask for no delta
// coding, shuffle | *:zstd(1), in chunks of the default size. With sorted
// (float32 only), the elements go in the order of their base element's
// exponent (stable): what ordering by a context both ends hold gives that
// chain.
func deltaBytes(enc *codec.Encoder, t *codec.Tensor, base []byte, sorted bool) (int64, error) {
	w := t.DType.Size()
	n := len(t.Data) / w
	var byExp [256][]int
	for i := range n {
		e := 0
		if sorted {
			e = int(binary.LittleEndian.Uint32(base[4*i:]) >> 23 & 0xff)
		}
		byExp[e] = append(byExp[e], i)
	}
	d := codec.AlignedBytes(len(t.Data))
	k := 0
	for _, idx := range byExp {
		for _, i := range idx {
			cur, b := t.Data[w*i:], base[w*i:]
			switch w {
			case 2:
				x := binary.LittleEndian.Uint16(cur) - binary.LittleEndian.Uint16(b)
				binary.LittleEndian.PutUint16(d[w*k:], x<<1^uint16(int16(x)>>15))
			case 4:
				binary.LittleEndian.PutUint32(d[w*k:], zigzagDiff(binary.LittleEndian.Uint32(cur), binary.LittleEndian.Uint32(b)))
			default:
				x := binary.LittleEndian.Uint64(cur) - binary.LittleEndian.Uint64(b)
				binary.LittleEndian.PutUint64(d[w*k:], x<<1^uint64(int64(x)>>63))
			}
			k++
		}
	}
	dt := map[int]codec.DType{2: codec.U16, 4: codec.U32, 8: codec.U64}[w]
	r := codec.MustParseRecipe("shuffle | *:zstd(1)")
	var total int64
	for off := 0; off < len(d); off += codec.DefaultChunkSize {
		c := &codec.Tensor{Name: t.Name, DType: dt, Shape: []int64{int64(n)}, Offset: int64(off / w), Data: d[off:min(off+codec.DefaultChunkSize, len(d))]}
		f, err := enc.AppendTensor(nil, c, r)
		if err != nil {
			return 0, err
		}
		total += int64(len(f))
	}
	return total, nil
}

// asDType converts float32 tensors to dt: bfloat16 or float16 rounded to
// nearest even, or float64.
func asDType(m []*codec.Tensor, dt codec.DType) []*codec.Tensor {
	out := make([]*codec.Tensor, len(m))
	for i, t := range m {
		c := codec.NewTensor(t.Name, dt, t.Shape...)
		for j := range len(t.Data) / 4 {
			f := math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*j:]))
			switch dt {
			case codec.BF16:
				binary.LittleEndian.PutUint16(c.Data[2*j:], float16.BF16FromF32(f))
			case codec.F16:
				binary.LittleEndian.PutUint16(c.Data[2*j:], float16.F16FromF32(f))
			default:
				binary.LittleEndian.PutUint64(c.Data[8*j:], math.Float64bits(float64(f)))
			}
		}
		out[i] = c
	}
	return out
}
