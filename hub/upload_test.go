package hub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/testvectors"
)

func grads(seed uint64) []*codec.Tensor {
	var ts []*codec.Tensor
	for i := range 5 {
		g := testvectors.Normal(fmt.Sprintf("layer%d.grad", i), 4096, 0.01, seed*10+uint64(i))
		g.Shape = []int64{64, 64}
		ts = append(ts, g)
	}
	return ts
}

func f32(t *testing.T, x *codec.Tensor) []float32 {
	t.Helper()
	v, err := codec.View[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUploadSums: three clients upload their updates for a round at once,
// with weights 1, 2 and 3; the hub's sum is the weighted sum of what each
// sent (the gradient less the residual each keeps).
func TestUploadSums(t *testing.T) {
	h, _ := New()
	c, _ := serve(t, h)
	spec, err := gradient.Parse("topk(0.1)")
	if err != nil {
		t.Fatal(err)
	}
	type client struct {
		ob *gradient.Outbox
		g  []*codec.Tensor
	}
	cs := make([]client, 3)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range cs {
		cs[i] = client{ob: gradient.NewOutbox(nil), g: grads(uint64(i + 1))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- Upload(context.Background(), c, cs[i].ob, UploadRequest{Spec: spec, Round: 4, Weight: float32(i + 1), Peer: fmt.Sprint("client", i)}, cs[i].g)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sum, ok := h.Sum(4)
	if !ok || len(sum.Tensors) != 5 {
		t.Fatalf("round 4: %v, %d tensors", ok, len(sum.Tensors))
	}
	for k, s := range sum.Tensors {
		if sum.Counts[s.Name] != 3 || sum.Weights[s.Name] != 6 {
			t.Fatalf("%q: %d updates, weight %v", s.Name, sum.Counts[s.Name], sum.Weights[s.Name])
		}
		got := f32(t, s)
		for j := range got {
			var want float32
			for i, cl := range cs {
				st := cl.ob.Memory().Get(s.Name)
				if st.Step() != 1 {
					t.Fatalf("client %d, %q: %d updates committed", i, s.Name, st.Step())
				}
				want += float32(i+1) * (f32(t, cl.g[k])[j] - st.Residual()[j])
			}
			if d := math.Abs(float64(got[j] - want)); d > 1e-6 {
				t.Fatalf("%q[%d]: sum %g, want %g", s.Name, j, got[j], want)
			}
		}
	}
}

// TestUploadInterrupted breaks an upload after two updates: those two are
// counted and committed, the rest are not counted and stay in the
// residual, and the next upload carries them.
func TestUploadInterrupted(t *testing.T) {
	h, _ := New()
	ln := bufconn.Listen(1 << 20)
	var mu sync.Mutex
	breakAfter := 2
	s := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		mu.Lock()
		n := breakAfter
		mu.Unlock()
		if n > 0 {
			return handler(srv, &breakingStream{ServerStream: ss, left: n})
		}
		return handler(srv, ss)
	}))
	hubpb.RegisterHubServer(s, NewServer(h))
	go s.Serve(ln)
	defer s.Stop()
	conn, err := grpc.NewClient("passthrough:///hub",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return ln.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := hubpb.NewHubClient(conn)
	spec, _ := gradient.Parse("topk(0.1)")
	ob := gradient.NewOutbox(nil)
	g1 := grads(1)
	if err := Upload(context.Background(), c, ob, UploadRequest{Spec: spec, Round: 1, Weight: 1, Peer: "c"}, g1); err == nil {
		t.Fatal("a broken upload returned no error")
	}
	sum, _ := h.Sum(1)
	if len(sum.Tensors) != 2 {
		t.Fatalf("%d tensors counted, want 2", len(sum.Tensors))
	}
	for i, g := range g1 {
		st := ob.Memory().Get(g.Name)
		if i < 2 && st.Step() != 1 || i >= 2 && (st.Step() != 0 || !slices.EqualFunc(st.Residual(), f32(t, g), func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })) {
			t.Fatalf("%q: step %d after the break", g.Name, st.Step())
		}
	}
	// The next round's upload, unbroken, carries what was not counted.
	mu.Lock()
	breakAfter = 0
	mu.Unlock()
	g2 := grads(2)
	if err := Upload(context.Background(), c, ob, UploadRequest{Spec: spec, Round: 2, Weight: 1, Peer: "c"}, g2); err != nil {
		t.Fatal(err)
	}
	sum, _ = h.Sum(2)
	for k := 2; k < 5; k++ {
		got, res := f32(t, sum.Tensors[k]), ob.Memory().Get(g2[k].Name).Residual()
		a, b := f32(t, g1[k]), f32(t, g2[k])
		for j := range got {
			if got[j]+res[j] != a[j]+b[j] {
				t.Fatalf("%q[%d]: counted %g + residual %g, sent %g", g2[k].Name, j, got[j], res[j], a[j]+b[j])
			}
		}
	}
}

// breakingStream fails its RecvMsg after left messages: the connection
// lost in the middle of an upload.
type breakingStream struct {
	grpc.ServerStream
	left int
}

func (b *breakingStream) RecvMsg(m any) error {
	if b.left == 0 {
		return errors.New("connection lost")
	}
	b.left--
	return b.ServerStream.RecvMsg(m)
}

// TestUploadThroughProfile: a profile picks each update's compressor: the
// tensors its TopK rule matches go sparse with error feedback, the rest
// dense; the hub's sum is exactly what was sent.
func TestUploadThroughProfile(t *testing.T) {
	p, err := profile.Load([]byte(`version: 1
rules:
  - match: {name: ["layer[0-2].grad"], dtype: f32}
    recipes: ["*:zstd(1)"]
    gradient: ["topk(0.05)"]
  - match: {}
    recipes: ["*:zstd(1)"]
`))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := New()
	c, _ := serve(t, h)
	ob := gradient.NewOutbox(nil)
	g := grads(7)
	if err := Upload(context.Background(), c, ob, UploadRequest{Profile: p, Round: 1, Peer: "c"}, g); err != nil {
		t.Fatal(err)
	}
	sum, ok := h.Sum(1)
	if !ok || len(sum.Tensors) != len(g) {
		t.Fatalf("%v, %d tensors", ok, len(sum.Tensors))
	}
	for k, s := range sum.Tensors {
		got, sent := f32(t, s), f32(t, g[k])
		st := ob.Memory().Get(s.Name)
		sparse := k < 3
		nonzero := 0
		for j := range got {
			want := sent[j]
			if sparse {
				want -= st.Residual()[j]
			}
			if got[j] != want {
				t.Fatalf("%q[%d]: sum %g, want %g", s.Name, j, got[j], want)
			}
			if got[j] != 0 {
				nonzero++
			}
		}
		if sparse != (nonzero < len(got)/10) {
			t.Fatalf("%q: %d of %d elements sent", s.Name, nonzero, len(got))
		}
	}
}
