package hub

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// DefaultPort is the port of an address given without one: the hub's
// (the --listen default of tensorpress hub).
const DefaultPort = "7077"

// Addr is a hub address made into a gRPC target.
type Addr struct {
	Target string // for grpc.NewClient
	TLS    bool   // https:// asked for TLS
	Plain  bool   // http:// asked for plain text
}

// ParseAddr reads an address as gRPC users write it: host, host:port,
// [v6]:port, a bare IPv6 address, dns:///host[:port], unix:///path
// (unix:path), or http:// and https:// before host[:port] (plain text and
// TLS). A missing port is the hub's, 7077.
func ParseAddr(s string) (Addr, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Addr{}, errors.New("empty address")
	}
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		if strings.HasPrefix(s, "unix:") {
			return Addr{Target: s}, nil
		}
		hp, err := hostPort(s)
		return Addr{Target: hp}, err
	}
	var t Addr
	switch strings.ToLower(scheme) {
	case "unix", "unix-abstract":
		return Addr{Target: s}, nil
	case "dns":
		// dns:[//authority]/host[:port]
		authority, host, ok := strings.Cut(rest, "/")
		if !ok || host == "" {
			return t, fmt.Errorf("%q: want dns:///host:port", s)
		}
		hp, err := hostPort(host)
		return Addr{Target: "dns://" + authority + "/" + hp}, err
	case "http":
		t.Plain = true
	case "https":
		t.TLS = true
	default:
		return t, fmt.Errorf("%q: the scheme %s:// is not one a hub address takes: write host:port, dns:///host:port, unix:///path, http://host:port (plain text) or https://host:port (TLS)", s, scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		return t, fmt.Errorf("%q: %v", s, err)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return t, fmt.Errorf("%q: a hub address is host:port, without a path, query or user", s)
	}
	t.Target, err = hostPort(u.Host)
	return t, err
}

// hostPort adds the default port to host (a name, an IPv4 address, an
// IPv6 address bare or in brackets), or checks host:port.
func hostPort(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("no host in the address")
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		s = net.JoinHostPort(s[1:len(s)-1], DefaultPort)
	case strings.Count(s, ":") >= 2 && !strings.HasPrefix(s, "["):
		ip := net.ParseIP(s)
		if ip == nil {
			return "", fmt.Errorf("%q: want host:port (an IPv6 address in brackets: [::1]:7077)", s)
		}
		return net.JoinHostPort(s, DefaultPort), nil
	case !strings.Contains(s, ":"):
		return net.JoinHostPort(s, DefaultPort), nil
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
