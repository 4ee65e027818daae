// Package connlimit bounds the connections a listener hands out: in all,
// and from one IP address, so that one peer cannot take a server's file
// descriptors and memory with connections that each stay within the
// per-connection limits.
package connlimit

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
)

// Listener closes, as soon as it accepts them, the connections over the
// limit of all peers or of one peer's IP address; a connection it hands
// out gives its place back when closed.
type Listener struct {
	net.Listener
	max, perPeer int
	log          *slog.Logger
	refused      atomic.Int64

	mu    sync.Mutex
	total int
	peers map[string]int
}

// New returns ln limited to max connections open at once, perPeer from
// one IP address (both at least 1). Refusals are logged to log (nil:
// none) at warning level, the 1st, 2nd, 4th, 8th... only.
func New(ln net.Listener, max, perPeer int, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: ln, max: max, perPeer: perPeer, log: log, peers: map[string]int{}}
}

// Refused returns the connections closed for the limits so far.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Accept returns the next connection within the limits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := peerIP(c.RemoteAddr())
		if l.take(ip) {
			return &conn{Conn: c, l: l, ip: ip}, nil
		}
		if n := l.refused.Add(1); n&(n-1) == 0 {
			l.log.Warn("connection refused: too many open", "remote", c.RemoteAddr().String(), "max", l.max, "per-peer", l.perPeer, "refused", n)
		}
		c.Close()
	}
}

func (l *Listener) take(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max || l.peers[ip] >= l.perPeer {
		return false
	}
	l.total++
	l.peers[ip]++
	return true
}

func (l *Listener) give(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.peers[ip]--; l.peers[ip] <= 0 {
		delete(l.peers, ip)
	}
}

func peerIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn gives its place back to its Listener when closed.
type conn struct {
	net.Conn
	l    *Listener
	ip   string
	once sync.Once
}

// CloseWrite half-closes the connection where it can (TCP), so that a
// forwarded half-close passes through.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *conn) Close() error {
	c.once.Do(func() { c.l.give(c.ip) })
	return c.Conn.Close()
}
