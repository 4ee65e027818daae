package codectest

import (
	"bytes"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// The helpers on codec's own raw path (no stage package needed).
func TestHelpers(t *testing.T) {
	x := codec.FromFloat32("w", []float32{1, -2, 3.5, 0, 7}, 5)
	frame := Lossless(t, x, "")
	if len(frame) > codec.MaxTensorLen(x) {
		t.Fatalf("frame of %d bytes, bound %d", len(frame), codec.MaxTensorLen(x))
	}
	if got := RoundTrip(t, x, ""); !bytes.Equal(got.Data, x.Data) {
		t.Fatal("RoundTrip changed the data")
	}
	if got := Stream(t, x, codec.WithChunkSize(64)); !bytes.Equal(got.Data, x.Data) {
		t.Fatal("Stream changed the data")
	}
	// A tensor the encoder refuses: TryRoundTrip returns the error.
	bad := &codec.Tensor{Name: string(make([]byte, codec.DefaultLimits().MaxNameLen+1)), DType: codec.U8, Shape: []int64{1}, Data: []byte{1}}
	if _, _, err := TryRoundTrip(t, bad, ""); err == nil {
		t.Fatal("a name over the limits passed")
	}
}
