// Package auth authenticates the peers of tensorpress's services (the
// hub, the proxies) with mutual TLS, with a shared token, or both, and
// refuses to open a port off this host without either.
//
// Config says what a side presents and expects; ServerOptions and
// DialOptions turn it into grpc-go options, ServerTLS and ClientTLS into
// crypto/tls configurations for byte streams. The token travels in the
// metadata key TokenKey (not "authorization", which belongs to the
// application a proxy forwards) and is compared in constant time; a call
// without it, or with another, ends with Unauthenticated before any
// handler runs. Without TLS the token crosses the network in the clear:
// use it with TLS off this host.
//
// CheckListen is the rule for every listener: an address that is not
// loopback needs TLS with client certificates (mTLS) or a token, or
// Insecure set by the operator; it says why it refuses.
package auth

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TokenKey is the metadata key that carries the shared token.
const TokenKey = "tensorpress-token"

// MinTokenLen is the shortest token accepted, in bytes (after trimming
// white space): 16 random bytes, hex-encoded, are 32.
const MinTokenLen = 16

// ErrOpenListener is returned by CheckListen for a listener off this host
// with no authentication.
var ErrOpenListener = errors.New("auth: refusing to listen off loopback without authentication")

// Config is what one side presents and expects. The zero Config is
// plain text with no authentication, which CheckListen allows on
// loopback only.
type Config struct {
	// CertFile and KeyFile hold this side's certificate and key (PEM): a
	// server's always with TLS, a client's for mutual TLS.
	CertFile, KeyFile string
	// CAFile holds the certificates (PEM) that the peer's must chain to:
	// on a server, client certificates are then required (mutual TLS); on
	// a client, it turns TLS on and checks the server's certificate.
	CAFile string
	// ServerName is the name a client checks the server's certificate
	// for; empty: the host of the address it dials.
	ServerName string
	// TokenFile holds the shared token (white space around it trimmed).
	TokenFile string
	// Insecure allows a listener off loopback without authentication.
	Insecure bool
}

// ServerTLS reports whether a server with c speaks TLS (CertFile set).
func (c Config) ServerTLS() bool { return c.CertFile != "" }

// ClientTLS reports whether a client with c speaks TLS (CAFile or a
// client certificate set).
func (c Config) ClientTLS() bool { return c.CAFile != "" || c.CertFile != "" }

// Mutual reports whether a server with c requires client certificates.
func (c Config) Mutual() bool { return c.CertFile != "" && c.CAFile != "" }

// Check reports a Config that cannot work: a certificate without its key,
// a file that does not load, a token too short.
func (c Config) Check() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("auth: a certificate and its key go together")
	}
	if c.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
	}
	if c.CAFile != "" {
		if _, err := pool(c.CAFile); err != nil {
			return err
		}
	}
	if c.TokenFile != "" {
		if _, err := c.token(); err != nil {
			return err
		}
	}
	return nil
}

// CheckListen returns nil if a server with c may listen on addr: addr is
// on loopback, or c requires client certificates or a token, or c is
// Insecure. Otherwise it returns an error wrapping ErrOpenListener that
// says what to do. TLS without client certificates encrypts but lets
// anyone in, so it does not count.
func (c Config) CheckListen(addr string) error {
	if c.Insecure || c.Mutual() || c.TokenFile != "" || loopbackAddr(addr) {
		return nil
	}
	return fmt.Errorf("%w: %s can be reached from other hosts; give client certificates to require (a CA file with the server's certificate), a shared token file, or --insecure to accept anyone", ErrOpenListener, addr)
}

// loopbackAddr reports whether a listen address (host:port) stays on
// this host: "localhost" or a loopback IP. An empty host (":7000") is
// every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("auth: %s: no PEM certificate", file)
	}
	return p, nil
}

func (c Config) token() (string, error) {
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("auth: token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinTokenLen {
		return "", fmt.Errorf("auth: the token in %s has %d bytes, fewer than %d", c.TokenFile, len(tok), MinTokenLen)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("auth: the token in %s spans lines", c.TokenFile)
	}
	return tok, nil
}

// ServerTLSConfig returns the TLS configuration of a server with c (nil
// without CertFile): its certificate, and client certificates required
// and checked against CAFile where it is set.
func (c Config) ServerTLSConfig() (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		p, err := pool(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = p
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// ClientTLSConfig returns the TLS configuration of a client with c (nil
// when c.ClientTLS is false): the server's certificate checked against
// CAFile (the system's roots without it), this side's certificate
// presented where CertFile is set.
func (c Config) ClientTLSConfig() (*tls.Config, error) {
	if !c.ClientTLS() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		p, err := pool(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = p
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ServerOptions returns the grpc-go options of a server with c: its TLS
// credentials, and interceptors that refuse a call without the token.
func (c Config) ServerOptions() ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	tc, err := c.ServerTLSConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	if c.TokenFile != "" {
		tok, err := c.token()
		if err != nil {
			return nil, err
		}
		check := tokenCheck(tok)
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := check(ctx); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := check(ss.Context()); err != nil {
					return err
				}
				return h(srv, ss)
			}))
	}
	return opts, nil
}

// tokenCheck returns the check of a call's metadata against tok.
func tokenCheck(tok string) func(context.Context) error {
	want := []byte(tok)
	return func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(TokenKey)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return status.Error(codes.Unauthenticated, "auth: missing or wrong token")
		}
		return nil
	}
}

// DialOptions returns the grpc-go options of a client with c: TLS
// credentials (or plain text), and the token on every call.
func (c Config) DialOptions() ([]grpc.DialOption, error) {
	tc, err := c.ClientTLSConfig()
	if err != nil {
		return nil, err
	}
	var opts []grpc.DialOption
	if tc != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.TokenFile != "" {
		tok, err := c.token()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{tok: tok, secure: tc != nil}))
	}
	return opts, nil
}

// tokenCreds puts the token into every call's metadata.
type tokenCreds struct {
	tok    string
	secure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{TokenKey: t.tok}, nil
}

// RequireTransportSecurity is true with TLS on, so that gRPC never sends
// the token in the clear on a connection that was meant to be encrypted.
func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }
