package lossy

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// Benchmarks of the fp16 and bf16 kernels against a plain copy of the same
// float32 buffer (BenchmarkCopy), at 1 MiB (in cache) and 64 MiB (memory
// bound) of float32 input. Throughput is float32 bytes per second in every
// benchmark, so the MB/s columns compare directly: the targets are ratios
// to copy (see float.go). BenchmarkFP16EncodeGo and friends run the pure-Go
// loops, which noasm builds use throughout.
//
//	go test -run '^$' -bench 'Copy|FP16|BF16' -count 5 ./lossy
//	go test -run '^$' -bench 'Copy|FP16|BF16' -count 5 -tags noasm ./lossy

var floatBenchSizes = []struct {
	name string
	n    int // bytes of float32 input
}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

// floatBenchInput returns n bytes of N(0, 0.02) float32 weights.
func floatBenchInput(n int) []byte {
	r := rand.New(rand.NewPCG(5, 6))
	b := codec.AlignedBytes(n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(0.02*r.NormFloat64())))
	}
	return b
}

func floatBench(b *testing.B, run func(b *testing.B, f32, f16 []byte)) {
	for _, s := range floatBenchSizes {
		b.Run(s.name, func(b *testing.B) {
			f32 := floatBenchInput(s.n)
			f16 := codec.AlignedBytes(s.n / 2)
			halfEncode(f16, f32, codec.F32, false)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			b.ResetTimer()
			run(b, f32, f16)
		})
	}
}

// BenchmarkCopy is the peer: copy the float32 buffer to another one.
func BenchmarkCopy(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, _ []byte) {
		dst := codec.AlignedBytes(len(f32))
		for b.Loop() {
			copy(dst, f32)
		}
	})
}

func BenchmarkFP16Encode(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			halfEncode(f16, f32, codec.F32, false)
		}
	})
}

func BenchmarkFP16Decode(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			halfDecode(f32, f16, codec.F32, false)
		}
	})
}

func BenchmarkBF16Encode(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			halfEncode(f16, f32, codec.F32, true)
		}
	})
}

func BenchmarkBF16Decode(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			halfDecode(f32, f16, codec.F32, true)
		}
	})
}

func BenchmarkFP16EncodeGo(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			fp16EncodeGo(f16, f32)
		}
	})
}

func BenchmarkFP16DecodeGo(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			fp16DecodeGo(f32, f16)
		}
	})
}

func BenchmarkBF16EncodeGo(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			bf16EncodeGo(f16, f32)
		}
	})
}

func BenchmarkBF16DecodeGo(b *testing.B) {
	floatBench(b, func(b *testing.B, f32, f16 []byte) {
		for b.Loop() {
			bf16DecodeGo(f32, f16)
		}
	})
}

// BenchmarkFP16Stage runs the stage through codec with the recipe "fp16"
// on a 1 MiB float32 tensor, encode and decode of a frame.
func BenchmarkFP16Stage(b *testing.B) {
	f32 := floatBenchInput(1 << 20)
	tn := codec.NewTensor("w", codec.F32, int64(len(f32)/4))
	copy(tn.Data, f32)
	enc, err := codec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	r := codec.MustParseRecipe("fp16")
	frame, err := enc.AppendTensor(nil, tn, r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(f32)))
		b.ReportAllocs()
		buf := make([]byte, 0, len(frame)+1024)
		for b.Loop() {
			buf, _ = enc.AppendTensor(buf[:0], tn, r)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(f32)))
		b.ReportAllocs()
		dec := new(codec.Decoder)
		out := codec.AlignedBytes(len(f32) + 64)
		for b.Loop() {
			if _, _, err := dec.DecodeFrameInto(out, frame); err != nil {
				b.Fatal(err)
			}
		}
	})
}
