package drain

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestThenCut: work that ends within the drain is not cut; work that
// does not is cut when the drain is over, and ThenCut waits for it.
func TestThenCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cut := false
		start := time.Now()
		ThenCut(func() { time.Sleep(time.Second) }, 2*time.Second, func() { cut = true })
		if cut || time.Since(start) != time.Second {
			t.Fatalf("cut %v after %v, want the work's own second", cut, time.Since(start))
		}
		release := make(chan struct{})
		start = time.Now()
		ThenCut(func() { <-release }, 2*time.Second, func() { cut = true; close(release) })
		if !cut || time.Since(start) != 2*time.Second {
			t.Fatalf("cut %v after %v, want a cut after the drain", cut, time.Since(start))
		}
	})
}

// TestServe: Serve returns nil once its context ends and the server has
// stopped; the listener is closed.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, grpc.NewServer(), ln, time.Second, nil) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener still accepts")
	}
}

// TestServeError: a listener that fails ends Serve with its error.
func TestServeError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := Serve(context.Background(), grpc.NewServer(), ln, time.Second, nil); err == nil {
		t.Fatal("no error from a closed listener")
	}
}
