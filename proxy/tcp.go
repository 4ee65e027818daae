package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/tensorpress/tensorpress/transport"
)

// forwardTCP carries c to the next hop: wrapped in tensorpress frames
// toward the remote proxy (local side), or unwrapped toward the server
// (remote side). With TLS, the hop's TLS is under the frames, and the
// remote side dials the server only once the local proxy's handshake
// succeeded.
func (s *Side) forwardTCP(c net.Conn) error {
	defer c.Close()
	in, err := s.acceptTLS(c)
	if err != nil {
		return err
	}
	var wrapped *transport.Conn
	if s.remote {
		if in, err = s.firstBytes(in); err != nil {
			return err
		}
		if wrapped, err = transport.Wrap(in); err != nil {
			return err
		}
		defer wrapped.Close()
		in = wrapped
	}
	d, err := (&net.Dialer{Timeout: s.c.limits.HandshakeTimeout}).Dial("tcp", s.to)
	if err != nil {
		return err
	}
	defer d.Close()
	out := net.Conn(d) // toward the server
	if !s.remote {
		if out, err = s.dialTLS(d); err != nil {
			return err
		}
		if wrapped, err = transport.Wrap(out); err != nil {
			return err
		}
		defer wrapped.Close()
		out = wrapped
	}
	return s.pipe(in, out, c, d)
}

// firstBytes waits for the local proxy's first bytes (its hello) within
// the handshake timeout, and returns c with them to be read again.
func (s *Side) firstBytes(c net.Conn) (net.Conn, error) {
	buf := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(s.c.limits.HandshakeTimeout))
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, fmt.Errorf("proxy: no hello from %s within the handshake timeout: %w", c.RemoteAddr(), err)
	}
	c.SetReadDeadline(time.Time{})
	return &replayConn{Conn: c, pre: buf}, nil
}

// acceptTLS runs the TLS handshake of an accepted connection where the
// listener requires TLS.
func (s *Side) acceptTLS(c net.Conn) (net.Conn, error) {
	tc, err := s.c.listenAuth.ServerTLSConfig()
	if err != nil {
		return nil, err
	}
	return s.handshakeTLS(c, tc, true)
}

// dialTLS runs the TLS handshake toward the remote proxy where the dial
// asks for TLS, checking its certificate for the host of s.to unless a
// server name is configured.
func (s *Side) dialTLS(d net.Conn) (net.Conn, error) {
	tc, err := s.c.dialAuth.ClientTLSConfig()
	if err != nil || tc == nil {
		return d, err
	}
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(s.to)
	}
	return s.handshakeTLS(d, tc, false)
}

// pipe copies in to out and out to in until both end, half-closes
// passing through; the raw connections c and d are closed when neither
// moved a byte for the idle timeout.
func (s *Side) pipe(in, out, c, d net.Conn) error {
	w := newWatchdog(s.c.limits.IdleTimeout, c, d)
	defer w.stop()
	errc := make(chan error, 2)
	copy := func(dst, src net.Conn) {
		_, err := io.Copy(dst, w.reader(src))
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		errc <- err
	}
	go copy(out, in)
	go copy(in, out)
	err := errors.Join(<-errc, <-errc)
	linger(c, d)
	return err
}

// lingerTimeout bounds how long linger waits for a peer's end.
const lingerTimeout = 2 * time.Second

// linger ends the raw connections as TCP should be ended when a stream
// stopped reading before its peer's last bytes (the hop's TLS close_notify
// after the frames' end): its write side shut first, then what is still
// coming read and dropped until the peer's end, so that the close that
// follows sends no reset. A reset would make the peer's kernel drop what it
// had received and not yet read: the end of the other direction's data.
func linger(conns ...net.Conn) {
	for _, c := range conns {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.Copy(io.Discard, c)
	}
}

var _ interface{ CloseWrite() error } = (*tls.Conn)(nil)
