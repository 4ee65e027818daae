package transport

import (
	"io"
	"net"
	"testing"
)

// BenchmarkLoopback sends 400 KB writes (a weight tensor) over loopback
// TCP, plain and wrapped (raw frames), to a reader that discards them: the
// cost of the wrapper on the path where nothing can be compressed.
func BenchmarkLoopback(b *testing.B) {
	msg := floats(400<<10, 1)
	for _, wrapped := range []bool{false, true} {
		name := "plain"
		if wrapped {
			name = "wrapped"
		}
		b.Run(name, func(b *testing.B) {
			ta, tb := tcpPair(&testing.T{})
			var a, c net.Conn = ta, tb
			var closeWrite func() error = ta.CloseWrite
			if wrapped {
				ca, cb := pair(&testing.T{}, ta, tb)
				a, c, closeWrite = ca, cb, ca.CloseWrite
			}
			done := make(chan struct{})
			go func() {
				io.Copy(io.Discard, c)
				close(done)
			}()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			closeWrite()
			<-done
			a.Close()
			c.Close()
		})
	}
}
