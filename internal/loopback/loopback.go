// Package loopback tells whether a connection stays on this machine: both
// ends on loopback addresses (TCP or UDP) or a Unix socket. Over such a
// link bytes are a memory copy on shared cores, so the transport trusts
// it (no payload CRC on raw frames) and the autotuner takes its bandwidth
// as unlimited.
package loopback

import "net"

// Conn reports whether both ends of c are loopback addresses.
func Conn(c net.Conn) bool {
	return Addr(c.LocalAddr()) && Addr(c.RemoteAddr())
}

// Addr reports whether a is a loopback address: a TCP or UDP address on
// a loopback IP, or any Unix socket address.
func Addr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	return false
}
