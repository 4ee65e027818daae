package hubpb

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// The generated messages round-trip, and the service names the methods
// the hub serves.
func TestMessages(t *testing.T) {
	in := &FetchMessage{Msg: &FetchMessage_Request{Request: &FetchRequest{Version: 3, Base: 2, Credit: 8,
		Specs: []*TensorSpec{{Names: []string{"layer*"}, Tags: map[string]string{"role": "weight"}}}}}}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out FetchMessage
	if err := proto.Unmarshal(b, &out); err != nil || !proto.Equal(in, &out) {
		t.Fatalf("round trip: %v", err)
	}
	if Hub_ServiceDesc.ServiceName != "tensorpress.hub.v1.Hub" || len(Hub_ServiceDesc.Streams) != 2 || len(Hub_ServiceDesc.Methods) != 1 {
		t.Fatalf("service %+v", Hub_ServiceDesc)
	}
}
