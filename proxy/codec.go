package proxy

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// passThrough is the codec of both legs of a proxy: a message it forwards
// is a *mem.BufferSlice holding the bytes as gRPC received them, kept
// without a copy and handed to the other leg's SendMsg. Any other message
// type goes to the registered proto codec, so that services registered on
// the proxy's own server (a health check) still work.
//
// Its name is empty and it is never registered: an outgoing call then
// takes the content-subtype that Forward sets from the incoming call
// (grpc.CallContentSubtype), and a call without one goes out as plain
// "application/grpc", as it came in.
type passThrough struct{}

var _ encoding.CodecV2 = passThrough{}

// Marshal returns the message's buffers with a reference of their own,
// which gRPC frees once it has sent them; the caller keeps its reference.
func (passThrough) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*mem.BufferSlice); ok {
		m.Ref()
		return *m, nil
	}
	return encoding.GetCodecV2(proto.Name).Marshal(v)
}

// Unmarshal keeps a reference to data's buffers in *v: the caller frees
// it (BufferSlice.Free) when done with the message.
func (passThrough) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*mem.BufferSlice); ok {
		data.Ref()
		*m = append((*m)[:0], data...)
		return nil
	}
	return encoding.GetCodecV2(proto.Name).Unmarshal(data, v)
}

// Name is empty; see the type's comment.
func (passThrough) Name() string { return "" }
