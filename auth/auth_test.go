package auth

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/internal/testcert"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs an echo server with cfg on loopback and returns its address.
func serve(t *testing.T, cfg Config) string {
	t.Helper()
	opts, err := cfg.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(append(opts, grpctest.ServerOptions()...)...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// call makes one echo call to addr as a client with cfg.
func call(t *testing.T, addr string, cfg Config) error {
	t.Helper()
	opts, err := cfg.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, out := []byte("hello"), []byte(nil)
	return conn.Invoke(ctx, grpctest.EchoMethod, &in, &out, grpctest.CallOptions("")...)
}

func writeToken(t *testing.T, tok string) string {
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMutualTLS(t *testing.T) {
	f, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, Config{CertFile: f.ServerCert, KeyFile: f.ServerKey, CAFile: f.CA})
	if err := call(t, addr, Config{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	if err := call(t, addr, Config{CAFile: f.CA}); status.Code(err) != codes.Unavailable {
		t.Fatalf("client without a certificate: %v, want Unavailable (handshake refused)", err)
	}
	if err := call(t, addr, Config{CAFile: f.CA, CertFile: f.StrangerCert, KeyFile: f.StrangerKey}); status.Code(err) != codes.Unavailable {
		t.Fatalf("client with another CA's certificate: %v", err)
	}
	if err := call(t, addr, Config{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("plain-text client: %v", err)
	}
}

func TestToken(t *testing.T) {
	good := writeToken(t, "0123456789abcdef0123456789abcdef")
	bad := writeToken(t, "fedcba9876543210fedcba9876543210")
	addr := serve(t, Config{TokenFile: good})
	if err := call(t, addr, Config{TokenFile: good}); err != nil {
		t.Fatalf("right token: %v", err)
	}
	for name, cfg := range map[string]Config{"no token": {}, "wrong token": {TokenFile: bad}} {
		if err := call(t, addr, cfg); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	// With TLS too.
	f, err := testcert.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr = serve(t, Config{CertFile: f.ServerCert, KeyFile: f.ServerKey, TokenFile: good})
	if err := call(t, addr, Config{CAFile: f.CA, TokenFile: good}); err != nil {
		t.Fatalf("TLS and token: %v", err)
	}
	if err := call(t, addr, Config{CAFile: f.CA}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("TLS without token: %v", err)
	}
}

func TestCheck(t *testing.T) {
	short := writeToken(t, "short")
	if err := (Config{TokenFile: short}).Check(); err == nil || !strings.Contains(err.Error(), "fewer than") {
		t.Errorf("short token: %v", err)
	}
	if err := (Config{CertFile: "x"}).Check(); err == nil {
		t.Error("certificate without key accepted")
	}
	if err := (Config{CAFile: short}).Check(); err == nil {
		t.Error("CA file without a certificate accepted")
	}
	if _, err := (Config{TokenFile: short}).ServerOptions(); err == nil {
		t.Error("ServerOptions took a short token")
	}
}

func TestCheckListen(t *testing.T) {
	tok := writeToken(t, "0123456789abcdef0123456789abcdef")
	for _, c := range []struct {
		addr string
		cfg  Config
		ok   bool
	}{
		{"127.0.0.1:7000", Config{}, true},
		{"[::1]:7000", Config{}, true},
		{"localhost:7000", Config{}, true},
		{":7000", Config{}, false},
		{"0.0.0.0:7000", Config{}, false},
		{"10.1.2.3:7000", Config{}, false},
		{":7000", Config{CertFile: "c", KeyFile: "k"}, false}, // TLS alone lets anyone in
		{":7000", Config{CertFile: "c", KeyFile: "k", CAFile: "ca"}, true},
		{":7000", Config{TokenFile: tok}, true},
		{":7000", Config{Insecure: true}, true},
	} {
		err := c.cfg.CheckListen(c.addr)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %+v) = %v", c.addr, c.cfg, err)
		}
		if err != nil && (!errors.Is(err, ErrOpenListener) || !strings.Contains(err.Error(), "--insecure")) {
			t.Errorf("CheckListen error %q does not say what to do", err)
		}
	}
}
