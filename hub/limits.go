package hub

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/tensorpress/tensorpress/budget"
)

// Limits are the per-connection bounds of a hub's gRPC server: what a
// peer may take of it before it has sent a single call, and how much at
// once. DefaultLimits are safe for a port on the internet; ServerOptions
// turns them into grpc-go options.
type Limits struct {
	// Handshake bounds the time from accepting a connection to its
	// HTTP/2 preface and settings (and the TLS handshake before them):
	// a peer that connects and sends nothing, or half a preface, is
	// closed after it (grpc.ConnectionTimeout). Default 10 s.
	Handshake time.Duration
	// Idle closes a connection that has had no stream open for this long
	// (keepalive MaxConnectionIdle: a GOAWAY, so a client reconnects when
	// it next calls). Default 5 min.
	Idle time.Duration
	// MaxStreams bounds the streams (calls) open at once on one
	// connection (grpc.MaxConcurrentStreams); more wait on the client.
	// Default 32.
	MaxStreams uint32
	// MaxMessage bounds one received message, an upload's frame
	// included (grpc.MaxRecvMsgSize): gRPC holds a message whole before
	// the hub sees it. Default 32 MiB.
	MaxMessage int
	// Ping and PingTimeout find a peer that vanished without closing: a
	// ping after Ping without a read, the connection closed if it is
	// not answered within PingTimeout. Defaults 30 s and 10 s.
	Ping, PingTimeout time.Duration
	// MaxConns bounds the connections open at once, all peers together;
	// MaxConnsPerPeer those from one IP address. A connection over either
	// is closed as soon as it is accepted (Serve only: a grpc.Server of
	// the caller's has its own listener). Defaults 4096 and 256.
	MaxConns, MaxConnsPerPeer int
}

// Defaults of Limits.
const (
	DefaultHandshake   = 10 * time.Second
	DefaultIdle        = 5 * time.Minute
	DefaultMaxStreams  = 32
	DefaultMaxMessage  = 32 << 20
	DefaultPing        = 30 * time.Second
	DefaultPingTimeout = 10 * time.Second
	DefaultMaxConns    = 4096
	DefaultMaxPerPeer  = 256
)

// DefaultLimits returns the default Limits.
func DefaultLimits() Limits {
	return Limits{Handshake: DefaultHandshake, Idle: DefaultIdle, MaxStreams: DefaultMaxStreams,
		MaxMessage: DefaultMaxMessage, Ping: DefaultPing, PingTimeout: DefaultPingTimeout,
		MaxConns: DefaultMaxConns, MaxConnsPerPeer: DefaultMaxPerPeer}
}

// Check reports a limit that is not positive.
func (l Limits) Check() error {
	switch {
	case l.Handshake <= 0:
		return fmt.Errorf("hub: handshake timeout %v: want more than 0", l.Handshake)
	case l.Idle <= 0:
		return fmt.Errorf("hub: idle timeout %v: want more than 0", l.Idle)
	case l.MaxStreams == 0:
		return errors.New("hub: at most 0 streams per connection: want at least 1")
	case l.MaxMessage < 1<<10:
		return fmt.Errorf("hub: largest message %d bytes: want at least 1 KiB", l.MaxMessage)
	case l.Ping <= 0 || l.PingTimeout <= 0:
		return fmt.Errorf("hub: ping every %v, timeout %v: want more than 0", l.Ping, l.PingTimeout)
	case l.MaxConns <= 0 || l.MaxConnsPerPeer <= 0:
		return fmt.Errorf("hub: at most %d connections, %d per peer: want at least 1", l.MaxConns, l.MaxConnsPerPeer)
	}
	return nil
}

// ServerOptions returns the grpc-go server options of l, with a
// keepalive enforcement policy that lets clients ping every 10 s, with
// or without a stream open.
func (l Limits) ServerOptions() ([]grpc.ServerOption, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.Handshake),
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.MaxRecvMsgSize(l.MaxMessage),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.Idle, Time: l.Ping, Timeout: l.PingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, nil
}

// WithBudget charges what the hub holds for its peers to b (shared with
// the rest of the process, as package budget intends): each upload
// message's decoded size as its frames' checked headers claim it, before
// it is decoded (ResourceExhausted when it does not fit, or when it
// claims more than one frame may hold), the sums of a round until
// DropRound, what encoding a chunk holds, and each fetch's chunk from the
// moment it is made until the next is sent, as gRPC may hold it queued
// for a slow client meanwhile (a fetch waits for the budget:
// backpressure, until its context ends). Nil, the default, charges
// nothing.
func WithBudget(b *budget.Budget) Option {
	return func(h *Hub) error {
		h.budget = b
		return nil
	}
}

// charges are a fetch's charges for the chunks gRPC may still hold,
// oldest first.
type charges struct {
	mu sync.Mutex
	q  []*budget.Charge
}

func (c *charges) push(ch *budget.Charge) {
	c.mu.Lock()
	c.q = append(c.q, ch)
	c.mu.Unlock()
}

// keep gives back all but the n newest charges.
func (c *charges) keep(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	drop := max(0, len(c.q)-n)
	for _, ch := range c.q[:drop] {
		ch.Release()
	}
	c.q = c.q[drop:]
}

// releaseAll gives back every charge.
func (c *charges) releaseAll() { c.keep(0) }
