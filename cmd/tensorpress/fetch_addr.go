package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
)

// defaultHubPort is the port of an address given without one: the hub's
// (its --listen default).
const defaultHubPort = "7077"

// hubTarget is a --hub address made into a gRPC target.
type hubTarget struct {
	target string // for grpc.NewClient
	tls    bool   // https:// asked for TLS
	plain  bool   // http:// asked for plain text
}

// parseHubAddr reads an address as gRPC users write it: host, host:port,
// [v6]:port, a bare IPv6 address, dns:///host[:port], unix:///path
// (unix:path), or http:// and https:// before host[:port] (plain text and
// TLS). A missing port is the hub's, 7077.
func parseHubAddr(s string) (hubTarget, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return hubTarget{}, errors.New("empty address")
	}
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if strings.HasPrefix(s, "unix:") {
			return hubTarget{target: s}, nil
		}
		hp, err := hostPort(s)
		return hubTarget{target: hp}, err
	}
	var t hubTarget
	switch strings.ToLower(scheme) {
	case "unix", "unix-abstract":
		return hubTarget{target: s}, nil
	case "dns":
		// dns:[//authority]/host[:port]
		auth, host, ok := strings.Cut(rest, "/")
		if !ok || host == "" {
			return t, fmt.Errorf("%q: want dns:///host:port", s)
		}
		hp, err := hostPort(host)
		return hubTarget{target: "dns://" + auth + "/" + hp}, err
	case "http":
		t.plain = true
	case "https":
		t.tls = true
	default:
		return t, fmt.Errorf("%q: the scheme %s:// is not one fetch knows: write host:port, dns:///host:port, unix:///path, http://host:port (plain text) or https://host:port (TLS)", s, scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		return t, fmt.Errorf("%q: %v", s, err)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return t, fmt.Errorf("%q: a hub address is host:port, without a path, query or user", s)
	}
	t.target, err = hostPort(u.Host)
	return t, err
}

// hostPort adds the default port to host (a name, an IPv4 address, an
// IPv6 address bare or in brackets), or checks host:port.
func hostPort(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("no host in the address")
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		s = net.JoinHostPort(s[1:len(s)-1], defaultHubPort)
	case strings.Count(s, ":") >= 2 && !strings.HasPrefix(s, "["):
		ip := net.ParseIP(s)
		if ip == nil {
			return "", fmt.Errorf("%q: want host:port (an IPv6 address in brackets: [::1]:7077)", s)
		}
		return net.JoinHostPort(s, defaultHubPort), nil
	case !strings.Contains(s, ":"):
		return net.JoinHostPort(s, defaultHubPort), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%q: want host:port (an IPv6 address in brackets: [::1]:7077): %v", s, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	if host == "" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port), nil
}

// dialHub returns a client connection to the hub at addr with the
// authentication of cfg: TLS where cfg has a CA or a client certificate,
// or https:// asked for it (the system's roots then), the token on every
// call. Reconnection after a failure waits at most maxWait.
func dialHub(addr string, cfg auth.Config, maxWait time.Duration) (*grpc.ClientConn, hubTarget, error) {
	t, err := parseHubAddr(addr)
	if err != nil {
		return nil, t, usagef("--hub %v", err)
	}
	if t.plain && cfg.ClientTLS() {
		return nil, t, usagef("--hub %s is plain text (http://), but --tls-ca or --tls-cert ask for TLS: write https:// or host:port", addr)
	}
	if err := cfg.Check(); err != nil {
		return nil, t, err
	}
	opts, err := cfg.DialOptions()
	if err != nil {
		return nil, t, err
	}
	if t.tls && !cfg.ClientTLS() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	}
	bc := backoff.DefaultConfig
	bc.BaseDelay, bc.MaxDelay = 100*time.Millisecond, maxWait
	opts = append(opts, grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 10 * time.Second}))
	conn, err := grpc.NewClient(t.target, opts...)
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
