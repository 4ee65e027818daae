package hub

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// fuzzHub is a hub that sends whatever chunks it is given, ignoring the
// request and the credit.
type fuzzHub struct {
	hubpb.UnimplementedHubServer
	mu     sync.Mutex
	chunks [][]byte
}

func (f *fuzzHub) Fetch(st hubpb.Hub_FetchServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	f.mu.Lock()
	chunks := f.chunks
	f.mu.Unlock()
	for i, c := range chunks {
		if err := st.Send(&hubpb.FetchChunk{Seq: uint64(i + 1), Version: 1, Frames: c, Last: i == len(chunks)-1}); err != nil {
			return err
		}
	}
	return nil
}

// FuzzFetch gives the client's Fetch, FetchChunks and Fetch with a base
// chunks of arbitrary bytes: an error, never a panic or an allocation
// beyond the limits.
func FuzzFetch(f *testing.F) {
	h, _ := New(WithChunkSize(4 << 10))
	m := model(6, 51)
	for _, x := range m {
		x.Data = x.Data[:min(len(x.Data), 8<<10)]
		x.Shape = []int64{int64(len(x.Data) / 4)}
	}
	h.Publish(1, m)
	h.Publish(2, evolve(m[:3], 52, func(int) bool { return true })) // deltas in exponent order
	for _, it := range h.plan(m) {
		b, err := h.frames(nil, h.versions[1], &it, nil, false, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(1))
	}
	v2 := h.versions[2]
	for _, it := range h.plan(v2.tensors) {
		b, _ := h.frames(nil, v2, &it, h.versions[1], false, DeltaCoding)
		f.Add(b, uint8(2))
	}
	f.Add([]byte{}, uint8(0))

	fh := &fuzzHub{}
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, fh)
	c := hubpb.NewHubClient(grpctest.Serve(f, s))
	lim := codec.Limits{MaxTensorSize: 1 << 20, MaxDecodedSize: 1 << 20, MaxFrameSize: 1 << 20}
	base := codec.FromFloat32("layer000.weight", make([]float32, 2048), 2048)
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		// cut splits data into two chunks.
		var chunks [][]byte
		if k := int(cut); k > 0 && k < len(data) {
			chunks = [][]byte{data[:k], data[k:]}
		} else {
			chunks = [][]byte{data}
		}
		fh.mu.Lock()
		fh.chunks = chunks
		fh.mu.Unlock()
		ctx := context.Background()
		drop := func(*codec.Tensor) error { return nil }
		Fetch(ctx, c, Request{Limits: lim}, drop)
		FetchChunks(ctx, c, Request{Limits: lim}, drop)
		FetchChunks(ctx, c, Request{Limits: lim, Version: 1, ResumeAfter: 1}, drop)
		Fetch(ctx, c, Request{Limits: lim, Base: 1, BaseTensor: func(string) *codec.Tensor { return base }}, drop)
	})
}

// FuzzJournalReplay: a journal of any bytes replays its whole, valid
// records, or fails with an error, never a panic; a torn end is cut.
func FuzzJournalReplay(f *testing.F) {
	dir := f.TempDir()
	m := model(2, 1)
	h, _ := New()
	path := filepath.Join(dir, "seed")
	if _, err := h.openJournal(path, 1); err != nil {
		f.Fatal(err)
	}
	spec, _ := gradient.Parse("topk(0.1)")
	ob := gradient.NewOutbox(nil)
	for _, x := range m {
		frame, err := ob.Append(nil, x, spec, 0)
		if err != nil {
			f.Fatal(err)
		}
		h.journal.record(&hubpb.UploadMessage{Round: 1, Weight: 1, Frame: frame})
	}
	h.closeJournalFile()
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "j")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		h, _ := New()
		n, err := h.openJournal(p, 1)
		h.closeJournalFile()
		if err == nil {
			st, _ := os.Stat(p)
			if st.Size() > int64(len(b)) || n < 0 {
				t.Fatalf("replayed %d, file %d bytes from %d", n, st.Size(), len(b))
			}
		}
	})
}
