package hub

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// What hub/doc.go says of serving: TLS passes through untouched, and
// server keepalive finds a peer that vanished without closing. Both on
// real TCP connections on loopback.

// serveTCP serves s on a loopback TCP port and returns its address; s is
// stopped when the test ends.
func serveTCP(t *testing.T, s *grpc.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// dial returns a client connection to addr, closed when the test ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// selfSigned returns a certificate for name and 127.0.0.1 signed with its
// own ECDSA P-256 key (good for a server and a client), and a pool that
// trusts it.
func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial.Add(serial, big.NewInt(1)),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, pool
}

// countingConn counts the bytes read from the connection: what came over
// the wire, TLS records and all.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// fetchAll fetches the newest version and checks that it is m, every
// tensor bit for bit and in order.
func fetchAll(c hubpb.HubClient, m []*codec.Tensor) error {
	i := 0
	res, err := Fetch(context.Background(), c, Request{Credit: 4}, func(x *codec.Tensor) error {
		if i >= len(m) {
			return errors.New("a tensor more than the model has")
		}
		w := m[i]
		if x.Name != w.Name || x.DType != w.DType || !slices.Equal(x.Shape, w.Shape) || !bytes.Equal(x.Data, w.Data) {
			return errors.New("tensor " + w.Name + " differs")
		}
		i++
		return nil
	})
	if err != nil {
		return err
	}
	if i != len(m) || res.Full != len(m) {
		return errors.New("not every tensor arrived")
	}
	return nil
}

// TestFetchOverTLS serves a hub over TLS on loopback (a self-signed
// ECDSA certificate made here): a client that trusts it fetches the
// model bit for bit, in many chunks; the bytes it read off the wire are
// the hub's compressed chunks plus TLS's and HTTP/2's framing, fewer than
// the model's own (TLS neither undoes nor redoes the hub's compression);
// a client that does not trust the certificate, or speaks plaintext, is
// refused with Unavailable before the hub sees a fetch. With client
// certificates required (mutual TLS), a client with one fetches and a
// client without one is refused the same way.
func TestFetchOverTLS(t *testing.T) {
	h, err := New(WithChunkSize(16 << 10))
	if err != nil {
		t.Fatal(err)
	}
	m := model(12, 21) // 3 of 64-192 KiB, the rest small; 384 KiB of float32 weights
	if err := h.Publish(1, m); err != nil {
		t.Fatal(err)
	}
	serverCert, serverCA := selfSigned(t, "hub.test")
	clientCert, clientCA := selfSigned(t, "client.test")
	// Strangers: the same names, other keys.
	_, strangerCA := selfSigned(t, "hub.test")
	strangerCert, _ := selfSigned(t, "client.test")
	tlsClient := func(cfg *tls.Config) grpc.DialOption {
		cfg.ServerName = "hub.test"
		return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	}
	// refused: a fetch with these options fails with Unavailable, and the
	// hub's handler never runs.
	refused := func(t *testing.T, addr string, opts ...grpc.DialOption) {
		t.Helper()
		before := h.Stats().Fetches
		err := fetchAll(hubpb.NewHubClient(dial(t, addr, opts...)), m)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%v, want %v", err, codes.Unavailable)
		}
		t.Logf("refused: %v", err)
		if n := h.Stats().Fetches - before; n != 0 {
			t.Fatalf("the hub served %d fetches to a refused client", n)
		}
	}

	t.Run("server", func(t *testing.T) {
		s := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}})))
		hubpb.RegisterHubServer(s, NewServer(h))
		addr := serveTCP(t, s)
		var wire atomic.Int64
		conn := dial(t, addr, tlsClient(&tls.Config{RootCAs: serverCA}),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return countingConn{c, &wire}, nil
			}))
		before := h.Stats()
		if err := fetchAll(hubpb.NewHubClient(conn), m); err != nil {
			t.Fatal(err)
		}
		plan := h.plan(m)
		if sent := h.Stats().ChunksSent - before.ChunksSent; sent != int64(len(plan)) || len(plan) <= len(m) {
			t.Fatalf("%d chunks sent, %d in the plan, for %d tensors", sent, len(plan), len(m))
		}
		ver, _ := h.get(1)
		var raw, frames int64
		for _, x := range m {
			raw += int64(len(x.Data))
		}
		for i := range plan {
			f, err := h.frames(nil, ver, &plan[i], nil, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			frames += int64(len(f))
		}
		n := wire.Load()
		t.Logf("model %d bytes, the hub's chunks %d bytes (%.1f%%), read off the TLS connection %d bytes", raw, frames, 100*float64(frames)/float64(raw), n)
		// The framing (TLS records, HTTP/2 frames, gRPC and protobuf
		// headers, the handshake) is well under 2% plus 16 KiB here.
		if frames >= raw || n < frames || n > frames+frames/50+16<<10 {
			t.Fatalf("model %d bytes, chunks %d bytes, wire %d bytes", raw, frames, n)
		}
		t.Run("untrusted", func(t *testing.T) { refused(t, addr, tlsClient(&tls.Config{RootCAs: strangerCA})) })
		t.Run("plaintext", func(t *testing.T) { refused(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials())) })
	})

	t.Run("mutual", func(t *testing.T) {
		s := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA})))
		hubpb.RegisterHubServer(s, NewServer(h))
		addr := serveTCP(t, s)
		conn := dial(t, addr, tlsClient(&tls.Config{RootCAs: serverCA, Certificates: []tls.Certificate{clientCert}}))
		if err := fetchAll(hubpb.NewHubClient(conn), m); err != nil {
			t.Fatal(err)
		}
		t.Run("no certificate", func(t *testing.T) { refused(t, addr, tlsClient(&tls.Config{RootCAs: serverCA})) })
		t.Run("untrusted certificate", func(t *testing.T) {
			refused(t, addr, tlsClient(&tls.Config{RootCAs: serverCA, Certificates: []tls.Certificate{strangerCert}}))
		})
	})
}

