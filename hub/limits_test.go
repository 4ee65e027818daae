package hub

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// TestBudgetFetchBackpressure: 12 fetches at once from a hub whose
// budget holds two chunks' encoding at a time (and no cache) all finish
// bit for bit: a fetch that waits for the budget holds none of it, so
// they never wait on one another for good; the budget is all given back
// at the end, and was never passed.
func TestBudgetFetchBackpressure(t *testing.T) {
	b := budget.New(7 * 32 << 10) // two chunks' encoding (3 x 32 KiB each) and a chunk's frames
	h, _ := New(WithChunkSize(32<<10), WithCacheBytes(0), WithBudget(b))
	m := model(40, 5)
	h.Publish(1, m)
	c, _ := serve(t, h)
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := 0
			_, errs[i] = Fetch(context.Background(), c, Request{Credit: 8}, func(x *codec.Tensor) error {
				if !bytes.Equal(x.Data, m[j].Data) {
					return fmt.Errorf("%q differs", x.Name)
				}
				j++
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("fetch %d: %v", i, err)
		}
	}
	st := b.Stats()
	if st.InUse != 0 || st.Peak > st.Limit || st.Charges == 0 {
		t.Errorf("budget after the fetches: %+v", st)
	}
}

// TestBudgetUploads: an upload message is charged what its frames claim
// before it is decoded: one that does not fit is refused with
// ResourceExhausted and nothing of it is added; one that fits is added,
// its sum charged until DropRound.
func TestBudgetUploads(t *testing.T) {
	b := budget.New(1 << 20)
	h, _ := New(WithBudget(b))
	c, _ := serve(t, h)
	small := []*codec.Tensor{codec.FromFloat32("small", make([]float32, 16<<10), 16<<10)} // 64 KiB
	if err := Upload(context.Background(), c, gradient.NewOutbox(nil), UploadRequest{Round: 1}, small); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.InUse != 64<<10 {
		t.Errorf("%d bytes charged for a round's 64 KiB sum", st.InUse)
	}
	big := []*codec.Tensor{codec.FromFloat32("big", make([]float32, 512<<10), 512<<10)} // 2 MiB of zeros, a few KB coded
	err := Upload(context.Background(), c, gradient.NewOutbox(nil), UploadRequest{Round: 1}, big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an update claiming 2 MiB on a 1 MiB budget: %v", err)
	}
	sum, _ := h.Sum(1)
	if len(sum.Tensors) != 1 || h.Stats().OversizedUpdates != 1 {
		t.Errorf("after the refused update: %d sums, %d refused", len(sum.Tensors), h.Stats().OversizedUpdates)
	}
	h.DropRound(1)
	if st := b.Stats(); st.InUse != 0 {
		t.Errorf("%d bytes still charged after DropRound", st.InUse)
	}
	// Garbage that is not a frame: InvalidArgument, nothing charged.
	st, err := c.Upload(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&hubpb.UploadMessage{Round: 2, Frame: []byte("not a frame at all")})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("garbage: %v", err)
	}
}

