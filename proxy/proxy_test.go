package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the application's own compressor in TestApplicationCompression
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// big is the message limit of the application's ends in these tests.
const big = 256 << 20

// wait bounds every wait of a test on another goroutine, so that a bug
// fails the test instead of hanging it; it is not a timing assertion.
const wait = time.Minute

// service is an application server's methods, by full method name,
// implemented on raw bytes (grpctest.RawCodec), without generated code.
type service map[string]func(grpc.ServerStream) error

func (s service) handle(_ any, st grpc.ServerStream) error {
	m, _ := grpc.MethodFromServerStream(st)
	h, ok := s[m]
	if !ok {
		return status.Errorf(codes.Unimplemented, "no method %s", m)
	}
	return h(st)
}

// setup says how the chain of a test is built.
type setup struct {
	bufSize int                 // in-memory connections of this buffer size; 0: loopback TCP
	dial    []grpc.DialOption   // added to every client connection
	serve   []grpc.ServerOption // added to every server
	local   []Option            // the local proxy's options; nil: the tensorpress compressor on the hop
	remote  []Option            // the remote proxy's options
	// register adds services to the local proxy's own server.
	register func(*grpc.Server)
}

// chain is a test's deployment: application client -> local proxy -> hop ->
// remote proxy -> application server.
type chain struct {
	client *grpc.ClientConn // the application's connection to the local proxy
	hop    *counter         // the bytes on the hop, as the local proxy sends and receives them
}

func newChain(t *testing.T, svc service, s setup) *chain {
	t.Helper()
	app := grpc.NewServer(append([]grpc.ServerOption{
		grpc.ForceServerCodec(grpctest.RawCodec{}),
		grpc.UnknownServiceHandler(svc.handle),
		grpc.MaxRecvMsgSize(big), grpc.MaxSendMsgSize(big),
	}, s.serve...)...)
	toApp := dial(t, listen(t, app, s.bufSize), s.dial...)

	remote := proxyServer(t, toApp, s.remote, s.serve, nil)
	hop := &counter{}
	toRemote := dial(t, hop.dialer(listen(t, remote, s.bufSize)), s.dial...)

	local := s.local
	if local == nil {
		local = []Option{WithCallOptions(grpc.UseCompressor(rpc.Name))}
	}
	localSrv := proxyServer(t, toRemote, local, s.serve, s.register)
	return &chain{client: dial(t, listen(t, localSrv, s.bufSize), s.dial...), hop: hop}
}

