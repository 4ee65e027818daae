package main

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/hub"
)

// dialHub returns a client connection to the hub at addr with the
// authentication of cfg: TLS where cfg has a CA or a client certificate,
// or https:// asked for it (the system's roots then), the token on every
// call. Reconnection after a failure waits at most maxWait.
func dialHub(addr string, cfg auth.Config, maxWait time.Duration) (*grpc.ClientConn, hub.Addr, error) {
	t, err := hub.ParseAddr(addr)
	if err != nil {
		return nil, t, usagef("--hub %v", err)
	}
	if t.Plain && cfg.ClientTLS() {
		return nil, t, usagef("--hub %s is plain text (http://), but --tls-ca or --tls-cert ask for TLS: write https:// or host:port", addr)
	}
	if err := cfg.Check(); err != nil {
		return nil, t, err
	}
	opts, err := cfg.DialOptions()
	if err != nil {
		return nil, t, err
	}
	if t.TLS && !cfg.ClientTLS() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	}
	bc := backoff.DefaultConfig
	bc.BaseDelay, bc.MaxDelay = 100*time.Millisecond, maxWait
	opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 10 * time.Second}))
	conn, err := grpc.NewClient(t.Target, opts...)
	if err != nil {
		return nil, t, fmt.Errorf("--hub %s: %w", addr, err)
	}
	return conn, t, nil
}

// notHub says what a failed first call tells about the peer at addr, if it
// is not a tensorpress hub, or a TLS mismatch; nil otherwise.
func notHub(addr string, secure bool, err error) error {
	msg := status.Convert(err).Message()
	code := status.Code(err)
	switch {
	case code == codes.Unimplemented:
		return fmt.Errorf("%s is not a tensorpress hub: a gRPC server without the Hub service (%s)", addr, msg)
	case strings.Contains(msg, "frame too large") || strings.Contains(msg, "malformed HTTP") ||
		strings.Contains(msg, "HTTP/1"):
		return fmt.Errorf("%s is not a tensorpress hub: it does not speak HTTP/2 (an HTTP/1 server?)", addr)
	case strings.Contains(msg, "content-type"):
		return fmt.Errorf("%s is not a tensorpress hub: it answers HTTP/2 but not gRPC (%s)", addr, msg)
	case secure && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("the hub at %s does not speak TLS: drop --tls-ca, --tls-cert and https://", addr)
	case !secure && (strings.Contains(msg, "server preface") || strings.Contains(msg, "before server preface")):
		return fmt.Errorf("%s closed the connection before speaking HTTP/2: a hub with TLS? (give --tls-ca, or https://): %s", addr, msg)
	case strings.Contains(msg, "certificate") || strings.Contains(msg, "x509"):
		return fmt.Errorf("TLS with the hub at %s: %s", addr, msg)
	case code == codes.Unauthenticated || code == codes.PermissionDenied:
		return fmt.Errorf("the hub at %s refused this client: %s (--token-file, --tls-cert)", addr, msg)
	}
	return nil
}