// TestUploadOneTensorAFrame: a frame of two tensors is refused before any
// of it is added. Were it decoded, a second tensor the peer's update of
// which the round had counted (AlreadyExists) would leave the first in the
// sum, and the update counted nowhere.
func TestUploadOneTensorAFrame(t *testing.T) {
	h, _ := New()
	c, _ := serve(t, h)
	req := UploadRequest{Round: 1, Peer: "p"}
	b := []*codec.Tensor{codec.FromFloat32("b", []float32{1, 2}, 2)}
	if err := Upload(context.Background(), c, gradient.NewOutbox(nil), req, b); err != nil {
		t.Fatal(err)
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	frame, err := enc.AppendTensors(nil, []*codec.Tensor{codec.FromFloat32("a", []float32{5, 5}, 2), b[0]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Upload(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&hubpb.UploadMessage{Round: 1, Peer: "p", Frame: frame})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a frame of two tensors: %v", err)
	}
	sum, _ := h.Sum(1)
	if len(sum.Tensors) != 1 || sum.Tensors[0].Name != "b" {
		t.Fatalf("after the refused frame the round holds %d sums (%v)", len(sum.Tensors), sum.Counts)
	}
}

// TestLimits: the defaults are valid and each bad value is refused.
func TestLimits(t *testing.T) {
	if _, err := DefaultLimits().ServerOptions(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Limits){
		"handshake": func(l *Limits) { l.Handshake = 0 },
		"idle":      func(l *Limits) { l.Idle = -1 },
		"streams":   func(l *Limits) { l.MaxStreams = 0 },
		"message":   func(l *Limits) { l.MaxMessage = 10 },
		"ping":      func(l *Limits) { l.Ping = 0 },
	} {
		l := DefaultLimits()
		change(&l)
		if _, err := l.ServerOptions(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestUploadSlowStages: an update coded by a stage that decodes at some
// MB/s (floatcm), over the upload limit on such bytes, is refused with
// ResourceExhausted before it is decoded: such a frame of zeros is a few
// KB on the wire for each MiB it decodes, at 7-15 MB/s, under its round's
// lock. A hub whose limits allow it counts it and journals it, and a hub
// with the default limits counts it again from that journal: what was
// accepted is not lost.
func TestUploadSlowStages(t *testing.T) {
	x := make([]float32, 512<<10) // 2 MiB, over gradient.DefaultSlowDecoded
	for i := range x {
		x[i] = float32(i%7) / 4
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	frame, err := enc.AppendTensor(nil, codec.FromFloat32("w", x, int64(len(x))), codec.MustParseRecipe("floatcm"))
	if err != nil {
		t.Fatal(err)
	}
	send := func(c hubpb.HubClient) error {
		st, err := c.Upload(context.Background())
		if err != nil {
			return err
		}
		if err := st.Send(&hubpb.UploadMessage{Round: 1, Peer: "p", Frame: frame}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	sumIs := func(h *Hub, what string) {
		t.Helper()
		sum, _ := h.Sum(1)
		if len(sum.Tensors) != 1 || sum.Counts["w"] != 1 {
			t.Fatalf("%s: %d sums, counts %v", what, len(sum.Tensors), sum.Counts)
		}
		if got := f32(t, sum.Tensors[0]); !slices.Equal(got, x) {
			t.Errorf("%s: the sum differs from the update", what)
		}
	}

	h, _ := New()
	c, _ := serve(t, h)
	if err := send(c); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "some MB/s") {
		t.Fatalf("a floatcm update of 2 MiB, default limits: %v", err)
	}
	if sum, _ := h.Sum(1); len(sum.Tensors) != 0 || h.Stats().OversizedUpdates != 1 {
		t.Errorf("after the refusal: %d sums, %d refused", len(sum.Tensors), h.Stats().OversizedUpdates)
	}

	h2, err := New(WithUploadLimits(codec.Limits{MaxSlowDecoded: 4 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "journal")
	if _, err := h2.openJournal(path, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h2.journal.close() })
	c2, _ := serve(t, h2)
	if err := send(c2); err != nil {
		t.Fatalf("the same update, limit raised to 4 MiB: %v", err)
	}
	sumIs(h2, "counted")

	h3, _ := New()
	n, err := h3.openJournal(path, 1)
	if err != nil || n != 1 {
		t.Fatalf("the journal replayed by a hub with the default limits: %d updates, %v", n, err)
	}
	t.Cleanup(func() { h3.journal.close() })
	sumIs(h3, "replayed")
}

// TestUploadNonFinite: an update that would add a NaN or an infinity into
// the round's sum, and a weight that is a NaN, an infinity or negative,
// are refused with InvalidArgument before any of them is added: the sum
// of the update counted before stays as it was (one NaN would make it NaN
// for good), and the round goes on.
func TestUploadNonFinite(t *testing.T) {
	b := budget.New(1 << 20)
	h, _ := New(WithBudget(b))
	c, _ := serve(t, h)
	ctx := context.Background()
	good := codec.FromFloat32("w", []float32{1, 2, 3, 4}, 4)
	if err := Upload(ctx, c, gradient.NewOutbox(nil), UploadRequest{Round: 1, Peer: "a"}, []*codec.Tensor{good}); err != nil {
		t.Fatal(err)
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	nan := float32(math.NaN())
	for _, c2 := range []struct {
		name   string
		values []float32
		weight float32
	}{
		{"nan", []float32{1, nan, 3, 4}, 1},
		{"inf", []float32{1, 2, float32(math.Inf(-1)), 4}, 1},
		{"nan weight", []float32{1, 2, 3, 4}, nan},
		{"inf weight", []float32{1, 2, 3, 4}, float32(math.Inf(1))},
		{"negative weight", []float32{1, 2, 3, 4}, -1},
		{"past float32", []float32{1, 2, 3e38, 4}, 2},
		{"nan, new tensor", []float32{1, nan, 3, 4}, 1},
	} {
		name := "w"
		if strings.HasSuffix(c2.name, "new tensor") {
			name = "z" // its sum, made for the update, goes again with it
		}
		frame, err := enc.AppendTensor(nil, codec.FromFloat32(name, c2.values, 4), codec.MustParseRecipe("*:huff0"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Upload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&hubpb.UploadMessage{Round: 1, Peer: "b", Weight: c2.weight, Frame: frame})
		if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v", c2.name, err)
		}
	}
	if err := Upload(ctx, c, gradient.NewOutbox(nil), UploadRequest{Round: 1, Peer: "b", Weight: float32(math.Inf(1))}, []*codec.Tensor{good}); err == nil || status.Code(err) != codes.Unknown {
		t.Errorf("Upload with an infinite weight: %v, want refused before it is sent", err)
	}
	if err := Upload(ctx, c, gradient.NewOutbox(nil), UploadRequest{Round: 1, Peer: "b", Weight: 3}, []*codec.Tensor{good}); err != nil {
		t.Fatal(err)
	}
	sum, _ := h.Sum(1)
	if len(sum.Tensors) != 1 {
		t.Fatalf("the round holds %d sums (%v), want 1", len(sum.Tensors), sum.Counts)
	}
	if got := f32(t, sum.Tensors[0]); !slices.Equal(got, []float32{4, 8, 12, 16}) || sum.Counts["w"] != 2 || sum.Weights["w"] != 4 {
		t.Errorf("the round's sum %v, counts %v, weights %v; want [4 8 12 16], 2 updates of weight 4", got, sum.Counts, sum.Weights)
	}
	if n := h.Stats().MalformedUpdates; n != 7 {
		t.Errorf("%d updates counted as malformed, want 7", n)
	}
	if st := b.Stats(); st.InUse != 16 {
		t.Errorf("%d bytes charged, want the one sum's 16", st.InUse)
	}
}