func proxyServer(t *testing.T, conn *grpc.ClientConn, opts []Option, extra []grpc.ServerOption, register func(*grpc.Server)) *grpc.Server {
	t.Helper()
	so, err := ServerOptions(conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(append(so, extra...)...)
	if register != nil {
		register(s)
	}
	return s
}

type dialer = func(context.Context, string) (net.Conn, error)

// listen serves s on loopback TCP, or in memory when bufSize > 0, until the
// test ends, and returns a dialer for it.
func listen(t *testing.T, s *grpc.Server, bufSize int) dialer {
	t.Helper()
	t.Cleanup(s.Stop)
	if bufSize > 0 {
		ln := bufconn.Listen(bufSize)
		go s.Serve(ln)
		return func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	return tcpDialer(ln.Addr().String())
}

func tcpDialer(addr string) dialer {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func dial(t *testing.T, d dialer, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///proxy-test", append([]grpc.DialOption{
		grpc.WithContextDialer(d),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// counter counts the bytes of the connections its dialer makes.
type counter struct{ read, written atomic.Int64 }

func (c *counter) dialer(d dialer) dialer {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := d(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: conn, c: c}, nil
	}
}

type countingConn struct {
	net.Conn
	c *counter
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.c.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.c.written.Add(int64(n))
	return n, err
}

// rawCall are the application client's call options: messages are
// *[]byte, limits as the application server's.
var rawCall = []grpc.CallOption{
	grpc.ForceCodec(grpctest.RawCodec{}), grpc.MaxCallRecvMsgSize(big), grpc.MaxCallSendMsgSize(big),
}

func unary(ctx context.Context, conn *grpc.ClientConn, method string, msg []byte, opts ...grpc.CallOption) ([]byte, error) {
	var back []byte
	err := conn.Invoke(ctx, method, &msg, &back, append(rawCall[:len(rawCall):len(rawCall)], opts...)...)
	return back, err
}

func newStream(t *testing.T, ctx context.Context, conn *grpc.ClientConn, desc grpc.StreamDesc, method string) grpc.ClientStream {
	t.Helper()
	s, err := conn.NewStream(ctx, &desc, method, rawCall...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// Application methods shared by several tests.
const (
	echoMethod  = "/app.Test/Echo"  // unary: the message back
	splitMethod = "/app.Test/Split" // server streaming: the message back in pieces, then an empty one
	joinMethod  = "/app.Test/Join"  // client streaming: the messages back as one
	chatMethod  = "/app.Test/Chat"  // bidirectional: each message back at once
)

const piece = 1000

func basic() service {
	return service{
		echoMethod: func(s grpc.ServerStream) error {
			var m []byte
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			return s.SendMsg(&m)
		},
		splitMethod: func(s grpc.ServerStream) error {
			var m []byte
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			for len(m) > 0 {
				p := m[:min(piece, len(m))]
				if err := s.SendMsg(&p); err != nil {
					return err
				}
				m = m[len(p):]
			}
			return s.SendMsg(&m)
		},
		joinMethod: func(s grpc.ServerStream) error {
			var all []byte
			for {
				var m []byte
				err := s.RecvMsg(&m)
				if err == io.EOF {
					return s.SendMsg(&all)
				}
				if err != nil {
					return err
				}
				all = append(all, m...)
			}
		},
		chatMethod: func(s grpc.ServerStream) error {
			for {
				var m []byte
				err := s.RecvMsg(&m)
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.SendMsg(&m); err != nil {
					return err
				}
			}
		},
	}
}

// TestShapes forwards the four shapes of call through both proxies.
func TestShapes(t *testing.T) {
	c := newChain(t, basic(), setup{})
	msg := grpctest.Message(10*piece + 17)

	t.Run("unary", func(t *testing.T) {
		back, err := unary(timeout(t), c.client, echoMethod, msg)
		if err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("%d of %d bytes back, %v", len(back), len(msg), err)
		}
	})

	t.Run("server streaming", func(t *testing.T) {
		s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ServerStreams: true}, splitMethod)
		if err := s.SendMsg(&msg); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var all []byte
		n := 0
		for ; ; n++ {
			var m []byte
			err := s.RecvMsg(&m)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, m...)
		}
		if want := (len(msg)+piece-1)/piece + 1; n != want || !bytes.Equal(all, msg) {
			t.Fatalf("%d messages, %d bytes; want %d, %d", n, len(all), want, len(msg))
		}
	})

	t.Run("client streaming", func(t *testing.T) {
		s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ClientStreams: true}, joinMethod)
		for i := 0; i < len(msg); i += piece {
			p := msg[i:min(i+piece, len(msg))]
			if err := s.SendMsg(&p); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var back []byte
		if err := s.RecvMsg(&back); err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("%d of %d bytes back, %v", len(back), len(msg), err)
		}
		if err := s.RecvMsg(&back); err != io.EOF {
			t.Fatalf("after the answer: %v, want io.EOF", err)
		}
	})

	// Ping-pong: each reply is awaited before the next message is sent,
	// which only works if the proxies forward each message at once, both
	// ways, while the call is open.
	t.Run("bidirectional", func(t *testing.T) {
		s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, chatMethod)
		for i := range 20 {
			m := msg[:i*i*i]
			if err := s.SendMsg(&m); err != nil {
				t.Fatal(err)
			}
			var back []byte
			if err := s.RecvMsg(&back); err != nil || !bytes.Equal(back, m) {
				t.Fatalf("message %d: %d of %d bytes back, %v", i, len(back), len(m), err)
			}
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var back []byte
		if err := s.RecvMsg(&back); err != io.EOF {
			t.Fatalf("after CloseSend: %v, want io.EOF", err)
		}
	})
}

