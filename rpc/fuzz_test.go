package rpc

import (
	"bytes"
	"io"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/tensorpress/tensorpress/codec"

	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// FuzzDecompress feeds any bytes to both decompressors, read as gRPC reads
// them (at most its receive limit, then Close), and to TensorCodec's
// Unmarshal: an error or the data, never a panic.
func FuzzDecompress(f *testing.F) {
	for _, name := range []string{Name, ZstdName} {
		for _, m := range [][]byte{nil, []byte("x"), grpctest.Message(5000), make([]byte, 3000)} {
			var buf bytes.Buffer
			w, _ := encoding.GetCompressor(name).Compress(&buf)
			w.Write(m)
			w.Close()
			f.Add(buf.Bytes())
		}
	}
	tc := encoding.GetCodecV2(TensorCodecName)
	if out, err := tc.Marshal(tensorBatch()[2:6]); err == nil {
		f.Add(out.Materialize())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var ts []*codec.Tensor
		tc.Unmarshal(mem.BufferSlice{mem.SliceBuffer(in)}, &ts)
		for _, name := range []string{Name, ZstdName} {
			rd, err := encoding.GetCompressor(name).Decompress(bytes.NewReader(in))
			if err != nil {
				continue
			}
			io.Copy(io.Discard, io.LimitReader(rd, 16<<20))
			if c, ok := rd.(io.Closer); ok {
				c.Close()
			}
		}
	})
}
