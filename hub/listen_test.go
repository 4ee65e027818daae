package hub

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// farListener stands for a listener off loopback (tests listen on
// loopback only): it accepts nothing.
type farListener struct{ closed chan struct{} }

func (l farListener) Accept() (net.Conn, error) { <-l.closed; return nil, net.ErrClosed }
func (l farListener) Close() error              { close(l.closed); return nil }
func (l farListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 7000}
}

// TestServeOpenListener: Serve refuses a listener off loopback without
// authentication and closes it; Insecure lets it serve.
func TestServeOpenListener(t *testing.T) {
	h, _ := New()
	ln := farListener{make(chan struct{})}
	if err := Serve(context.Background(), ln, h, ServeConfig{}); !errors.Is(err, auth.ErrOpenListener) {
		t.Fatalf("off loopback, no authentication: %v", err)
	}
	select {
	case <-ln.closed:
	default:
		t.Fatal("the listener was left open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln = farListener{make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, ServeConfig{Auth: auth.Config{Insecure: true}}) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("--insecure: %v", err)
	}
}

// TestServeConnLimits: a peer's connections past MaxConnsPerPeer are
// closed as soon as they are accepted, while the first ones are served.
// (That a closed connection gives its place back is connlimit's test.)
func TestServeConnLimits(t *testing.T) {
	h, _ := New()
	if err := h.Publish(1, model(2, 1)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := DefaultLimits()
	l.MaxConnsPerPeer = 2
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, ServeConfig{Limits: l}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	held, err := net.Dial("tcp", ln.Addr().String()) // one place taken
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// The second place: served.
	if _, err := Fetch(ctx, hubpb.NewHubClient(cc), Request{}, func(*codec.Tensor) error { return nil }); err != nil {
		t.Fatal(err)
	}
	over, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a third connection from one peer: %v, want it closed", err)
	}
}

// TestServeDrain: a fetch served, then a fetch that stops reading while
// the context ends: Serve gives it the drain, cuts it, and returns nil;
// the limits are the hub's (a message over MaxMessage is refused).
func TestServeDrain(t *testing.T) {
	h, _ := New(WithChunkSize(16 << 10))
	if err := h.Publish(1, model(10, 5)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := DefaultLimits()
	l.MaxMessage = 4 << 10
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, ServeConfig{Limits: l, Drain: 100 * time.Millisecond}) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := hubpb.NewHubClient(cc)
	if _, err := Fetch(ctx, c, Request{}, func(*codec.Tensor) error { return nil }); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8<<10)
	st, err := c.Upload(ctx)
	if err == nil {
		st.Send(&hubpb.UploadMessage{Round: 1, Frame: big})
		_, err = st.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over MaxMessage: %v", err)
	}
	held := openFetch(t, c, 1)
	if _, err := held.Recv(); err != nil { // one chunk, then no more credit
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = held.Recv(); err != nil {
			break
		}
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the held fetch after the drain: %v", err)
	}
}
