package testvectors

import (
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// BenchmarkDecodeGolden decodes small coded golden frames, where checking
// the header (steps, parameters, segment table) is a good part of the work.
func BenchmarkDecodeGolden(b *testing.B) {
	d := new(codec.Decoder)
	for _, name := range []string{"huff0-planes", "sparse-auto", "coo-delta-varint", "int8-b64"} {
		f, err := Golden(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f)))
			for b.Loop() {
				if _, _, err := d.DecodeFrame(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
