package hub

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// WireCodecName is the content subtype of the hub's calls
// (application/grpc+tensorpress-hub): protobuf on the wire, as the
// standard codec writes it, but a FetchChunk's frames are handed to gRPC
// by reference, not copied into a new buffer: the same cached frames go to
// every client. Fetch asks for it; other clients of the service may use
// plain protobuf, which reads the same bytes.
const WireCodecName = "tensorpress-hub"

func init() { encoding.RegisterCodecV2(wireCodec{}) }

type wireCodec struct{}

func (wireCodec) Name() string { return WireCodecName }

func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

// Marshal writes a FetchChunk as its fields 1 and 2, field 3's tag and
// length, the frames themselves, then the other fields; other messages as
// the proto codec does.
func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	c, ok := v.(*hubpb.FetchChunk)
	if !ok || len(c.Frames) < 4096 {
		return protoCodec().Marshal(v)
	}
	head := protowire.AppendTag(nil, 1, protowire.VarintType)
	head = protowire.AppendVarint(head, c.Seq)
	head = protowire.AppendTag(head, 2, protowire.VarintType)
	head = protowire.AppendVarint(head, c.Version)
	head = protowire.AppendTag(head, 3, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(c.Frames)))
	rest, err := proto.Marshal(&hubpb.FetchChunk{Last: c.Last, Digests: c.Digests})
	if err != nil {
		return nil, fmt.Errorf("hub: marshal chunk %d: %w", c.Seq, err)
	}
	out := mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(c.Frames)}
	if len(rest) > 0 {
		out = append(out, mem.SliceBuffer(rest))
	}
	return out, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return protoCodec().Unmarshal(data, v)
}