// TestSizes sends messages from 0 bytes to 64 MiB through both proxies and
// back, bit for bit.
func TestSizes(t *testing.T) {
	c := newChain(t, basic(), setup{})
	for _, n := range []int{0, 1, 3, 1000, 1<<20 + 1, 4<<20 + 3, 64 << 20} {
		msg := grpctest.Message(n)
		back, err := unary(timeout(t), c.client, echoMethod, msg)
		if err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("%d bytes: %d back, %v", n, len(back), err)
		}
	}
}

// TestMessageLimit: a message over the proxy's limit fails with
// ResourceExhausted; one at the limit passes; a bad limit is refused.
func TestMessageLimit(t *testing.T) {
	const limit = 1 << 20
	c := newChain(t, basic(), setup{local: []Option{WithMaxMessageSize(limit), WithCallOptions(grpc.UseCompressor(rpc.Name))}})
	msg := grpctest.Message(limit)
	if back, err := unary(timeout(t), c.client, echoMethod, msg); err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("at the limit: %d of %d bytes back, %v", len(back), len(msg), err)
	}
	msg = append(msg, 1)
	if _, err := unary(timeout(t), c.client, echoMethod, msg); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v, want ResourceExhausted", err)
	}
	over := math.MaxInt32
	over++ // past gRPC's limits; wraps to a negative on 32-bit platforms
	for _, n := range []int{0, -1, over} {
		if _, err := ServerOptions(c.client, WithMaxMessageSize(n)); !errors.Is(err, ErrBadOption) {
			t.Errorf("WithMaxMessageSize(%d): %v, want ErrBadOption", n, err)
		}
	}
}

