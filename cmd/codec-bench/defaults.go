package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/testvectors"
)

// sample is one input to measure: a tensor, or an opaque byte stream when
// dtype is codec.Byte.
type sample struct {
	name  string
	dtype codec.DType
	shape []int64
	data  []byte // little-endian, 8-byte aligned (codec.AlignedBytes)
	// load, when not nil, reads data when the sample's turn comes (large
	// files are read one tensor at a time).
	load func() ([]byte, error)
}

// defaultElems is the element count of the large default tensors: 2 Mi
// elements, 8 MiB of float32: large enough for several chunks and to
// leave the caches, small enough that a timed loop of --min-time holds
// several passes even on a busy machine.
const defaultElems = 2 << 20

// defaultSamples returns the built-in set: synthetic tensors, and real ones
// made by PyTorch (the first layer of a small MLP trained on Fashion-MNIST,
// its weights and one batch's gradient: testvectors.ModelWeights) and by
// the federated-learning simulator (a FedAvg client's update of that
// layer: testvectors.FLUpdate). Large
// synthetic tensors have n elements (a multiple of 1024); the others have
// fixed sizes. Each synthetic tensor has its own fixed PCG seed, so the set
// is the same on every run and every machine.
func defaultSamples(n int) ([]sample, error) {
	w, err := testvectors.ModelWeights()
	if err != nil {
		return nil, err
	}
	g, err := testvectors.ModelGrads()
	if err != nil {
		return nil, err
	}
	u, err := testvectors.FLUpdate()
	if err != nil {
		return nil, err
	}
	rows := int64(n / 1024)
	return []sample{
		// Dense weights: N(0, 0.02), the usual initialisation of a linear layer.
		f32Sample("weights", []int64{rows, 1024}, 1, func(r *rand.Rand) float32 {
			return float32(r.NormFloat64() * 0.02)
		}),
		// Gradients: Student-t with 3 degrees of freedom scaled to 1e-3:
		// most values near zero, a heavy tail of large ones.
		f32Sample("gradients", []int64{rows, 1024}, 2, func(r *rand.Rand) float32 {
			z := r.NormFloat64()
			a, b, c := r.NormFloat64(), r.NormFloat64(), r.NormFloat64()
			return float32(1e-3 * z / math.Sqrt((a*a+b*b+c*c)/3))
		}),
		// 99% exact zeros, the rest N(0, 0.02): a pruned or sparse update.
		f32Sample("sparse99", []int64{rows, 1024}, 3, func(r *rand.Rand) float32 {
			if r.IntN(100) != 0 {
				return 0
			}
			return float32(r.NormFloat64() * 0.02)
		}),
		int8Sample("int8", []int64{rows, 1024}, 4),
		bf16Sample("bf16", []int64{rows, 1024}, 5),
		f32Sample("bias", []int64{256}, 6, func(r *rand.Rand) float32 {
			return float32(r.NormFloat64() * 0.02)
		}),
		// LayerNorm gains sit around 1.
		f32Sample("layernorm", []int64{64}, 7, func(r *rand.Rand) float32 {
			return float32(1 + r.NormFloat64()*0.05)
		}),
		f32Sample("scalar", []int64{}, 8, func(*rand.Rand) float32 { return 2.3026 }),
		{name: "mlp.fc1.weight", dtype: w[0].DType, shape: w[0].Shape, data: w[0].Data},
		{name: "mlp.fc1.grad", dtype: g[0].DType, shape: g[0].Shape, data: g[0].Data},
		// A FedAvg client's update of the same layer, from tensorpress's
		// own simulator (testvectors/fl).
		{name: "fl.fc1.update", dtype: u[0].DType, shape: u[0].Shape, data: u[0].Data},
	}, nil
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x7e75_0e55)) }

func elements(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

func f32Sample(name string, shape []int64, seed uint64, gen func(*rand.Rand) float32) sample {
	r := newRand(seed)
	n := elements(shape)
	b := codec.AlignedBytes(4 * n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(gen(r)))
	}
	return sample{name: name, dtype: codec.F32, shape: shape, data: b}
}

// int8Sample is N(0, 0.02) weights quantized symmetrically with a scale
// that puts 4 standard deviations at 127: values centred on 0, about 32
// levels per standard deviation, clamped to [-127, 127].
func int8Sample(name string, shape []int64, seed uint64) sample {
	r := newRand(seed)
	n := elements(shape)
	b := codec.AlignedBytes(n)
	for i := range b {
		q := math.Round(r.NormFloat64() * 127 / 4)
		b[i] = byte(int8(max(-127, min(127, q))))
	}
	return sample{name: name, dtype: codec.I8, shape: shape, data: b}
}

// bf16Sample is N(0, 0.02) weights rounded to bfloat16 (nearest, ties to
// even).
func bf16Sample(name string, shape []int64, seed uint64) sample {
	r := newRand(seed)
	n := elements(shape)
	b := codec.AlignedBytes(2 * n)
	for i := range n {
		u := math.Float32bits(float32(r.NormFloat64() * 0.02))
		u += 0x7fff + (u>>16)&1
		binary.LittleEndian.PutUint16(b[2*i:], uint16(u>>16))
	}
	return sample{name: name, dtype: codec.BF16, shape: shape, data: b}
}
