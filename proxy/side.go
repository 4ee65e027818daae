package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/internal/connlimit"
	"github.com/tensorpress/tensorpress/internal/drain"
	"github.com/tensorpress/tensorpress/internal/loopback"
)

// Side is a whole proxy, local or remote, gRPC or TCP mode: what
// `tensorpress proxy` runs. NewLocal and NewRemote check its options;
// Serve runs it on a listener until its context ends, then drains.
type Side struct {
	remote bool
	to     string
	c      config
}

// DefaultDrain is the time calls and connections get to finish when
// Serve's context ends, unless WithDrain says otherwise.
const DefaultDrain = 10 * time.Second

// hopWindow is the flow-control window of the connection between the
// proxies, per stream and per connection: a message of a few megabytes
// crosses without waiting for window updates (gRPC's default starts at
// 64 KiB and grows with its bandwidth-delay estimate).
const hopWindow = 8 << 20

// NewLocal returns the local side of a proxy (beside the application's
// client), forwarding to the remote proxy at to.
func NewLocal(to string, opts ...Option) (*Side, error) { return newSide(false, to, opts) }

// NewRemote returns the remote side of a proxy (beside the application's
// server at to), which the local proxy connects to.
func NewRemote(to string, opts ...Option) (*Side, error) { return newSide(true, to, opts) }

func newSide(remote bool, to string, opts []Option) (*Side, error) {
	if _, _, err := net.SplitHostPort(to); err != nil {
		return nil, fmt.Errorf("%w: address %q to forward to: %v", ErrBadOption, to, err)
	}
	c := defaultConfig()
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.tcp && (c.listenAuth.TokenFile != "" || c.dialAuth.TokenFile != "") {
		return nil, fmt.Errorf("%w: a token authenticates gRPC calls only; TCP mode authenticates the hop with mutual TLS", ErrBadOption)
	}
	for _, a := range []auth.Config{c.listenAuth, c.dialAuth} {
		if err := a.Check(); err != nil {
			return nil, err
		}
	}
	if c.stats == nil {
		c.stats = new(Stats)
	}
	if c.budget == nil {
		c.budget = budget.New(budget.DefaultBytes)
	}
	return &Side{remote: remote, to: to, c: c}, nil
}

// WithBandwidth gives the link's rate between the proxies in bytes per
// second (0, the default: measured). It also makes a local side code the
// hop to a remote proxy on this host instead of passing through.
func WithBandwidth(bytesPerSecond float64) Option {
	return func(c *config) error {
		if bytesPerSecond < 0 || math.IsNaN(bytesPerSecond) || math.IsInf(bytesPerSecond, 0) {
			return fmt.Errorf("%w: bandwidth %v", ErrBadOption, bytesPerSecond)
		}
		c.bandwidth = bytesPerSecond
		return nil
	}
}

// WithTCP makes a Side forward byte streams instead of gRPC calls: each
// connection becomes one to the other proxy carrying tensorpress frames
// (transport.Wrap), and one from the remote proxy to the server.
func WithTCP() Option {
	return func(c *config) error {
		c.tcp = true
		return nil
	}
}

// WithBudget charges everything the proxy holds for its peers to b (one
// budget for the process): each message received, its decoded size as
// its frames' headers claim before it is decoded, and what is coded for
// the next hop, until the message is sent on. A message that does not fit
// fails its call with ResourceExhausted. Default: a budget of
// budget.DefaultBytes of its own.
func WithBudget(b *budget.Budget) Option {
	return func(c *config) error {
		if b == nil {
			return fmt.Errorf("%w: nil Budget", ErrBadOption)
		}
		c.budget = b
		return nil
	}
}

// WithLimits sets the connection limits (DefaultLimits by default).
func WithLimits(l Limits) Option {
	return func(c *config) error {
		if err := l.check(); err != nil {
			return err
		}
		c.limits = l
		return nil
	}
}

// WithDrain sets the time calls and connections get to finish when
// Serve's context ends (DefaultDrain); those left are cut.
func WithDrain(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: drain %v", ErrBadOption, d)
		}
		c.drain = d
		return nil
	}
}

// WithLogger logs a Side's start, stop, refused connections and failed
// calls to l (default: nothing).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil Logger", ErrBadOption)
		}
		c.log = l
		return nil
	}
}

