package hub

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// TestFetchRetriesFailedReconnects stops the hub in the middle of a fetch
// and starts another only after the client has failed to reconnect
// twice: the fetch goes on through the failures and finishes, bit for
// bit.
func TestFetchRetriesFailedReconnects(t *testing.T) {
	m := model(40, 10)
	h1, _ := New(WithChunkSize(16 << 10))
	h1.Publish(1, m)
	h2, _ := New(WithChunkSize(16 << 10))
	h2.Publish(1, m)
	var r restartable
	r.start(h1)
	defer r.stop()
	c := r.client(t)
	var tries []RetryInfo
	i := 0
	req := Request{Version: 1, Credit: 2, Retries: -1, RetryWait: time.Millisecond, RetryMaxWait: 4 * time.Millisecond,
		OnRetry: func(ri RetryInfo) {
			tries = append(tries, ri)
			if ri.Attempt == 3 {
				r.start(h2) // after two failed reconnects
			}
		}}
	res, err := Fetch(context.Background(), c, req, func(x *codec.Tensor) error {
		if x.Name != m[i].Name || !bytes.Equal(x.Data, m[i].Data) {
			t.Errorf("tensor %d (%q) differs", i, m[i].Name)
		}
		if i++; i == len(m)/2 {
			r.stop()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed %d, %d tries; the first: %+v", res.Resumed, len(tries), tries[0])
	if i != len(m) || len(tries) < 3 || res.Resumed < 1 || h2.Stats().Fetches < 1 {
		t.Fatalf("%d of %d tensors, %d tries, %+v", i, len(m), len(tries), res)
	}
	for _, ri := range tries {
		if ri.Wait > 4*time.Millisecond || ri.Seq == 0 || ri.Err == nil {
			t.Errorf("retry %+v", ri)
		}
	}
}

// TestFetchRetriesEnd: with no hub to come back, the fetch ends after
// Retries failures in a row, saying how many.
func TestFetchRetriesEnd(t *testing.T) {
	h, _ := New(WithChunkSize(16 << 10))
	h.Publish(1, model(40, 10))
	var r restartable
	r.start(h)
	c := r.client(t)
	n, calls := 0, 0
	_, err := Fetch(context.Background(), c, Request{Credit: 2, Retries: 3, RetryWait: time.Millisecond,
		OnRetry: func(RetryInfo) { calls++ }}, func(*codec.Tensor) error {
		if n++; n == 5 {
			r.stop()
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "4 tries in a row failed") || calls != 3 {
		t.Fatalf("%d retries: %v", calls, err)
	}
}

// stallServer opens every fetch and never sends a chunk.
type stallServer struct{ hubpb.UnimplementedHubServer }

func (stallServer) Fetch(st hubpb.Hub_FetchServer) error {
	<-st.Context().Done()
	return st.Context().Err()
}

// TestFetchStall: a hub that sends nothing ends the fetch with
// ErrStalled, whatever the retries.
func TestFetchStall(t *testing.T) {
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, stallServer{})
	c := hubpb.NewHubClient(grpctest.Serve(t, s))
	_, err := FetchChunks(context.Background(), c, Request{Retries: -1, Stall: 20 * time.Millisecond}, func(*codec.Tensor) error { return nil })
	if !errors.Is(err, ErrStalled) || !strings.HasPrefix(err.Error(), "hub: no progress: no chunk for 20ms (after chunk 0") {
		t.Fatalf("%v, want ErrStalled", err)
	}
}

// TestBackoff: each pause is between half and all of RetryWait doubled
// per failure, capped at RetryMaxWait.
func TestBackoff(t *testing.T) {
	c := &chunkReader{wait: 100 * time.Millisecond, maxWait: 5 * time.Second}
	for c.fails = 1; c.fails < 100; c.fails++ {
		w := min(c.maxWait, c.wait<<min(c.fails-1, 20))
		if got := c.backoff(); got < w/2 || got > w {
			t.Fatalf("try %d: %v, want within [%v, %v]", c.fails, got, w/2, w)
		}
	}
}

// TestFetchChunksBase fetches version 2 chunk by chunk against the
// client's copy of version 1, right for most tensors and wrong for two
// (one differs, one is missing): those come out as a *BaseError naming
// them, every other tensor is version 2 bit for bit.
func TestFetchChunksBase(t *testing.T) {
	h, _ := New(WithChunkSize(16 << 10))
	v1 := model(12, 1)
	v2 := evolve(v1, 7, func(i int) bool { return i%2 == 0 })
	h.Publish(1, v1)
	h.Publish(2, v2)
	c, _ := serve(t, h)
	base := map[string]*codec.Tensor{}
	for _, x := range v1 {
		base[x.Name] = x
	}
	wrong := *v1[4] // a large tensor: several chunks
	wrong.Data = slices.Clone(wrong.Data)
	wrong.Data[100] ^= 1
	base[wrong.Name] = &wrong
	delete(base, v1[5].Name)
	got := map[string][]byte{}
	res, err := FetchChunks(context.Background(), c, Request{Version: 2, Base: 1, BaseTensor: func(n string) *codec.Tensor { return base[n] }},
		func(x *codec.Tensor) error {
			got[x.Name] = append(got[x.Name], x.Data...)
			return nil
		})
	var be *BaseError
	if !errors.As(err, &be) || !errors.Is(err, codec.ErrChecksum) || !slices.Equal(be.Names, []string{v1[4].Name, v1[5].Name}) || be.Base != 1 {
		t.Fatalf("%v, want a BaseError naming %q and %q", err, v1[4].Name, v1[5].Name)
	}
	for _, x := range v2 {
		if x.Name == v1[4].Name || x.Name == v1[5].Name {
			continue
		}
		if !bytes.Equal(got[x.Name], x.Data) {
			t.Errorf("%q differs", x.Name)
		}
	}
	if _, ok := got[v1[5].Name]; ok {
		t.Errorf("a delta without its base reached got")
	}
	if res.Deltas != len(v2) || len(res.Digests) != len(v2) {
		t.Errorf("%+v", res)
	}
}
