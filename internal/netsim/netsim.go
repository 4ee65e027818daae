// Package netsim simulates network links for tests and benchmarks: a
// bottleneck of a given rate (a token bucket with a small burst) and a
// one-way latency, over any net.Conn. The rate can change while data
// flows, to test how senders follow.
package netsim

import (
	"net"
	"sync"
	"time"
)

// Link describes one direction of a simulated link.
type Link struct {
	Rate    float64       // bytes per second; 0: unlimited
	Latency time.Duration // one-way delay added to every byte
	Burst   int           // bytes that may leave at once (default 64 KiB)
}

// Pipe returns the two ends of an in-memory connection (net.Pipe) whose
// writes, both ways, cross the link l.
func Pipe(l Link) (*Conn, *Conn) {
	a, b := net.Pipe()
	return Shape(a, l), Shape(b, l)
}

// Conn is a net.Conn whose writes cross a simulated link before they
// reach the underlying connection. Reads are the underlying's.
type Conn struct {
	net.Conn

	mu      sync.Mutex
	link    Link
	depart  time.Time // when the last queued byte leaves the bottleneck
	q       chan piece
	done    chan struct{} // closed when the delivery goroutine ends
	stop    chan struct{} // closed by Close and CloseWrite: no more writes
	hurry   chan struct{} // closed by Close: what is queued goes at once
	hurried sync.Once
	once    sync.Once
	werr    error // delivery error, under mu
	closing bool
}

type piece struct {
	b      []byte
	arrive time.Time
}

const defaultBurst = 64 << 10

// Shape returns c with its writes crossing link l.
func Shape(c net.Conn, l Link) *Conn {
	if l.Burst <= 0 {
		l.Burst = defaultBurst
	}
	s := &Conn{Conn: c, link: l, q: make(chan piece, 1024), done: make(chan struct{}), stop: make(chan struct{}), hurry: make(chan struct{})}
	go s.deliver()
	return s
}

// SetRate changes the link's rate from now on (0: unlimited).
func (s *Conn) SetRate(bytesPerSecond float64) {
	s.mu.Lock()
	s.link.Rate = bytesPerSecond
	s.mu.Unlock()
}

// Rate returns the link's rate in bytes per second.
func (s *Conn) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.link.Rate
}

// Write queues p on the link. It blocks while the bottleneck is more than
// a burst behind, as a sender does on a full link.
func (s *Conn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return n, net.ErrClosed
		}
		if s.werr != nil {
			err := s.werr
			s.mu.Unlock()
			return n, err
		}
		k := min(len(p), s.link.Burst)
		now := time.Now()
		if s.depart.Before(now) {
			s.depart = now
		}
		if s.link.Rate > 0 {
			s.depart = s.depart.Add(time.Duration(float64(k) / s.link.Rate * float64(time.Second)))
		}
		depart, latency, burst, rate := s.depart, s.link.Latency, s.link.Burst, s.link.Rate
		s.mu.Unlock()
		// Block while more than a burst is queued at the bottleneck (or
		// 2 ms of it: timers are not finer than that, and sleeping for
		// less would cap the rate at a burst per timer tick).
		if rate > 0 {
			queue := max(time.Duration(float64(burst)/rate*float64(time.Second)), 2*time.Millisecond)
			if ahead := time.Until(depart) - queue; ahead > 0 {
				t := time.NewTimer(ahead)
				select {
				case <-t.C:
				case <-s.stop:
					t.Stop()
					return n, net.ErrClosed
				}
			}
		}
		pc := piece{b: append([]byte(nil), p[:k]...), arrive: depart.Add(latency)}
		select {
		case s.q <- pc:
		case <-s.stop:
			return n, net.ErrClosed
		case <-s.done:
			return n, s.deliveryErr()
		}
		p = p[k:]
		n += k
	}
	return n, nil
}

func (s *Conn) deliveryErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.werr != nil {
		return s.werr
	}
	return net.ErrClosed
}

// deliver writes each piece to the underlying connection when it
// arrives; after Close it delivers what is queued and stops.
func (s *Conn) deliver() {
	defer close(s.done)
	send := func(pc piece) bool {
		if d := time.Until(pc.arrive); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.hurry:
				t.Stop()
			}
		}
		if _, err := s.Conn.Write(pc.b); err != nil {
			s.mu.Lock()
			s.werr = err
			s.mu.Unlock()
			return false
		}
		return true
	}
	for {
		select {
		case pc := <-s.q:
			if !send(pc) {
				return
			}
		case <-s.stop:
			for {
				select {
				case pc := <-s.q:
					if !send(pc) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// CloseWrite delivers what is queued at the link's pace, then half-closes the underlying
// connection when it can (TCP); otherwise it closes it.
func (s *Conn) CloseWrite() error {
	s.flush()
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return s.Conn.Close()
}

// Close delivers what is queued at once (waiting at most a second for a
// reader that does not read), then closes the underlying connection.
func (s *Conn) Close() error {
	s.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	s.hurried.Do(func() { close(s.hurry) })
	s.flush()
	return s.Conn.Close()
}

func (s *Conn) flush() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		close(s.stop)
	})
	<-s.done
}

// SetWriteDeadline sets the underlying connection's write deadline.
func (s *Conn) SetWriteDeadline(t time.Time) error { return s.Conn.SetWriteDeadline(t) }

// SetDeadline sets the underlying connection's deadlines.
func (s *Conn) SetDeadline(t time.Time) error { return s.Conn.SetDeadline(t) }