// TestMetadata: the request metadata reaches the server, the server's
// header and trailer reach the client, and the content-type's subtype
// passes unchanged.
func TestMetadata(t *testing.T) {
	const method = "/app.Test/Meta"
	seen := make(chan metadata.MD, 1)
	c := newChain(t, service{method: func(s grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		seen <- md
		var m []byte
		if err := s.RecvMsg(&m); err != nil {
			return err
		}
		if err := s.SetHeader(metadata.Pairs("h", "1", "h-bin", "\x00\xff")); err != nil {
			return err
		}
		if err := s.SendHeader(metadata.Pairs("h2", "2")); err != nil {
			return err
		}
		s.SetTrailer(metadata.Pairs("t", "3", "t", "4"))
		return s.SendMsg(&m)
	}}, setup{})

	ctx := metadata.AppendToOutgoingContext(timeout(t),
		"k", "v", "multi", "a", "multi", "b", "blob-bin", "\x00\x01\xfe", "x-request-id", "42")
	var header, trailer metadata.MD
	msg := []byte("hello")
	back, err := unary(ctx, c.client, method, msg, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("%q, %v", back, err)
	}
	got := <-seen
	sent, _ := metadata.FromOutgoingContext(ctx)
	for k, v := range sent {
		if !equal(got[k], v) {
			t.Errorf("server got %s=%q, want %q", k, got[k], v)
		}
	}
	if ct := got["content-type"]; !equal(ct, []string{"application/grpc+raw"}) {
		t.Errorf("server got content-type %q, want the client's", ct)
	}
	t.Logf("server saw user-agent %q (the remote proxy's connection's)", got["user-agent"])
	for k, want := range map[string][]string{"h": {"1"}, "h-bin": {"\x00\xff"}, "h2": {"2"}} {
		if !equal(header[k], want) {
			t.Errorf("client got header %s=%q, want %q", k, header[k], want)
		}
	}
	if !equal(trailer["t"], []string{"3", "4"}) {
		t.Errorf("client got trailer t=%q, want [3 4]", trailer["t"])
	}

	t.Run("json subtype", func(t *testing.T) {
		if _, err := unary(timeout(t), c.client, method, msg, grpc.CallContentSubtype("json")); err != nil {
			t.Fatal(err)
		}
		if ct := (<-seen)["content-type"]; !equal(ct, []string{"application/grpc+json"}) {
			t.Errorf("server got content-type %q", ct)
		}
	})

	// An application with generated code: plain "application/grpc" and
	// protobuf messages, which the proxies do not decode.
	t.Run("protobuf client", func(t *testing.T) {
		in := wrapperspb.Bytes(grpctest.Message(3000))
		out := new(wrapperspb.BytesValue)
		if err := c.client.Invoke(timeout(t), method, in, out); err != nil || !proto.Equal(in, out) {
			t.Fatalf("%v", err)
		}
		if ct := (<-seen)["content-type"]; !equal(ct, []string{"application/grpc"}) {
			t.Errorf("server got content-type %q", ct)
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHeaderFirst: a header the server sends before any message reaches the
// client while the server still holds its message back.
func TestHeaderFirst(t *testing.T) {
	const method = "/app.Test/HeaderFirst"
	release := make(chan struct{})
	c := newChain(t, service{method: func(s grpc.ServerStream) error {
		if err := s.SendHeader(metadata.Pairs("early", "yes")); err != nil {
			return err
		}
		select {
		case <-release:
		case <-s.Context().Done():
			return s.Context().Err()
		}
		m := []byte("late")
		return s.SendMsg(&m)
	}}, setup{})
	s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ServerStreams: true}, method)
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	h, err := s.Header()
	if err != nil || !equal(h["early"], []string{"yes"}) {
		t.Fatalf("header %v, %v", h, err)
	}
	close(release)
	var m []byte
	if err := s.RecvMsg(&m); err != nil || string(m) != "late" {
		t.Fatalf("%q, %v", m, err)
	}
	if err := s.RecvMsg(&m); err != io.EOF {
		t.Fatalf("%v, want io.EOF", err)
	}
}

// blocker is a method that records its context's deadline, announces that
// it runs, then waits for its context to end and records why.
type blocker struct {
	started  chan struct{}
	deadline chan time.Time // zero: none
	ended    chan error
}

func newBlocker() *blocker {
	return &blocker{make(chan struct{}, 1), make(chan time.Time, 1), make(chan error, 1)}
}

func (b *blocker) handle(s grpc.ServerStream) error {
	d, _ := s.Context().Deadline()
	b.deadline <- d
	b.started <- struct{}{}
	<-s.Context().Done()
	b.ended <- s.Context().Err()
	return s.Context().Err()
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestDeadline: the client's deadline reaches the server; when it passes,
// the client gets DeadlineExceeded and the server's context ends.
func TestDeadline(t *testing.T) {
	const method = "/app.Test/Block"
	b := newBlocker()
	svc := basic()
	svc[method] = b.handle
	c := newChain(t, svc, setup{})
	// Connections are set up before the clock starts.
	if _, err := unary(timeout(t), c.client, echoMethod, []byte("warm up")); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	_, err := unary(ctx, c.client, method, []byte("x"))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("%v, want DeadlineExceeded", err)
	}
	// gRPC sends the time left, which the server adds to the time the call
	// reaches it: each leg's transit moves the deadline a little later.
	d := receive(t, b.deadline, "deadline")
	if d.IsZero() || d.After(want.Add(wait)) {
		t.Fatalf("server's deadline %v, client's %v", d, want)
	}
	// The server's own timer or the proxy's cancellation, whichever first.
	if err := receive(t, b.ended, "end"); err != context.DeadlineExceeded && err != context.Canceled {
		t.Fatalf("server's context ended with %v", err)
	}
	t.Logf("server's deadline %v after the client's", d.Sub(want))
}

// TestCancel: a client that cancels cancels the server's context.
func TestCancel(t *testing.T) {
	const method = "/app.Test/Block"
	b := newBlocker()
	c := newChain(t, service{method: b.handle}, setup{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStream(t, ctx, c.client, grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	receive(t, b.started, "call at the server")
	if d := <-b.deadline; !d.IsZero() {
		t.Errorf("server has deadline %v; the client set none", d)
	}
	cancel()
	if err := receive(t, b.ended, "end"); err != context.Canceled {
		t.Fatalf("server's context ended with %v, want Canceled", err)
	}
	var m []byte
	if err := s.RecvMsg(&m); status.Code(err) != codes.Canceled {
		t.Fatalf("client: %v, want Canceled", err)
	}
}

// TestStatus: codes, messages and details pass through both proxies, also
// when the server ends a call the client is still streaming on.
func TestStatus(t *testing.T) {
	detailed, err := status.New(codes.NotFound, "x").WithDetails(wrapperspb.String("why"), wrapperspb.Int64(7))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]*status.Status{
		"/app.Test/NotFound":   detailed,
		"/app.Test/Denied":     status.New(codes.PermissionDenied, "no"),
		"/app.Test/Internal":   status.New(codes.Internal, "100% broken:\nnon-ASCII ü, tab\t"),
		"/app.Test/Exhausted":  status.New(codes.ResourceExhausted, ""),
		"/app.Test/Unknown":    status.New(codes.Unknown, "plain error"),
		"/app.Test/Unimplemen": status.New(codes.Unimplemented, "no method /app.Test/Unimplemen"),
	}
	svc := service{}
	for m, st := range cases {
		if m == "/app.Test/Unimplemen" {
			continue // the service answers this itself
		}
		svc[m] = func(s grpc.ServerStream) error {
			var in []byte
			if err := s.RecvMsg(&in); err != nil {
				return err
			}
			if st.Code() == codes.Unknown {
				return errors.New(st.Message())
			}
			return st.Err()
		}
	}
	c := newChain(t, svc, setup{})
	for m, want := range cases {
		_, err := unary(timeout(t), c.client, m, []byte("x"))
		got := status.Convert(err)
		if got.Code() != want.Code() || got.Message() != want.Message() {
			t.Errorf("%s: %v %q, want %v %q", m, got.Code(), got.Message(), want.Code(), want.Message())
		}
		gd, wd := got.Details(), want.Details()
		if len(gd) != len(wd) {
			t.Errorf("%s: details %v, want %v", m, gd, wd)
			continue
		}
		for i := range gd {
			if !proto.Equal(gd[i].(proto.Message), wd[i].(proto.Message)) {
				t.Errorf("%s: detail %d is %v, want %v", m, i, gd[i], wd[i])
			}
		}
	}

	// The server answers after the first message; the client has not
	// half-closed. Its later sends see io.EOF, its receive the status.
	t.Run("early end", func(t *testing.T) {
		s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/app.Test/Denied")
		m := []byte("first")
		if err := s.SendMsg(&m); err != nil {
			t.Fatal(err)
		}
		var back []byte
		if err := s.RecvMsg(&back); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v, want PermissionDenied", err)
		}
		if err := s.SendMsg(&m); err != io.EOF {
			t.Fatalf("send after the end: %v, want io.EOF", err)
		}
	})
}

// TestUnavailable: an unreachable server, or an unreachable remote proxy,
// gives the client Unavailable.
func TestUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := tcpDialer(ln.Addr().String())
	ln.Close()

	t.Run("server", func(t *testing.T) {
		remote := proxyServer(t, dial(t, closed), nil, nil, nil)
		local := proxyServer(t, dial(t, listen(t, remote, 0)), nil, nil, nil)
		client := dial(t, listen(t, local, 0))
		if _, err := unary(timeout(t), client, echoMethod, []byte("x")); status.Code(err) != codes.Unavailable {
			t.Fatalf("%v, want Unavailable", err)
		}
	})
	t.Run("remote proxy", func(t *testing.T) {
		local := proxyServer(t, dial(t, closed), []Option{WithCallOptions(grpc.UseCompressor(rpc.Name))}, nil, nil)
		client := dial(t, listen(t, local, 0))
		_, err := unary(timeout(t), client, echoMethod, []byte("x"))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%v, want Unavailable", err)
		}
		t.Logf("client got: %v", err)
	})
}

// weights returns n bytes of float32 values drawn from N(0, 0.02), little
// endian, as a layer of a model's weights.
func weights(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	return b
}

// hopBytes echoes msg through a new chain, after a first call that sets
// the connections up, checks it came back whole, and returns the bytes the
// hop carried each way for it.
func hopBytes(t *testing.T, msg []byte) (up, down int64) {
	t.Helper()
	c := newChain(t, basic(), setup{})
	if _, err := unary(timeout(t), c.client, echoMethod, []byte("warm up")); err != nil {
		t.Fatal(err)
	}
	w0, r0 := c.hop.written.Load(), c.hop.read.Load()
	back, err := unary(timeout(t), c.client, echoMethod, msg)
	if err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("%d of %d bytes back, %v", len(back), len(msg), err)
	}
	return c.hop.written.Load() - w0, c.hop.read.Load() - r0
}

