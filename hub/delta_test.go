package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// Every coding decodes to version 2, given version 1.
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
					if ok, err := undoDelta(x, v1[slices.IndexFunc(v1, func(b *codec.Tensor) bool { return b.Name == x.Name })], x.Offset, 1); !ok || err != nil {
						t.Fatalf("coding %d: %q: %v", coding, x.Name, err)
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
	for _, x := range v2 {
		if !bytes.Equal(old[x.Name], x.Data) {
			t.Fatalf("coding 0: %q differs from version 2", x.Name)
		}
	}
	for _, coding := range []uint32{DeltaCodingLenbits, DeltaCodingOrdered, DeltaCoding + 7} {
		got, stages, size := fetch(coding)
		if !stages[lossless.LenbitsID] {
			t.Errorf("coding %d: no lenbits in the frames", coding)
		}
		if len(got) != len(v2) {
			t.Fatalf("coding %d: %d tensors, want %d", coding, len(got), len(v2))
		}
		for name, d := range got {
			if !bytes.Equal(d, old[name]) {
				t.Fatalf("coding %d: %q differs from version 2", coding, name)
			}
		}
		t.Logf("coding %d: %d bytes, shuffle | zstd %d", coding, size, oldSize)
		if size >= oldSize {
			t.Errorf("coding %d: %d bytes, shuffle | zstd %d", coding, size, oldSize)
		}
	}
}

// TestOrderTag: a client refuses a delta in exponent order whose tag is
// malformed, whose chunk does not start a run, or whose elements are not
// floats, as corrupt; it undoes a good one chunk by chunk or whole.
func TestOrderTag(t *testing.T) {
	base := model(1, 7)[0]
	cur := evolve([]*codec.Tensor{base}, 8, func(int) bool { return true })[0]
	n := int(base.NumElements())
	mk := func(tag string, dt codec.DType, off, count int) *codec.Tensor {
		k := 1000
		fmt.Sscanf(tag, "exp:%d", &k)
		d := make([]byte, 4*count)
		diff(d, cur.Data[4*off:4*(off+count)], base.Data[4*off:4*(off+count)], 4)
		o := make([]byte, len(d))
		inRuns(o, d, base.Data[4*off:4*(off+count)], codec.F32, max(k, 1), false)
		x := &codec.Tensor{Name: base.Name, DType: dt, Shape: base.Shape, Offset: int64(off), Data: o, Base: 1}
		x.Tags.Extra = []codec.Tag{{Key: DeltaTag.Key, Value: tag}}
		return x
	}
	for _, c := range []struct {
		tag string
		dt  codec.DType
		off int
	}{{"exp:0", codec.F32, 0}, {"exp:01000", codec.F32, 0}, {"exp:x", codec.F32, 0}, {"exp:-5", codec.F32, 0},
		{"exp:1000", codec.U32, 0}, {"exp:1000", codec.F32, 500}} {
		x := mk(c.tag, c.dt, c.off, 1000)
		b := *base
		b.DType = c.dt
		if _, err := undoDelta(x, &b, x.Offset, 1); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%s on %v at %d: %v, want ErrCorrupt", c.tag, c.dt, c.off, err)
		}
	}
	for _, c := range []struct {
		tag   string
		count int
	}{{"exp:1000", 1000}, {"exp:1000", 3000}, {"exp:1000", n}, {"exp:7", 700}, {"exp:1", n}} {
		count := c.count
		for off := 0; off < n; off += count {
			k := min(count, n-off)
			x := mk(c.tag, codec.F32, off, k)
			if ok, err := undoDelta(x, base, x.Offset, 1); !ok || err != nil || !bytes.Equal(x.Data, cur.Data[4*off:4*(off+k)]) || x.Tags.Extra != nil {
				t.Fatalf("%s, chunks of %d, at %d: %v, %v", c.tag, count, off, ok, err)
			}
		}
	}
}

// TestFastDeltas: a client that asks for fast deltas gets shuffle | zstd,
// one that does not gets lenbits; both decode to the version.
func TestFastDeltas(t *testing.T) {
	h, _ := New()
	v1 := model(8, 5)
	v2 := evolve(v1, 60, func(int) bool { return true })
	h.Publish(1, v1)
	h.Publish(2, v2)
	c, _ := serve(t, h)
	held := func(name string) *codec.Tensor {
		return v1[slices.IndexFunc(v1, func(x *codec.Tensor) bool { return x.Name == name })]
	}
	for _, fast := range []bool{true, false} {
		before := h.Stats().Recipes
		got := map[string][]byte{}
		res, err := Fetch(context.Background(), c, Request{Version: 2, Base: 1, BaseTensor: held, FastDeltas: fast},
			func(x *codec.Tensor) error { got[x.Name] = x.Data; return nil })
		if err != nil || res.Deltas != len(v2) {
			t.Fatalf("fast %v: %+v, %v", fast, res, err)
		}
		for _, x := range v2 {
			if !bytes.Equal(got[x.Name], x.Data) {
				t.Fatalf("fast %v: %q differs", fast, x.Name)
			}
		}
		after := h.Stats().Recipes
		used := func(name string) bool { return after[name].In > before[name].In }
		if used("lenbits(4)") == fast || used("shuffle4 | *:zstd(1)") != fast {
			t.Errorf("fast %v: recipes before %v, after %v", fast, before, after)
		}
	}
}
