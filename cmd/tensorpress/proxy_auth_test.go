package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/internal/testcert"
)

// TestProxyOpenListener: a proxy told to listen off loopback (":0", every
// interface) without mutual TLS or a token refuses to start, saying why,
// on either side; TLS without client certificates is not enough.
func TestProxyOpenListener(t *testing.T) {
	certs, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"remote", []string{"--side", "remote"}, "refusing to listen off loopback without authentication"},
		{"remote TLS without client certificates", []string{"--side", "remote", "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey}, "refusing to listen off loopback"},
		{"local", []string{"--side", "local"}, "the local side's listener, for the application, has no authentication of its own"},
		{"local with mTLS toward the remote", []string{"--side", "local", "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey, "--tls-ca", certs.CA}, "keep it on loopback"},
		{"metrics", []string{"--side", "remote", "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-ca", certs.CA, "--metrics", ":0"}, "/metrics has no authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb bytes.Buffer
			listen := ":0"
			if tc.name == "metrics" {
				listen = "127.0.0.1:0"
			}
			code := run(append([]string{"proxy", "--listen", listen, "--to", "127.0.0.1:1"}, tc.args...), io.Discard, &errb)
			if code != 1 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "--insecure") {
				t.Fatalf("exit %d, want 1 saying %q and naming --insecure:\n%s", code, tc.want, errb.String())
			}
		})
	}
}

// mtlsArgs are the flags of a proxy with the test's certificates: the
// remote side's server certificate and client CA, or the local side's
// client certificate and server CA.
func mtlsArgs(certs testcert.Files, side string) []string {
	if side == "remote" {
		return []string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-ca", certs.CA}
	}
	return []string{"--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey, "--tls-ca", certs.CA}
}

// TestProxyMutualTLS: a remote proxy (a real process) that requires
// client certificates serves a local proxy that presents one, in gRPC and
// TCP mode; it refuses a client without a certificate, one with a
// certificate of another authority, and a local proxy without a
// certificate (whose calls fail with Unavailable).
func TestProxyMutualTLS(t *testing.T) {
	bin := buildTensorpress(t)
	certs, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	server := echoServer(t)
	remote := startProxyProcess(t, bin, append([]string{"--side", "remote", "--listen", "127.0.0.1:0", "--to", server}, mtlsArgs(certs, "remote")...)...)

	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	local := startProxy(t, "local", remote.addr, mtlsArgs(certs, "local")...)
	noCert := startProxy(t, "local", remote.addr, "--tls-ca", certs.CA)
	defer func() {
		cancel()
		local.wait(t)
		noCert.wait(t)
	}()
	echo(t, dialPlain(t, local.addr), 1<<20)
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	msg, back := []byte("hello"), []byte(nil)
	err = dialPlain(t, noCert.addr).Invoke(cctx, "/app.Service/Call", &msg, &back, grpc.ForceCodec(grpctest.RawCodec{}))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("through a local proxy without a certificate: %v, want Unavailable", err)
	}
	for _, tc := range []struct{ name, cert, key string }{
		{"no certificate", "", ""},
		{"another authority", certs.StrangerCert, certs.StrangerKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialTLS(t, remote.addr, certs.CA, tc.cert, tc.key)
			err := conn.Invoke(cctx, "/app.Service/Call", &msg, &back, grpc.ForceCodec(grpctest.RawCodec{}))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%v, want Unavailable (the handshake refused)", err)
			}
		})
	}
}

