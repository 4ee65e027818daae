//go:build !linux

package netns

import "net"

// Listen is not supported outside Linux.
func (p *Pair) Listen(port int) (net.Listener, error) { return nil, ErrUnsupported }

// Dial is not supported outside Linux.
func (p *Pair) Dial(addr string) (net.Conn, error) { return nil, ErrUnsupported }
