package loopback

import (
	"net"
	"testing"
)

func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		a    net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 1}, true},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1}, false},
		{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 1}, true},
		{&net.UDPAddr{IP: net.IPv4(192, 168, 0, 1), Port: 1}, false},
		{&net.UnixAddr{Name: "/tmp/x", Net: "unix"}, true},
		{nil, false},
	} {
		if got := Addr(tc.a); got != tc.want {
			t.Errorf("Addr(%v) = %v, want %v", tc.a, got, tc.want)
		}
	}
}

func TestConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Conn(a) {
		t.Error("net.Pipe is not a loopback connection")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !Conn(c) {
		t.Errorf("%v -> %v is loopback", c.LocalAddr(), c.RemoteAddr())
	}
}