// dialTLS dials addr with TLS, checking the server against caFile, with
// the client certificate in certFile if given.
func dialTLS(t *testing.T, addr, caFile, certFile, keyFile string) *grpc.ClientConn {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestProxyToken: a remote proxy that requires a token serves a local
// proxy that sends it; a call without it, or with another, ends with
// Unauthenticated; the token never reaches the application's server.
func TestProxyToken(t *testing.T) {
	dir := t.TempDir()
	tok, other := filepath.Join(dir, "token"), filepath.Join(dir, "other")
	os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(other, []byte("fedcba9876543210fedcba9876543210\n"), 0o600)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []string, 4)
	s := grpc.NewServer(grpc.ForceServerCodec(grpctest.RawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		md, _ := metadataFrom(ss)
		seen <- md
		var m []byte
		if err := ss.RecvMsg(&m); err != nil {
			return err
		}
		return ss.SendMsg(&m)
	}))
	go s.Serve(ln)
	defer s.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	remote := startProxy(t, "remote", ln.Addr().String(), "--token-file", tok)
	good := startProxy(t, "local", remote.addr, "--token-file", tok, "--bandwidth", "1Gbit")
	wrong := startProxy(t, "local", remote.addr, "--token-file", other, "--bandwidth", "1Gbit")
	none := startProxy(t, "local", remote.addr, "--bandwidth", "1Gbit")
	defer func() {
		cancel()
		for _, p := range []*runningProxy{good, wrong, none, remote} {
			p.wait(t)
		}
	}()
	echo(t, dialPlain(t, good.addr), 1000)
	if md := <-seen; len(md) != 0 {
		t.Errorf("the server saw the token: %v", md)
	}
	for name, p := range map[string]*runningProxy{"wrong token": wrong, "no token": none} {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		msg, back := []byte("hello"), []byte(nil)
		err := dialPlain(t, p.addr).Invoke(cctx, "/app.Service/Call", &msg, &back, grpc.ForceCodec(grpctest.RawCodec{}))
		ccancel()
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
}

// metadataFrom returns the values of the token's key in the call's
// metadata.
func metadataFrom(ss grpc.ServerStream) ([]string, bool) {
	md, ok := metadata.FromIncomingContext(ss.Context())
	return md.Get(auth.TokenKey), ok
}

// tcpEcho is a TCP server on loopback that echoes each connection until
// its half-close.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestProxyTCPMutualTLS: in TCP mode, a remote proxy (a real process)
// that requires client certificates carries a local proxy's stream that
// presents one, bit for bit; a connection without TLS gets nothing back,
// and a token is refused as a usage error.
func TestProxyTCPMutualTLS(t *testing.T) {
	bin := buildTensorpress(t)
	certs, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	remote := startProxyProcess(t, bin, append([]string{"--side", "remote", "--mode", "tcp", "--listen", "127.0.0.1:0", "--to", tcpEcho(t)}, mtlsArgs(certs, "remote")...)...)
	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	local := startProxy(t, "local", remote.addr, append([]string{"--mode", "tcp"}, mtlsArgs(certs, "local")...)...)
	defer func() {
		cancel()
		local.wait(t)
	}()
	msg := grpctest.Message(1 << 20)
	for name, addr := range map[string]string{"through the local proxy": local.addr, "plain to the remote": remote.addr} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c.Write(msg)
			c.(*net.TCPConn).CloseWrite()
		}()
		got, _ := io.ReadAll(c)
		c.Close()
		if want := name == "through the local proxy"; bytes.Equal(got, msg) != want {
			t.Errorf("%s: %d bytes back of %d, want them back: %t", name, len(got), len(msg), want)
		}
	}
	// A client that reads its answer late: the remote proxy may be done
	// (everything echoed and its end sent) while the answer still waits
	// in the local proxy's socket, where a reset from the remote's close
	// would drop it (the proxies linger: shut their write side, then read
	// to the peer's end before they close).
	c, err := net.Dial("tcp", local.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(msg)
	c.(*net.TCPConn).CloseWrite()
	time.Sleep(time.Second)
	got, _ := io.ReadAll(c)
	c.Close()
	if !bytes.Equal(got, msg) {
		t.Errorf("read late through the local proxy: %d bytes back of %d", len(got), len(msg))
	}
	var errb bytes.Buffer
	if code := run([]string{"proxy", "--side", "remote", "--mode", "tcp", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:1", "--token-file", certs.CA}, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "mutual TLS only") {
		t.Errorf("a token in TCP mode: exit %d: %s", code, errb.String())
	}
}
