package sparse

import (
	"os"
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// The 99%-zeros figure: 64 MiB of float32, 1% non-zeros N(0, 0.02)
// (sparseFloats(16<<20, 0.01, 99)), cut into codec.DefaultChunkSize
// chunks, each coded by Encoder.AppendTensor and decoded by
// Decoder.DecodeFrameInto into a reused buffer, as a Writer and a Reader
// with one worker do. Compare with the zstd tool on the same bytes in the
// same session (SPARSE_DUMP=file writes them):
//
//	SPARSE_DUMP=/tmp/sparse99.f32 go test -run '^$' -bench '^BenchmarkSparse99$' -benchtime 10x -cpu 1 ./sparse
//	zstd -b1 -e1 -T1 /tmp/sparse99.f32
//
// The ratio metric is input bytes over frame bytes, headers included.
var sparse99 = sync.OnceValue(func() []byte {
	b := codec.FromFloat32("s", sparseFloats(16<<20, 0.01, 99)).Data
	if f := os.Getenv("SPARSE_DUMP"); f != "" {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			panic(err)
		}
	}
	return b
})

func BenchmarkSparse99(b *testing.B) {
	for _, rc := range []struct{ name, recipe string }{
		{"auto", "sparse | val:shuffle | *:huff0"},
		{"gaps", "sparse(gaps) | val:shuffle | *:huff0"},
		{"coo-bitpack", "coo | idx:delta,bitpack | val:shuffle | *:huff0"},
		{"coo-raw", "coo"},
	} {
		b.Run(rc.name, func(b *testing.B) { benchChunks(b, sparse99(), rc.recipe) })
	}
}

func benchChunks(b *testing.B, data []byte, recipe string) {
	r := codec.MustParseRecipe(recipe)
	enc, err := codec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	dec := new(codec.Decoder)
	shape := []int64{int64(len(data) / 4)}
	var chunks []*codec.Tensor
	for off := 0; off < len(data); off += codec.DefaultChunkSize {
		end := min(off+codec.DefaultChunkSize, len(data))
		chunks = append(chunks, &codec.Tensor{Name: "s", DType: codec.F32, Shape: shape, Offset: int64(off / 4), Data: data[off:end]})
	}
	frames := make([][]byte, len(chunks))
	total := 0
	for i, c := range chunks {
		if frames[i], err = enc.AppendTensor(nil, c, r); err != nil {
			b.Fatal(err)
		}
		total += len(frames[i])
	}
	buf := codec.AlignedBytes(codec.DefaultChunkSize + 8)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			for i, c := range chunks {
				if frames[i], err = enc.AppendTensor(frames[i][:0], c, r); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(data))/float64(total), "ratio")
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			for _, f := range frames {
				if _, _, err := dec.DecodeFrameInto(buf, f); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(data))/float64(total), "ratio")
	})
}
