package hub

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// restartable serves a Hub on a bufconn listener that can be replaced:
// the client's dialer always dials the current one.
type restartable struct {
	mu    sync.Mutex
	ln    *bufconn.Listener
	srv   *grpc.Server
	conns []net.Conn // client ends dialed so far
}

func (r *restartable) start(h *Hub) {
	ln := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, NewServer(h))
	go s.Serve(ln)
	r.mu.Lock()
	r.ln, r.srv = ln, s
	r.mu.Unlock()
}

func (r *restartable) stop() {
	r.mu.Lock()
	s := r.srv
	r.mu.Unlock()
	s.Stop()
}

// cut closes the client ends of every connection so far.
func (r *restartable) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

func (r *restartable) client(t *testing.T) hubpb.HubClient {
	conn, err := grpc.NewClient("passthrough:///hub", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			r.mu.Lock()
			ln := r.ln
			r.mu.Unlock()
			c, err := ln.DialContext(ctx)
			if err == nil {
				r.mu.Lock()
				r.conns = append(r.conns, c)
				r.mu.Unlock()
			}
			return c, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return hubpb.NewHubClient(conn)
}

// fetchChecked fetches version 1 of m with retries, calling mid once after
// half the tensors, and checks every tensor bit for bit.
func fetchChecked(t *testing.T, c hubpb.HubClient, m []*codec.Tensor, mid func()) Result {
	t.Helper()
	i := 0
	res, err := Fetch(context.Background(), c, Request{Version: 1, Credit: 4, Retries: 3, RetryWait: 10 * time.Millisecond},
		func(x *codec.Tensor) error {
			if x.Name != m[i].Name || !bytes.Equal(x.Data, m[i].Data) {
				t.Errorf("tensor %d (%q) differs", i, m[i].Name)
			}
			if i++; i == len(m)/2 {
				mid()
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(m) {
		t.Fatalf("%d of %d tensors", i, len(m))
	}
	return res
}

// TestFetchResumesAfterCut cuts the client's connection in the middle of a
// fetch: it resumes after the last chunk it received, the model arrives
// bit for bit, and no chunk comes twice but those in flight.
func TestFetchResumesAfterCut(t *testing.T) {
	h, _ := New(WithChunkSize(16 << 10))
	m := model(40, 9)
	h.Publish(1, m)
	var r restartable
	r.start(h)
	defer r.stop()
	res := fetchChecked(t, r.client(t), m, r.cut)
	plan := int64(len(h.plan(m)))
	sent := h.Stats().ChunksSent
	t.Logf("%d chunks in the plan, %d sent, %+v", plan, sent, res)
	if res.Resumed != 1 || sent > plan+4 {
		t.Fatalf("resumed %d times, %d chunks sent for %d (credit 4)", res.Resumed, sent, plan)
	}
}

// TestFetchSurvivesHubRestart stops the hub in the middle of a fetch and
// starts another with the same version: the client resumes on it.
func TestFetchSurvivesHubRestart(t *testing.T) {
	m := model(40, 10)
	h1, _ := New(WithChunkSize(16 << 10))
	h1.Publish(1, m)
	h2, _ := New(WithChunkSize(16 << 10))
	h2.Publish(1, m)
	var r restartable
	r.start(h1)
	res := fetchChecked(t, r.client(t), m, func() {
		r.stop()
		r.start(h2)
	})
	defer r.stop()
	if res.Resumed < 1 || h2.Stats().Fetches < 1 {
		t.Fatalf("%+v; the second hub served %d fetches", res, h2.Stats().Fetches)
	}
}

// TestStalledClientHoldsMemoryFlat: a client that stops reading after its
// first chunks holds the hub at its credit: once the hub says it waits
// for credit (testHookNoCredit), it has sent the credit's chunks and no
// more, and its heap (measured with runtime/metrics) stays flat while it
// waits; the fetch then completes.
func TestStalledClientHoldsMemoryFlat(t *testing.T) {
	waiting := make(chan struct{}, 64)
	testHookNoCredit = func() {
		select {
		case waiting <- struct{}{}:
		default: // nobody waits for this one
		}
	}
	t.Cleanup(func() { testHookNoCredit = nil }) // after the server stops
	h, _ := New(WithChunkSize(64<<10), WithCacheBytes(1<<20))
	m := model(120, 12) // about 3.5 MiB
	h.Publish(1, m)
	c, _ := serve(t, h)
	st := openFetch(t, c, 2)
	heap := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	<-waiting
	h0, sent0 := heap(), h.Stats().ChunksSent
	peak := h0
	for range 10 {
		peak = max(peak, heap())
	}
	if sent := h.Stats().ChunksSent; sent != sent0 || sent != 2 {
		t.Fatalf("%d chunks sent while the client read nothing (credit 2)", sent)
	}
	t.Logf("heap %d KiB when the hub waits for credit, at most %d KiB after", h0>>10, peak>>10)
	if peak > h0+(1<<20) {
		t.Errorf("the heap grew from %d to %d bytes while the client stalled", h0, peak)
	}
	// The client reads again: the rest comes.
	n := 0
	for {
		ch, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		n++
		if ch.Last {
			break
		}
		st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: 1}})
	}
	if plan := len(h.plan(m)); n != plan {
		t.Fatalf("%d chunks, want %d", n, plan)
	}
}
