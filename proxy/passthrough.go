package proxy

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorpress/tensorpress/internal/loopback"
)

// RawMagic opens a connection that a local proxy passes through to a
// remote proxy on the same host (see FORMAT.md, "The proxy hop"): where no
// coding pays for itself, the application's connection (its HTTP/2, with
// every call, header and deadline in it) goes on as it is after these 8
// bytes, and the remote proxy passes the rest on to the server. It can
// begin neither an HTTP/2 connection (its preface is "PRI * ...") nor a
// TLS one (0x16). A remote proxy honours it from a loopback peer only.
const RawMagic = "TPRAW/1\n"

// forwardRaw passes c through to the connection d (closing both), after
// prefix (RawMagic on the local side, nothing on the remote one), both
// ways, half-closes included; the bytes written to and read from d are
// added to out and in (either may be nil). Neither side moving a byte for
// idle (0: no limit) closes both.
func forwardRaw(c, d net.Conn, prefix string, idle time.Duration, out, in *atomic.Int64) error {
	defer c.Close()
	defer d.Close()
	if prefix != "" {
		if _, err := io.WriteString(d, prefix); err != nil {
			return err
		}
	}
	w := newWatchdog(idle, c, d)
	defer w.stop()
	errc := make(chan error, 2)
	pipe := func(dst, src net.Conn, n *atomic.Int64) {
		err := copyCounting(dst, w.reader(src), n)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		errc <- err
	}
	go pipe(d, c, out)
	go pipe(c, d, in)
	return errors.Join(<-errc, <-errc)
}

// copyCounting copies src to dst until src ends, adding what it copies to
// n (if not nil) every few MiB at most.
func copyCounting(dst io.Writer, src io.Reader, n *atomic.Int64) error {
	if n == nil {
		_, err := io.CopyBuffer(dst, src, make([]byte, 32<<10))
		return err
	}
	buf := make([]byte, 32<<10)
	for {
		k, err := io.CopyBuffer(dst, io.LimitReader(src, 4<<20), buf)
		n.Add(k)
		if err != nil {
			return err
		}
		if k < 4<<20 {
			return nil // src ended
		}
	}
}

// sniffListener is the remote proxy's listener: a connection from a
// loopback peer that opens with RawMagic is passed through to the server
// (raw); any other goes to the gRPC server through Accept, the bytes read
// to tell replayed. A connection that does not send its first bytes
// within the handshake timeout is closed; one from another host that
// opens with RawMagic is closed.
type sniffListener struct {
	net.Listener
	to        string
	handshake time.Duration
	idle      time.Duration
	log       *slog.Logger
	conns     chan net.Conn
	done      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup

	mu  sync.Mutex
	raw map[net.Conn]bool // being sniffed or passed through
	err error
}

func newSniffListener(ln net.Listener, to string, lim Limits, log *slog.Logger) *sniffListener {
	l := &sniffListener{
		Listener: ln, to: to, handshake: lim.HandshakeTimeout, idle: lim.IdleTimeout, log: log,
		conns: make(chan net.Conn), done: make(chan struct{}), raw: map[net.Conn]bool{},
	}
	go l.accept()
	return l
}

func (l *sniffListener) accept() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.sniff(c)
		}()
	}
}

// sniff reads c's first bytes (RawMagic's length at most) within the
// handshake timeout and passes c through or on to Accept.
func (l *sniffListener) sniff(c net.Conn) {
	l.hold(c, true) // closeRaw cuts it while it is sniffed or passed through
	defer l.hold(c, false)
	buf := make([]byte, len(RawMagic))
	c.SetReadDeadline(time.Now().Add(l.handshake))
	n, err := io.ReadAtLeast(c, buf, 1)
	if err == nil && n < len(buf) && bytes.HasPrefix([]byte(RawMagic), buf[:n]) {
		var k int
		k, err = io.ReadFull(c, buf[n:])
		n += k
	}
	c.SetReadDeadline(time.Time{})
	switch {
	case err != nil && n == 0:
		c.Close() // nothing within the handshake timeout, or gone
		return
	case err != nil && bytes.HasPrefix([]byte(RawMagic), buf[:n]):
		c.Close() // part of the marker, then nothing
		return
	case n == len(buf) && string(buf) == RawMagic:
		l.passThrough(c)
		return
	}
	select {
	case l.conns <- &replayConn{Conn: c, pre: buf[:n]}:
	case <-l.done:
		c.Close()
	}
}

func (l *sniffListener) passThrough(c net.Conn) {
	if !loopback.Addr(c.RemoteAddr()) {
		l.log.Warn("pass-through refused: the peer is not on this host", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	d, err := net.DialTimeout("tcp", l.to, l.handshake)
	if err != nil {
		l.log.Warn("connection not forwarded: the next hop is down", "remote", c.RemoteAddr().String(), "to", l.to, "err", err)
		c.Close()
		return
	}
	forwardRaw(c, d, "", l.idle, nil, nil)
}

func (l *sniffListener) hold(c net.Conn, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.raw[c] = true
	} else {
		delete(l.raw, c)
	}
}

func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections passed through stay until closeRaw.
func (l *sniffListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// closeRaw closes the connections passed through and those still being
// sniffed, and waits for them.
func (l *sniffListener) closeRaw() {
	l.mu.Lock()
	for c := range l.raw {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// replayConn is a connection whose first bytes, already read, are read
// again first.
type replayConn struct {
	net.Conn
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection where it can (TCP, TLS).
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