// WithListenAuth is what a Side's listener requires of its peers: on the
// remote side, the local proxies (mutual TLS, a token in gRPC mode); on
// the local side, the application's clients. Serve refuses a listener off
// loopback that a requires neither of (auth.Config.CheckListen), unless
// a.Insecure.
func WithListenAuth(a auth.Config) Option {
	return func(c *config) error {
		c.listenAuth = a
		return nil
	}
}

// WithDialAuth is how a Side authenticates to the address it forwards to:
// on the local side the remote proxy (TLS, a client certificate, a token
// in gRPC mode).
func WithDialAuth(a auth.Config) Option {
	return func(c *config) error {
		c.dialAuth = a
		return nil
	}
}

// Stats returns the Side's counts (WithStats, or its own).
func (s *Side) Stats() *Stats { return s.c.stats }

// PassThrough reports whether a local side passes the application's
// connections through (RawMagic) instead of forwarding calls: gRPC mode,
// the remote proxy on this host, no bandwidth configured, no TLS or
// token on its own listener or toward the remote proxy.
func (s *Side) PassThrough() bool {
	a, d := s.c.listenAuth, s.c.dialAuth
	return !s.remote && !s.c.tcp && s.c.bandwidth == 0 && loopbackHost(s.to) &&
		!a.ServerTLS() && a.TokenFile == "" && !d.ClientTLS() && d.TokenFile == ""
}

// loopbackHost reports whether addr (host:port) names this host.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return host == "localhost" || loopback.Addr(&net.TCPAddr{IP: net.ParseIP(host)})
}

func (s *Side) name() string {
	if s.remote {
		return "remote"
	}
	return "local"
}

// Serve runs the proxy on ln until ctx ends, then stops accepting, gives
// the calls and connections in flight the drain to finish, and cuts
// those left. It returns nil after a drain, or the listener's error. It
// refuses a listener off loopback without authentication (see
// WithListenAuth), closing it.
func (s *Side) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.c.listenAuth.CheckListen(ln.Addr().String()); err != nil {
		ln.Close()
		return err
	}
	lln := connlimit.New(ln, s.c.limits.MaxConns, s.c.limits.MaxConnsPerPeer, s.c.log)
	switch {
	case s.c.tcp:
		return s.serveConns(ctx, lln, "tcp", s.forwardTCP)
	case s.PassThrough():
		s.c.log.Info("the remote proxy is on this host: passing connections through, no coding", "to", s.to)
		return s.serveConns(ctx, lln, "grpc-passthrough", s.forwardPass)
	}
	return s.serveGRPC(ctx, lln)
}

// serveGRPC forwards calls: a gRPC server on ln, a connection to s.to.
func (s *Side) serveGRPC(ctx context.Context, ln net.Listener) error {
	hop, err := NewHop(s.c.bandwidth)
	if err != nil {
		return err
	}
	conn, err := s.dial(hop)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := s.c
	if s.remote {
		c.in = hop
	} else {
		c.out = hop
	}
	sopts, err := s.serverOptions(conn, c)
	if err != nil {
		return err
	}
	if s.remote {
		sniff := newSniffListener(ln, s.to, s.c.limits, s.c.log)
		defer sniff.closeRaw()
		ln = hop.Listener(sniff)
	}
	srv := grpc.NewServer(sopts...)
	s.c.log.Info("listening", "addr", ln.Addr().String(), "side", s.name(), "to", s.to)
	return drain.Serve(ctx, srv, ln, s.c.drain, s.c.log)
}

// dial returns the connection to s.to: through the hop's connections on
// the local side, with the dial's authentication.
func (s *Side) dial(hop *Hop) (*grpc.ClientConn, error) {
	opts, err := s.c.dialAuth.DialOptions()
	if err != nil {
		return nil, err
	}
	if !s.remote {
		// After the auth options: these transport credentials are theirs,
		// wrapped to tell the hop each call's connection.
		tc, err := s.c.dialAuth.ClientTLSConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, hop.DialOptions(transportCreds(tc))...)
	}
	opts = append(opts,
		grpc.WithInitialWindowSize(hopWindow), grpc.WithInitialConnWindowSize(hopWindow),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil || s.remote {
				return c, err
			}
			return hop.Conn(c), nil
		}))
	return grpc.NewClient(s.to, opts...)
}

