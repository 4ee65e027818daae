package rpc

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// tensorEcho serves an echo of tensor batches with the TensorCodec.
func tensorEcho(t *testing.T) *grpc.ClientConn {
	t.Helper()
	tc := encoding.GetCodecV2(TensorCodecName)
	return grpctest.Serve(t, grpc.NewServer(grpc.ForceServerCodecV2(tc), grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20),
		grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
			var ts []*codec.Tensor
			if err := st.RecvMsg(&ts); err != nil {
				return err
			}
			return st.SendMsg(&ts)
		})))
}

func tensorBatch() []*codec.Tensor {
	sparse := make([]float32, 300000)
	for i := 0; i < len(sparse); i += 101 {
		sparse[i] = float32(i)
	}
	w := codec.FromFloat32("layer0.weight", nil, 0)
	w.DType, w.Shape, w.Data = codec.F32, []int64{1 << 20}, grpctest.Message(4<<20)
	lossless := codec.FromFloat32("norm", []float32{1, 2, 3, 4}, 4)
	lossless.Tags.Lossless = true
	ts := []*codec.Tensor{w, codec.FromFloat32("grad", sparse, 300, 1000), lossless}
	for i := range 40 { // small tensors, batched
		ts = append(ts, codec.FromFloat32("bias", []float32{float32(i), 1, 2}, 3))
	}
	return ts
}

func sameTensors(t *testing.T, got, want []*codec.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.DType != w.DType || !bytes.Equal(g.Data, w.Data) || g.Tags.Lossless != w.Tags.Lossless || !g.IsWhole() {
			t.Fatalf("tensor %d (%q) differs", i, w.Name)
		}
	}
}

func TestTensorCodecEcho(t *testing.T) {
	conn := tensorEcho(t)
	want := tensorBatch()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []*codec.Tensor
	err := conn.Invoke(ctx, "/tensorpress.test.Tensors/Echo", &want, &got,
		grpc.CallContentSubtype(TensorCodecName), grpc.MaxCallRecvMsgSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, got, want)
}

// TestTensorCodecFrames checks what Marshal makes: small tensors share a
// frame, raw chunks reference the tensor's bytes, coded ones are smaller.
func TestTensorCodecFrames(t *testing.T) {
	raw, err := NewTensorCodec(WithPolicy(codec.FixedPolicy{}), WithChunkSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	w := &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{1 << 18}, Data: grpctest.Message(1 << 20)}
	out, err := raw.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	aliases := 0
	for _, b := range out {
		d := b.ReadOnlyData()
		for off := 0; off < len(w.Data); off += 1 << 16 {
			if len(d) == 1<<16 && &d[0] == &w.Data[off] {
				aliases++
			}
		}
	}
	if aliases != 16 {
		t.Errorf("%d of 16 raw chunks reference the tensor's bytes", aliases)
	}
	var back []*codec.Tensor
	if err := raw.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	sameTensors(t, back, []*codec.Tensor{w})
	out.Free()

	def := encoding.GetCodecV2(TensorCodecName)
	batch := tensorBatch()
	out, err = def.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Len(); float64(n) > 0.9*float64(len(batch[0].Data)+len(batch[1].Data)) {
		t.Errorf("%d bytes on the wire for the batch: not coded", n)
	}
	var one codec.Tensor
	if err := def.Unmarshal(out, &one); err == nil {
		t.Fatal("a batch unmarshalled into one tensor")
	}
	out.Free()
	one1, _ := def.Marshal(batch[2])
	if err := def.Unmarshal(one1, &one); err != nil || one.Name != "norm" || !one.Tags.Lossless {
		t.Fatalf("one tensor: %v", err)
	}
	one1.Free()
	if _, err := def.Marshal("not a tensor"); err == nil {
		t.Fatal("a string marshalled")
	}
	if err := def.Unmarshal(mem.BufferSlice{mem.SliceBuffer("garbage")}, &back); err == nil {
		t.Fatal("garbage unmarshalled")
	}
}
