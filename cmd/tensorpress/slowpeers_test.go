package main

import (
	"io"
	"net"
	"testing"
	"time"
)

// slowPeers opens n connections to addr, every other one sending half
// (the first bytes of something longer that never comes), and one more
// that sends the HTTP/2 client preface and an empty SETTINGS frame and
// then nothing: what an attacker who holds a server's connections does.
// They are closed when the test ends.
func slowPeers(t *testing.T, addr string, n int, half string) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n + 1 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		msg := ""
		switch {
		case i == n:
			msg = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
		case i%2 == 1:
			msg = half
		}
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
	}
	return conns
}

// waitClosed waits until the server has closed every one of conns, and
// fails the test for one still open after two minutes (a guard against a
// hang, not a timing).
func waitClosed(t *testing.T, conns []net.Conn) {
	t.Helper()
	closed := make(chan int, len(conns))
	for i, c := range conns {
		go func() {
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			_, err := io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				i = -1 - i
			}
			closed <- i
		}()
	}
	for range conns {
		if i := <-closed; i < 0 {
			t.Fatalf("connection %d is still open", -1-i)
		}
	}
}
