package gradient

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/inthash"
)

// The randk stage keeps k = ceil(r*n) elements at positions drawn from a
// seed, so that no positions go on the wire: randk(r, seed) splits data
// into val alone (the k float32 values, in increasing position order).
//
// The positions are a stratified sample: the elements are cut into k
// strata, stratum j covering [floor(j*n/k), floor((j+1)*n/k)), and from
// stratum j the element at
//
//	lo + (h * (hi - lo)) >> 32,   h = inthash.Lowbias32(uint32(j) ^ key)
//	key = uint32(inthash.Mix64(seed ^ (offset * 0x9e3779b97f4a7c15)) >> 32)
//
// is kept, where offset is the chunk's first element in its tensor (0 for
// a whole tensor), inthash.Lowbias32 and inthash.Mix64 the hashes the qsgd stage uses (internal/inthash).
// Every element is kept with probability about k/n, and no two strata
// share an element. A compressor gives each step its own seed.
//
// Wire: params ratio (f32 bits), seed (uvarint).

var randkStage = &codec.Stage{
	ID: RandKID, Name: "randk", Kind: codec.Split, Granularity: codec.RangePartitionable, Lossy: true,
	Reads:  "an f32 segment",
	Writes: "val (the f32 values at seeded random positions; the positions are not sent)",
	Doc:    "random-k sparsification: randk(r, seed) keeps ceil(r*n) elements at positions drawn from the seed; the rest decode as zeros",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("randk", args, 2, "ratio", "seed"); err != nil {
			return nil, err
		}
		if err := noRepeats("randk", args, "ratio", "seed"); err != nil {
			return nil, err
		}
		var o randkOp
		for i, a := range args {
			if a.Key == "seed" || (a.Key == "" && i == 1) {
				s, err := strconv.ParseUint(a.Value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: randk: seed %q", codec.ErrRecipe, a.Value)
				}
				o.seed = s
				continue
			}
			r, err := ratioArg("randk", a.Value)
			if err != nil {
				return nil, err
			}
			o.ratio = r
		}
		if o.ratio == 0 {
			return nil, fmt.Errorf("%w: randk takes a ratio", codec.ErrRecipe)
		}
		return o, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) < 5 {
			return nil, fmt.Errorf("%w: randk params %x", codec.ErrCorrupt, p)
		}
		r := math.Float32frombits(binary.LittleEndian.Uint32(p))
		s, n := binary.Uvarint(p[4:])
		if !(r > 0 && r <= 1) || n <= 0 || 4+n != len(p) {
			return nil, fmt.Errorf("%w: randk params %x", codec.ErrCorrupt, p)
		}
		return randkOp{ratio: r, seed: s}, nil
	},
}

func init() { codec.Register(randkStage) }

type randkOp struct {
	ratio float32
	seed  uint64
}

var (
	_ codec.Op         = randkOp{}
	_ codec.AddDecoder = randkOp{}
)

func (randkOp) Stage() *codec.Stage { return randkStage }

func (o randkOp) String() string {
	return "randk(" + formatRatio(o.ratio) + ",seed=" + strconv.FormatUint(o.seed, 10) + ")"
}

func (o randkOp) AppendParams(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(o.ratio))
	return binary.AppendUvarint(dst, o.seed)
}

func (o randkOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := checkF32("randk", in); err != nil {
		return nil, err
	}
	n := in.Len / 4
	return []codec.SegInfo{{Name: codec.OutputName(in.Name, "val"), Elem: codec.F32, Len: 4 * K(o.ratio, n)}}, nil
}

// positions calls f with every kept position of a chunk of n elements
// starting at element offset, in increasing order.
func (o randkOp) positions(n int, offset int64, f func(j int, p uint32)) {
	k := K(o.ratio, n)
	key := uint32(inthash.Mix64(o.seed^uint64(offset)*inthash.Gamma) >> 32)
	for j := range k {
		lo := int64(j) * int64(n) / int64(k)
		hi := int64(j+1) * int64(n) / int64(k)
		h := uint64(inthash.Lowbias32(uint32(j) ^ key))
		f(j, uint32(lo+int64((h*uint64(hi-lo))>>32)))
	}
}

// RandKPositions appends the positions randk(r, seed) keeps in a chunk of
// n elements at element offset, in increasing order.
func RandKPositions(dst []uint32, r float32, seed uint64, n int, offset int64) []uint32 {
	randkOp{ratio: r, seed: seed}.positions(n, offset, func(_ int, p uint32) { dst = append(dst, p) })
	return dst
}

func chunkOffset(ctx *codec.Ctx) int64 {
	if ctx != nil && ctx.Tensor != nil {
		return ctx.Tensor.Offset
	}
	return 0
}

func (o randkOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	if err := checkF32("randk", in.SegInfo); err != nil {
		return nil, err
	}
	n := in.Len / 4
	out := ctx.Arena.Alloc(4 * K(o.ratio, n))
	o.positions(n, chunkOffset(ctx), func(j int, p uint32) {
		copy(out[4*j:4*j+4], in.Data[4*p:])
	})
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "val"), Elem: codec.F32}, Data: out}}, nil
}

func (o randkOp) values(ctx *codec.Ctx, parts []codec.Segment, in codec.SegInfo) ([]float32, error) {
	if err := checkF32("randk", in); err != nil {
		return nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 1 || len(parts[0].Data) != 4*K(o.ratio, in.Len/4) {
		return nil, fmt.Errorf("%w: randk: want %d values for %d elements", codec.ErrCorrupt, K(o.ratio, in.Len/4), in.Len/4)
	}
	return asF32(ctx, parts[0].Data), nil
}

func (o randkOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	val, err := o.values(ctx, parts, in)
	if err != nil {
		return nil, err
	}
	out := dst[len(dst) : len(dst)+in.Len]
	clear(out)
	o.positions(in.Len/4, chunkOffset(ctx), func(j int, p uint32) {
		binary.LittleEndian.PutUint32(out[4*p:], math.Float32bits(val[j]))
	})
	return dst[:len(dst)+in.Len], nil
}

// ChecksFinite: DecodeAdd honours ctx.Finite (codec.FiniteAddDecoder).
func (randkOp) ChecksFinite() {}

func (o randkOp) DecodeAdd(ctx *codec.Ctx, acc []float32, alpha float32, parts []codec.Segment, in codec.SegInfo) error {
	val, err := o.values(ctx, parts, in)
	if err != nil {
		return err
	}
	if len(acc) != in.Len/4 {
		return fmt.Errorf("%w: randk: accumulator of %d for %d elements", codec.ErrCorrupt, len(acc), in.Len/4)
	}
	if ctx.Finite {
		if err := codec.CheckFinite(alpha, val); err != nil {
			return fmt.Errorf("randk: %w", err)
		}
	}
	o.positions(len(acc), chunkOffset(ctx), func(j int, p uint32) { acc[p] += alpha * val[j] })
	return nil
}
