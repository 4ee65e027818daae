package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// TestSharedBudget: the proxies charge what they hold to the budget they
// are given: with the budget spent elsewhere in the process, a call fails
// with ResourceExhausted; once it is released, the same call passes.
func TestSharedBudget(t *testing.T) {
	b := budget.New(8 << 20)
	c := newChain(t, basic(), setup{remote: []Option{WithBudget(b)}})
	msg := grpctest.Message(1 << 20)
	held, err := b.TryCharge(15 << 19) // 7.5 MiB of 8: less than the message left
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unary(timeout(t), c.client, echoMethod, msg); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("with the budget spent: %v, want ResourceExhausted", err)
	}
	held.Release()
	if back, err := unary(timeout(t), c.client, echoMethod, msg); err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("with the budget free: %d bytes back, %v", len(back), err)
	}
	if used := b.Stats(); used.InUse != 0 {
		t.Errorf("after the calls, %d bytes still charged", used.InUse)
	}
}

// TestSideOptions: options out of range are refused by the constructors
// with ErrBadOption, and a token in TCP mode too.
func TestSideOptions(t *testing.T) {
	bad := DefaultLimits()
	bad.MaxConnsPerPeer = 0
	for name, opts := range map[string][]Option{
		"limits":    {WithLimits(bad)},
		"bandwidth": {WithBandwidth(-1)},
		"budget":    {WithBudget(nil)},
		"drain":     {WithDrain(-time.Second)},
		"logger":    {WithLogger(nil)},
		"tcp token": {WithTCP(), WithDialAuth(auth.Config{TokenFile: "x"})},
	} {
		if _, err := NewLocal("127.0.0.1:1", opts...); !errors.Is(err, ErrBadOption) {
			t.Errorf("%s: %v, want ErrBadOption", name, err)
		}
	}
	if _, err := NewRemote("no port"); !errors.Is(err, ErrBadOption) {
		t.Errorf("an address without a port: %v", err)
	}
}

// TestServeOpenListener: Serve refuses a listener off loopback without
// authentication, closing it.
func TestServeOpenListener(t *testing.T) {
	s, err := NewRemote("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	ln := &fakeListener{addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 7000}}
	if err := s.Serve(context.Background(), ln); !errors.Is(err, auth.ErrOpenListener) || !ln.closed {
		t.Fatalf("Serve: %v (closed %t), want auth.ErrOpenListener", err, ln.closed)
	}
}

type fakeListener struct {
	net.Listener
	addr   net.Addr
	closed bool
}

func (l *fakeListener) Addr() net.Addr { return l.addr }
func (l *fakeListener) Close() error   { l.closed = true; return nil }

// addrConn is a connection that says it comes from addr.
type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }

// TestRawFromAnotherHost: the TPRAW/1 marker from a peer off loopback is
// not honoured: the connection is closed, nothing dialled.
func TestRawFromAnotherHost(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	var logged bytes.Buffer
	l := &sniffListener{to: "127.0.0.1:1", handshake: time.Minute, log: slog.New(slog.NewTextHandler(&logged, nil)), raw: map[net.Conn]bool{}}
	go io.WriteString(b, RawMagic)
	l.sniff(addrConn{a, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5}})
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Error("the connection is open")
	}
	if !bytes.Contains(logged.Bytes(), []byte("pass-through refused")) {
		t.Errorf("log: %s", logged.String())
	}
}

// TestHandshakeTimeout: a connection that sends nothing, or part of the
// marker, is closed by the handshake timeout.
func TestHandshakeTimeout(t *testing.T) {
	for _, first := range []string{"", "TPRA"} {
		a, b := net.Pipe()
		l := &sniffListener{to: "127.0.0.1:1", handshake: time.Millisecond, log: slog.New(slog.DiscardHandler), raw: map[net.Conn]bool{}, done: make(chan struct{})}
		go io.WriteString(b, first)
		l.sniff(addrConn{a, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}})
		b.SetReadDeadline(time.Now().Add(wait))
		if _, err := b.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%q: the connection is open: %v", first, err)
		}
		b.Close()
	}
}

// TestHopConnsApart: two connections of a Hop to the same remote address
// are told apart by their two ends, each with its own Tuner; a closed one
// is forgotten.
func TestHopConnsApart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, err := NewHop(0)
	if err != nil {
		t.Fatal(err)
	}
	var hcs []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		hcs = append(hcs, h.Conn(c))
	}
	a, b := hcs[0].(*hopConn), hcs[1].(*hopConn)
	pa := &peer.Peer{Addr: a.RemoteAddr(), LocalAddr: a.LocalAddr()}
	pb := &peer.Peer{Addr: b.RemoteAddr(), LocalAddr: b.LocalAddr()}
	if h.conn(pa) != a || h.conn(pb) != b || a.tuner == b.tuner {
		t.Fatalf("the connections are not told apart")
	}
	a.Close()
	b.Close()
	if h.conn(pa) != nil || h.lastConn() != nil {
		t.Error("a closed connection is still found")
	}
}

// TestHopDialOptions: with Hop.DialOptions a call's connection is known
// from its AuthInfo on both ends, and the call carries the rate measured
// on it.
func TestHopDialOptions(t *testing.T) {
	client, err := NewHop(0)
	if err != nil {
		t.Fatal(err)
	}
	server, err := NewHop(0)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []string, 1)
	found := make(chan bool, 1)
	s := grpc.NewServer(grpc.Creds(hopCreds{insecure.NewCredentials()}), grpc.ForceServerCodec(grpctest.RawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			p, _ := peer.FromContext(ss.Context())
			found <- connOf(p.AuthInfo) != nil
			md, _ := metadata.FromIncomingContext(ss.Context())
			seen <- md.Get(rateKey)
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				return err
			}
			return ss.SendMsg(&m)
		}))
	go s.Serve(server.Listener(ln))
	defer s.Stop()
	opts := append(client.DialOptions(insecure.NewCredentials()), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		hc := client.Conn(c).(*hopConn)
		hc.meter.mu.Lock()
		hc.meter.bw = 12345 // as if measured
		hc.meter.mu.Unlock()
		return hc, nil
	}))
	conn, err := grpc.NewClient(ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var p peer.Peer
	msg, back := []byte("hi"), []byte(nil)
	if err := conn.Invoke(timeout(t), "/app.Service/Call", &msg, &back, grpc.ForceCodec(grpctest.RawCodec{}), grpc.Peer(&p)); err != nil {
		t.Fatal(err)
	}
	if hc := client.callConn(&p); hc == nil || connOf(p.AuthInfo) != hc {
		t.Error("the client does not know the call's connection from its AuthInfo")
	}
	if !<-found {
		t.Error("the server does not know the call's connection from its AuthInfo")
	}
	if got := <-seen; len(got) != 1 || got[0] != "12345" {
		t.Errorf("the call carried rate %q, want the connection's 12345", got)
	}
}

// TestTCPHello: a remote side in TCP mode closes a connection that sends
// no hello within the handshake timeout.
func TestTCPHello(t *testing.T) {
	lim := DefaultLimits()
	lim.HandshakeTimeout = 10 * time.Millisecond
	s, err := NewRemote("127.0.0.1:1", WithTCP(), WithLimits(lim))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(wait))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a silent connection: %v, want it closed", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
