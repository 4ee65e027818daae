package proxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound the connections a proxy accepts, whichever side and mode.
// DefaultLimits holds the defaults; WithLimits checks each value.
type Limits struct {
	// HandshakeTimeout bounds the time from accepting a connection to
	// knowing what it is: its first bytes, the whole TPRAW/1 marker, the
	// TLS handshake and the HTTP/2 preface and settings. Default 10 s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a gRPC connection without a call for that long
	// (keepalive's MaxConnectionIdle: a GOAWAY first), and a passed-through
	// or TCP-mode connection that moved no byte either way for that long.
	// Default 5 min.
	IdleTimeout time.Duration
	// MaxStreams bounds the concurrent calls on one gRPC connection
	// (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). Default 256.
	MaxStreams uint32
	// MaxConns bounds the connections open at once, all peers together;
	// MaxConnsPerPeer those from one IP address. A connection over either
	// is closed as soon as it is accepted. Defaults 4096 and 256.
	MaxConns, MaxConnsPerPeer int
}

// DefaultLimits returns the limits a proxy has unless WithLimits says
// otherwise: safe for a port on the internet.
func DefaultLimits() Limits {
	return Limits{
		HandshakeTimeout: 10 * time.Second,
		IdleTimeout:      5 * time.Minute,
		MaxStreams:       256,
		MaxConns:         4096,
		MaxConnsPerPeer:  256,
	}
}

func (l Limits) check() error {
	switch {
	case l.HandshakeTimeout <= 0:
		return fmt.Errorf("%w: handshake timeout %v, want more than 0", ErrBadOption, l.HandshakeTimeout)
	case l.IdleTimeout <= 0:
		return fmt.Errorf("%w: idle timeout %v, want more than 0", ErrBadOption, l.IdleTimeout)
	case l.MaxStreams == 0:
		return fmt.Errorf("%w: max streams 0, want at least 1", ErrBadOption)
	case l.MaxConns <= 0 || l.MaxConnsPerPeer <= 0:
		return fmt.Errorf("%w: max connections %d, per peer %d, want at least 1", ErrBadOption, l.MaxConns, l.MaxConnsPerPeer)
	}
	return nil
}

// watchdog closes its connections once no read on them returned a byte
// for idle.
type watchdog struct {
	idle  time.Duration
	last  atomic.Int64 // unix nanoseconds of the last read that returned bytes
	conns []net.Conn
	mu    sync.Mutex
	t     *time.Timer
	done  bool
}

func newWatchdog(idle time.Duration, conns ...net.Conn) *watchdog {
	w := &watchdog{idle: idle, conns: conns}
	if idle > 0 {
		w.last.Store(time.Now().UnixNano())
		w.t = time.AfterFunc(idle, w.check)
	}
	return w
}

func (w *watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if left := w.idle - time.Since(time.Unix(0, w.last.Load())); left > 0 {
		w.t.Reset(left)
		return
	}
	for _, c := range w.conns {
		c.Close()
	}
}

func (w *watchdog) stop() {
	if w.t == nil {
		return
	}
	w.mu.Lock()
	w.done = true
	w.t.Stop()
	w.mu.Unlock()
}

// reader returns r whose reads keep the watchdog from firing.
func (w *watchdog) reader(r io.Reader) io.Reader {
	if w.t == nil {
		return r
	}
	return activeReader{r, w}
}

type activeReader struct {
	r io.Reader
	w *watchdog
}

func (a activeReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.w.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// connSet holds the connections a TCP-mode or pass-through proxy is
// forwarding, to wait for them at shutdown and to cut them after the
// drain.
type connSet struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func (s *connSet) add(c net.Conn) {
	s.wg.Add(1)
	s.mu.Lock()
	if s.open == nil {
		s.open = map[net.Conn]bool{}
	}
	s.open[c] = true
	s.mu.Unlock()
}

func (s *connSet) done(c net.Conn) {
	s.mu.Lock()
	delete(s.open, c)
	s.mu.Unlock()
	s.wg.Done()
}

func (s *connSet) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.open {
		c.Close()
	}
}