// TestHopCompression: weights cross the hop in fewer bytes than they have,
// both ways, and arrive bit for bit.
func TestHopCompression(t *testing.T) {
	msg := weights(8 << 20)
	up, down := hopBytes(t, msg)
	t.Logf("payload %d bytes; on the hop: %d bytes out (%.1f%%), %d back (%.1f%%)",
		len(msg), up, 100*float64(up)/float64(len(msg)), down, 100*float64(down)/float64(len(msg)))
	if up >= int64(len(msg)) || down >= int64(len(msg)) {
		t.Fatalf("the hop carried %d and %d bytes for %d", up, down, len(msg))
	}
}

// TestHopSparse: a 99%-zero float32 array in a message (after a field's
// tag and length, as protobuf puts it) crosses the hop at 80x or better,
// both ways: ByClass reads the floats as 4-byte elements (width) before
// the sparse layout, where byte by byte it reached 76-77x.
func TestHopSparse(t *testing.T) {
	msg := grpctest.SparseMessage(2 << 20)
	up, down := hopBytes(t, msg)
	t.Logf("payload %d bytes; on the hop: %d bytes out (%.1fx), %d back (%.1fx)",
		len(msg), up, float64(len(msg))/float64(up), down, float64(len(msg))/float64(down))
	if 80*up > int64(len(msg)) || 80*down > int64(len(msg)) {
		t.Errorf("the hop carried %d and %d bytes for %d: under 80x", up, down, len(msg))
	}
}

