package lossy

import (
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// Benchmarks of the blockwise quantizers against a plain copy of the same
// float32 buffer (BenchmarkQuantCopy; float_bench_test.go has the same peer as BenchmarkCopy), at 1 MiB (cache-resident on most
// machines) and 64 MiB (memory-bound). SetBytes is the float32 size in
// both directions, so MB/s compare directly with copy's. The kernels run
// through encodeInto/decodeInto, the loops behind Encode and Decode, on
// buffers reused across iterations; BenchmarkInt8Encode measures the full
// Encode/Decode path with an Arena at 1 MiB.
//
//	go test -run '^$' -bench 'Copy|Int8|NF4|FP4|QSGD|Sign|Ternary' -count 5 ./lossy

var benchSizes = []struct {
	name  string
	bytes int
}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

var (
	benchDataOnce sync.Once
	benchData     []float32 // N(0, 0.02), 64 MiB
)

func benchInput(n int) []float32 {
	benchDataOnce.Do(func() { benchData = quantNormals(64<<20/4, 0.02, 1) })
	return benchData[:n]
}

func BenchmarkQuantCopy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			src := view.Of(benchInput(sz.bytes / 4))
			dst := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// benchBlock runs quantize and dequantize of op over each size.
func benchBlock(b *testing.B, recipe string) {
	op := mustBlockOp(b, recipe)
	for _, sz := range benchSizes {
		n := sz.bytes / 4
		x := benchInput(n)
		src := view.Of(x)
		q := view.Bytes(op.qLen(n))
		scale := view.Bytes(4 * op.numBlocks(n))
		if err := op.encodeInto(q, scale, src, codec.F32, 0, nil); err != nil {
			b.Fatal(err)
		}
		out := view.Bytes(len(src))
		b.Run("quantize/"+sz.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if err := op.encodeInto(q, scale, src, codec.F32, 0, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("dequantize/"+sz.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if err := op.decodeInto(out, q, scale, codec.F32, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkInt8(b *testing.B)     { benchBlock(b, "int8(4096)") }
func BenchmarkInt8B64(b *testing.B)  { benchBlock(b, "int8(64)") }
func BenchmarkNF4(b *testing.B)      { benchBlock(b, "nf4(64)") }
func BenchmarkNF4B4096(b *testing.B) { benchBlock(b, "nf4(4096)") }
func BenchmarkFP4(b *testing.B)      { benchBlock(b, "fp4(64)") }
func BenchmarkQSGD(b *testing.B)     { benchBlock(b, "qsgd(127,4096)") }
func BenchmarkSign(b *testing.B)     { benchBlock(b, "sign(4096)") }
func BenchmarkTernary(b *testing.B)  { benchBlock(b, "ternary(4096)") }

// BenchmarkInt8Encode runs the op's Encode and Decode as codec calls them,
// with an Arena reset per iteration and a reused destination.
func BenchmarkInt8Encode(b *testing.B) {
	op := mustBlockOp(b, "int8(4096)")
	x := benchInput(1 << 18)
	src := view.Of(x)
	in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: len(src)}, Data: src}
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	b.Run("Encode/1MiB", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := op.Encode(ctx, in); err != nil {
				b.Fatal(err)
			}
			ctx.Arena.Reset()
		}
	})
	parts, err := op.Encode(&codec.Ctx{}, in)
	if err != nil {
		b.Fatal(err)
	}
	dst := view.Bytes(len(src))
	b.Run("Decode/1MiB", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := op.Decode(ctx, dst[:0], parts, in.SegInfo); err != nil {
				b.Fatal(err)
			}
		}
	})
}
