package hub

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// TestStats fetches a model by hand (summing the frame bytes of the
// chunks that arrive) and uploads updates (summing the frames sent): the
// Hub's Stats equal what the client counted.
func TestStats(t *testing.T) {
	h, _ := New(WithChunkSize(16 << 10))
	m := model(10, 5)
	if err := h.Publish(1, m); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, h)
	var frameBytes, raw, chunks int64
	for range 2 { // the second from the cache
		st, err := c.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: &hubpb.FetchRequest{Credit: 64}}})
		for {
			ch, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			frameBytes += int64(len(ch.Frames))
			chunks++
			if ch.Last {
				st.CloseSend()
			}
		}
	}
	for _, x := range m {
		raw += 2 * int64(len(x.Data))
	}
	spec, _ := gradient.Parse("topk(0.1)")
	ob := gradient.NewOutbox(nil)
	var sentUpdates int64
	var ups []*codec.Tensor
	for _, g := range grads(3) {
		ups = append(ups, g)
	}
	// The frames the client will send, measured the way Upload makes them.
	probe := gradient.NewOutbox(nil)
	for _, g := range ups {
		f, err := probe.Append(nil, g, spec, 0)
		if err != nil {
			t.Fatal(err)
		}
		sentUpdates += int64(len(f))
	}
	if err := Upload(context.Background(), c, ob, UploadRequest{Spec: spec, Round: 1, Peer: "p"}, ups); err != nil {
		t.Fatal(err)
	}

	s := h.Stats()
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"fetches", s.Fetches, 2},
		{"active fetches", s.ActiveFetches, 0},
		{"chunks sent", s.ChunksSent, chunks},
		{"bytes sent", s.BytesSent, frameBytes},
		{"raw bytes sent", s.RawBytesSent, raw},
		{"encodes", s.Encodes, chunks / 2},
		{"cache hits", s.CacheHits, chunks / 2},
		{"updates", s.Updates, int64(len(ups))},
		{"update bytes", s.UpdateBytes, sentUpdates},
		{"versions", int64(s.Versions), 1},
		{"malformed updates", s.MalformedUpdates, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// By recipe: every byte of the encoded segments is under one recipe,
	// and they are the frames' bytes less the headers. By peer: all the
	// chunks went to this test's one client.
	var in, out int64
	for _, a := range s.Recipes {
		in += a.In
		out += a.Out
	}
	if enc := frameBytes / 2; float64(out) <= 0.9*float64(enc) || out > enc || in != raw/2 {
		t.Errorf("by recipe: %v bytes in, %v out; the encoded chunks hold %v raw bytes in %v frame bytes", in, out, raw/2, enc)
	}
	if len(s.Peers) != 1 {
		t.Errorf("by peer: %v, want one peer", s.Peers)
	}
	for _, a := range s.Peers {
		if a.In != chunks || a.Out != frameBytes {
			t.Errorf("by peer: %+v, want %v chunks and %v bytes", a, chunks, frameBytes)
		}
	}
	if s.EncodeSeconds <= 0 {
		t.Error("no encode time")
	}
}

// TestAccountsBounded: past MaxAccounts names, counts go under Other.
func TestAccountsBounded(t *testing.T) {
	var a accounts
	for i := range MaxAccounts + 10 {
		a.add(fmt.Sprint("10.0.0.", i), 1, 100)
	}
	m := a.snapshot()
	if len(m) != MaxAccounts+1 || m[Other] != (Account{10, 1000}) {
		t.Fatalf("%d names, other %+v", len(m), m[Other])
	}
}
