package connlimit

import (
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConnLimits: connections over the per-peer limit, then over the
// limit of all, are closed as soon as they are accepted; a closed one
// gives its place back.
func TestConnLimits(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := New(inner, 3, 2, nil)
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := dial(), dial()
	first, second := <-accepted, <-accepted
	over := dial()
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a third connection from one peer: %v, want it closed", err)
	}
	first.Close()
	c := dial() // the first's place
	third := <-accepted
	for _, x := range []net.Conn{a, b, over, c, second, third} {
		x.Close()
	}
	if ln.Refused() != 1 {
		t.Errorf("refused %d, want 1", ln.Refused())
	}
}