// blackHole relays TCP connections to a server until it is cut; from then
// on it forwards nothing either way, and closes nothing, as a peer that
// vanished (powered off, its route dropped) does: the server's writes
// still succeed (the relay's kernel takes them), and nothing comes back.
type blackHole struct {
	ln       net.Listener
	cut      atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
	upstream []string      // the relay's addresses towards the server
	closed   chan struct{} // the server closed a relayed connection
	once     sync.Once
	wg       sync.WaitGroup
}

func newBlackHole(t *testing.T, server string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln, closed: make(chan struct{})}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, s)
			b.upstream = append(b.upstream, s.LocalAddr().String())
			b.mu.Unlock()
			b.wg.Add(2)
			go b.pipe(s, c, nil)
			go b.pipe(c, s, func() { b.once.Do(func() { close(b.closed) }) })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// pipe copies src to dst until cut, then drops what it reads; eof is
// called when src ends.
func (b *blackHole) pipe(dst, src net.Conn, eof func()) {
	defer b.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if eof != nil {
				eof()
			}
			return
		}
	}
}

func (b *blackHole) addr() string { return b.ln.Addr().String() }

// isUpstream reports whether addr is one of the relay's connections to
// the server.
func (b *blackHole) isUpstream(addr string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.upstream, addr)
}

// TestKeepaliveFindsVanishedClient: two clients hold a fetch stalled at
// its credit (each has taken its 2 chunks and grants no more), one
// through a relay that then turns into a black hole. The server's
// keepalive (ping after Time without reads, give up Timeout later) finds
// the vanished one: its connection is closed and its Fetch handler
// returns, where nothing else would end it (the hub waits for credit
// forever). The other client, as idle but there, answers the pings
// (gRPC's transport does, whatever the application reads) and is left
// alone: it then fetches the rest.
//
// The client side is not tested: grpc-go raises a client's
// keepalive.ClientParameters.Time below 10 s to 10 s, so a client would
// find a vanished hub only after 10 s and Timeout, too slow for a unit
// test; the mechanism is the same.
func TestKeepaliveFindsVanishedClient(t *testing.T) {
	h, err := New(WithChunkSize(4 << 10))
	if err != nil {
		t.Fatal(err)
	}
	m := model(8, 3) // 2 large tensors in 4 KiB chunks: many chunks
	if err := h.Publish(1, m); err != nil {
		t.Fatal(err)
	}
	type end struct {
		peer string
		err  error
	}
	ended := make(chan end, 8)
	s := grpc.NewServer(
		// grpc-go takes at least 1 s for a server's Time (less is raised
		// to 1 s, with a warning); Timeout has no minimum.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Second, Timeout: 500 * time.Millisecond}),
		// The policy is about the clients' pings, not the server's: a
		// client whose keepalive Time is shorter than MinTime (default
		// 5 min), or that pings with no stream open while
		// PermitWithoutStream is false, gets its connection ended
		// (GOAWAY, too_many_pings). So MinTime is at most the clients'
		// Time (10 s at the least in grpc-go), and PermitWithoutStream
		// matches theirs.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			err := handler(srv, ss)
			var addr string
			if p, ok := peer.FromContext(ss.Context()); ok {
				addr = p.Addr.String()
			}
			ended <- end{addr, err}
			return err
		}))
	hubpb.RegisterHubServer(s, NewServer(h))
	addr := serveTCP(t, s)
	bh := newBlackHole(t, addr)
	clientKeepalive := grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true})
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	vanishing := openFetch(t, hubpb.NewHubClient(dial(t, bh.addr(), creds, clientKeepalive)), 2)
	present := openFetch(t, hubpb.NewHubClient(dial(t, addr, creds, clientKeepalive)), 2)
	for _, st := range []hubpb.Hub_FetchClient{vanishing, present} {
		for range 2 {
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	bh.cut.Store(true)
	start := time.Now()

	// Generous: the server should give up after about Time + Timeout.
	select {
	case e := <-ended:
		if !bh.isUpstream(e.peer) || e.err == nil {
			t.Fatalf("a fetch from %s ended first (%v), not the vanished client's", e.peer, e.err)
		}
		t.Logf("the vanished client's fetch ended after %v: %v", time.Since(start).Round(time.Millisecond), e.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the server still holds the vanished client's fetch after 10 s")
	}
	select {
	case <-bh.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not close the vanished client's connection")
	}

	// The present client was as idle all along: its fetch is still open,
	// and completes when it reads again.
	select {
	case e := <-ended:
		t.Fatalf("the present client's fetch ended too (%s: %v)", e.peer, e.err)
	default:
	}
	if err := present.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: 64}}); err != nil {
		t.Fatal(err)
	}
	n := 2
	for {
		c, err := present.Recv()
		if err != nil {
			t.Fatalf("after %d chunks: %v", n, err)
		}
		n++
		if c.Last {
			break
		}
		present.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: 1}})
	}
	if plan := len(h.plan(m)); n != plan {
		t.Fatalf("%d chunks, want %d", n, plan)
	}
	select {
	case e := <-ended:
		if e.err != nil || bh.isUpstream(e.peer) {
			t.Fatalf("the present client's fetch ended with %v (from %s)", e.err, e.peer)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the present client's fetch did not end after its last chunk")
	}
}
