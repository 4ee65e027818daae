package hub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/lossless"
)

// TestDeltaCoding fetches version 2 against version 1 by hand, as clients
// of several releases ask: one that sends no delta coding (an older
// release) gets shuffle | zstd, which it decodes; one that asks for
// lenbits gets it; one from a later release gets the newest this hub has.
// The decoded deltas are the same bits in every coding.
func TestDeltaCoding(t *testing.T) {
	h, _ := New(WithRetention(2))
	v1 := model(12, 3)
	v2 := evolve(v1, 50, func(i int) bool { return i%3 != 0 })
	h.Publish(1, v1)
	h.Publish(2, v2)
	c, _ := serve(t, h)
	fetch := func(coding uint32) (deltas map[string][]byte, stages map[codec.StageID]bool, size int) {
		st, err := c.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		req := &hubpb.FetchRequest{Version: 2, Base: 1, RequireLossless: true, Credit: 64, DeltaCoding: coding}
		if err := st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: req}}); err != nil {
			t.Fatal(err)
		}
		deltas, stages = map[string][]byte{}, map[codec.StageID]bool{}
		var dec codec.Decoder
		for {
			ch, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			size += len(ch.Frames)
			for src := ch.Frames; len(src) > 0; {
				f, n, err := dec.DecodeFrame(src)
				if err != nil {
					t.Fatalf("coding %d: %v", coding, err)
				}
				src = src[n:]
				for _, e := range f.Header.Entries {
					for _, s := range e.Steps {
						stages[s.Stage] = true
					}
				}
				for _, x := range f.Tensors {
					if x.Base != 1 {
						t.Fatalf("coding %d: %q is not a delta against version 1", coding, x.Name)
					}
					deltas[x.Name] = append(deltas[x.Name], x.Data...)
				}
			}
		}
		return deltas, stages, size
	}
	old, oldStages, oldSize := fetch(DeltaCodingZstd)
	if oldStages[lossless.LenbitsID] || !oldStages[lossless.ZstdID] {
		t.Errorf("a client that asks for no coding got stages %v", slices.Sorted(func(yield func(codec.StageID) bool) {
			for s := range oldStages {
				yield(s)
			}
		}))
	}
	for _, coding := range []uint32{DeltaCodingLenbits, DeltaCoding + 7} {
		got, stages, size := fetch(coding)
		if !stages[lossless.LenbitsID] {
			t.Errorf("coding %d: no lenbits in the frames", coding)
		}
		if len(got) != len(v2) {
			t.Fatalf("coding %d: %d tensors, want %d", coding, len(got), len(v2))
		}
		for name, d := range got {
			if !bytes.Equal(d, old[name]) {
				t.Fatalf("coding %d: the delta of %q differs from shuffle | zstd's", coding, name)
			}
		}
		t.Logf("coding %d: %d bytes, shuffle | zstd %d", coding, size, oldSize)
		if size >= oldSize {
			t.Errorf("coding %d: %d bytes, shuffle | zstd %d", coding, size, oldSize)
		}
	}
}