// TestApplicationCompression: an application that compresses its messages
// (gzip) to the local proxy gets them back bit for bit; the local proxy
// undoes gzip and the hop uses tensorpress.
func TestApplicationCompression(t *testing.T) {
	c := newChain(t, basic(), setup{})
	msg := grpctest.Message(1 << 20)
	back, err := unary(timeout(t), c.client, echoMethod, msg, grpc.UseCompressor("gzip"))
	if err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("%d of %d bytes back, %v", len(back), len(msg), err)
	}
}

// TestOwnServices: a service registered on a proxy's server is served
// there (with protobuf messages), next to the forwarded calls.
func TestOwnServices(t *testing.T) {
	c := newChain(t, basic(), setup{register: func(s *grpc.Server) {
		healthpb.RegisterHealthServer(s, health.NewServer())
	}})
	resp, err := healthpb.NewHealthClient(c.client).Check(timeout(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%v, %v", resp, err)
	}
	if back, err := unary(timeout(t), c.client, echoMethod, []byte("x")); err != nil || string(back) != "x" {
		t.Fatalf("%q, %v", back, err)
	}
}

// settle polls v until it is positive and has not changed for a while,
// and returns it.
func settle(v *atomic.Int64) int64 {
	for deadline := time.Now().Add(wait); v.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	last, same := v.Load(), 0
	for deadline := time.Now().Add(wait); same < 15 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if n := v.Load(); n != last {
			last, same = n, 0
		} else {
			same++
		}
	}
	return last
}