// serverOptions are those of ServerOptions with c, the listener's
// authentication, the hop's windows (remote side) and the log of failed
// calls.
func (s *Side) serverOptions(conn *grpc.ClientConn, c config) ([]grpc.ServerOption, error) {
	sopts, err := c.serverOptions(conn)
	if err != nil {
		return nil, err
	}
	aopts, err := s.c.listenAuth.ServerOptions()
	if err != nil {
		return nil, err
	}
	sopts = append(sopts, aopts...)
	if s.remote {
		// After the auth options: these transport credentials are theirs,
		// wrapped to tell the hop each call's connection.
		tc, err := s.c.listenAuth.ServerTLSConfig()
		if err != nil {
			return nil, err
		}
		sopts = append(sopts, grpc.Creds(hopCreds{transportCreds(tc)}),
			grpc.InitialWindowSize(hopWindow), grpc.InitialConnWindowSize(hopWindow))
	}
	return append(sopts, grpc.ChainStreamInterceptor(logCalls(s.c.log, s.to))), nil
}

// transportCreds are TLS with tc, or none where tc is nil.
func transportCreds(tc *tls.Config) credentials.TransportCredentials {
	if tc == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(tc)
}

// serverOptions are the gRPC server's side of Limits.
func (l Limits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}),
	}
}

// logCalls logs each call that ends in an error: at warn level where the
// proxy or the next hop failed (Unavailable, Internal, ResourceExhausted,
// Unimplemented, Unauthenticated: a peer down, a bad message, a limit,
// another release, a peer without the token), else, where the status is
// the application's own, at debug level.
func logCalls(log *slog.Logger, to string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		if err == nil {
			return nil
		}
		st := status.Convert(err)
		level := slog.LevelDebug
		switch st.Code() {
		case codes.Unavailable, codes.Internal, codes.ResourceExhausted, codes.Unimplemented, codes.Unauthenticated:
			level = slog.LevelWarn
		}
		log.Log(ss.Context(), level, "call failed", "method", info.FullMethod, "to", to, "code", st.Code().String(), "err", st.Message())
		return err
	}
}

// serveConns accepts connections on ln and hands each to forward until
// ctx ends; then the connections open get the drain to end.
func (s *Side) serveConns(ctx context.Context, ln net.Listener, mode string, forward func(net.Conn) error) error {
	s.c.log.Info("listening", "addr", ln.Addr().String(), "side", s.name(), "to", s.to, "mode", mode)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var set connSet
	var err error
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			var ne interface{ Temporary() bool }
			if ctx.Err() == nil && errors.As(aerr, &ne) && ne.Temporary() {
				time.Sleep(10 * time.Millisecond) // out of file descriptors: wait for some to close
				continue
			}
			if ctx.Err() == nil {
				err = aerr
			}
			break
		}
		set.add(c)
		go func() {
			defer set.done(c)
			s.logForward(c, forward(c))
		}()
	}
	s.c.log.Info("stopping", "drain", s.c.drain)
	drain.ThenCut(set.wg.Wait, s.c.drain, set.cut)
	return err
}

func (s *Side) logForward(c net.Conn, err error) {
	if err == nil {
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		s.c.log.Warn("connection not forwarded: the next hop is down", "remote", c.RemoteAddr().String(), "to", s.to, "err", err)
		return
	}
	s.c.log.Info("connection ended", "remote", c.RemoteAddr().String(), "err", err)
}

// forwardPass passes an application's connection through to the remote
// proxy on this host, after RawMagic.
func (s *Side) forwardPass(c net.Conn) error {
	d, err := (&net.Dialer{Timeout: s.c.limits.HandshakeTimeout}).Dial("tcp", s.to)
	if err != nil {
		c.Close()
		return err
	}
	return forwardRaw(c, d, RawMagic, s.c.limits.IdleTimeout, &s.c.stats.HopOut, &s.c.stats.HopIn)
}

// handshakeTLS runs c's TLS handshake with tc (none where tc is nil)
// within the handshake timeout.
func (s *Side) handshakeTLS(c net.Conn, tc *tls.Config, server bool) (net.Conn, error) {
	if tc == nil {
		return c, nil
	}
	var t *tls.Conn
	if server {
		t = tls.Server(c, tc)
	} else {
		t = tls.Client(c, tc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.limits.HandshakeTimeout)
	defer cancel()
	if err := t.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("proxy: TLS handshake with %s: %w", c.RemoteAddr(), err)
	}
	return t, nil
}