// TestFlowControl: a reader that stops reading stops the writer at the
// other end after a bounded number of messages, both ways, and everything
// arrives once it reads again. Windows are fixed at gRPC's minimum and the
// connections are in memory, so that what the links hold is small.
func TestFlowControl(t *testing.T) {
	const (
		size = 128 << 10
		n    = 64 // 8 MiB in all
	)
	msg := func(i int) []byte { // incompressible, numbered
		b := make([]byte, size)
		r := rand.New(rand.NewPCG(uint64(i), 3))
		for j := 0; j < size; j += 8 {
			binary.LittleEndian.PutUint64(b[j:], r.Uint64())
		}
		binary.LittleEndian.PutUint32(b, uint32(i))
		return b
	}
	var sent, received atomic.Int64
	release := make(chan struct{})
	svc := service{
		"/app.Test/Flood": func(s grpc.ServerStream) error {
			for i := range n {
				m := msg(i)
				if err := s.SendMsg(&m); err != nil {
					return err
				}
				sent.Add(1)
			}
			return nil
		},
		"/app.Test/Drain": func(s grpc.ServerStream) error {
			var m []byte
			if err := s.RecvMsg(&m); err != nil {
				return err
			}
			<-release
			for i := 1; ; i++ {
				if err := s.RecvMsg(&m); err == io.EOF {
					received.Store(int64(i))
					return s.SendMsg(&m)
				} else if err != nil {
					return err
				}
				if !bytes.Equal(m, msg(i)) {
					return status.Errorf(codes.DataLoss, "message %d differs", i)
				}
			}
		},
	}
	const window = 64 << 10
	c := newChain(t, svc, setup{
		bufSize: window,
		dial:    []grpc.DialOption{grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window)},
		serve:   []grpc.ServerOption{grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window)},
	})

	t.Run("server to client", func(t *testing.T) {
		s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ServerStreams: true}, "/app.Test/Flood")
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var m []byte
		if err := s.RecvMsg(&m); err != nil || !bytes.Equal(m, msg(0)) {
			t.Fatal(err)
		}
		held := settle(&sent)
		t.Logf("the client read 1 message of %d; the server could send %d", n, held)
		if held >= n/2 {
			t.Fatalf("the server sent %d of %d messages to a client that read 1", held, n)
		}
		for i := 1; i < n; i++ {
			if err := s.RecvMsg(&m); err != nil || !bytes.Equal(m, msg(i)) {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		if err := s.RecvMsg(&m); err != io.EOF {
			t.Fatal(err)
		}
	})

	t.Run("client to server", func(t *testing.T) {
		s := newStream(t, timeout(t), c.client, grpc.StreamDesc{ClientStreams: true}, "/app.Test/Drain")
		var wrote atomic.Int64
		done := make(chan error, 1)
		go func() {
			for i := range n {
				m := msg(i)
				if err := s.SendMsg(&m); err != nil {
					done <- err
					return
				}
				wrote.Add(1)
			}
			done <- s.CloseSend()
		}()
		held := settle(&wrote)
		t.Logf("the server read 1 message of %d; the client could send %d", n, held)
		if held >= n/2 {
			t.Errorf("the client sent %d of %d messages to a server that read 1", held, n)
		}
		close(release)
		if err := receive(t, done, "end of the sends"); err != nil {
			t.Fatal(err)
		}
		var m []byte
		if err := s.RecvMsg(&m); err != nil || received.Load() != n {
			t.Fatalf("the server read %d of %d messages, %v", received.Load(), n, err)
		}
	})
}

func TestForwardable(t *testing.T) {
	md := metadata.MD{
		":authority": {"a"}, "content-type": {"application/grpc"}, "user-agent": {"u"}, "te": {"trailers"},
		"grpc-accept-encoding": {"gzip"}, "grpc-timeout": {"1S"}, "grpc-status-details-bin": {"x"},
		"k": {"v"}, "k-bin": {"\x00"}, "grpcish": {"kept"},
	}
	got := forwardable(md)
	want := metadata.MD{"k": {"v"}, "k-bin": {"\x00"}, "grpcish": {"kept"}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for k, v := range want {
		if !equal(got[k], v) {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	for ct, want := range map[string]string{
		"application/grpc": "", "application/grpc+proto": "proto", "application/grpc+json": "json",
		"application/grpc;x": "x", "application/grpcx": "", "text/plain": "",
	} {
		if got := contentSubtype(metadata.Pairs("content-type", ct)); got != want {
			t.Errorf("%q: subtype %q, want %q", ct, got, want)
		}
	}
	if got := contentSubtype(metadata.MD{}); got != "" {
		t.Errorf("no content-type: subtype %q", got)
	}
}
