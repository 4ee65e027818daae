package hub

import (
	"strings"
	"testing"
)

// TestParseAddr: addresses as gRPC users write them.
func TestParseAddr(t *testing.T) {
	for _, c := range []struct {
		in, target string
		tls, plain bool
		err        string
	}{
		{in: "127.0.0.1", target: "127.0.0.1:7077"},
		{in: "127.0.0.1:9000", target: "127.0.0.1:9000"},
		{in: "hub.internal", target: "hub.internal:7077"},
		{in: "hub.internal:80", target: "hub.internal:80"},
		{in: ":9000", target: "localhost:9000"},
		{in: "::1", target: "[::1]:7077"},
		{in: "[::1]", target: "[::1]:7077"},
		{in: "[::1]:9000", target: "[::1]:9000"},
		{in: "dns:///hub.internal:9000", target: "dns:///hub.internal:9000"},
		{in: "dns:///hub.internal", target: "dns:///hub.internal:7077"},
		{in: "dns://8.8.8.8/hub.internal", target: "dns://8.8.8.8/hub.internal:7077"},
		{in: "unix:///run/hub.sock", target: "unix:///run/hub.sock"},
		{in: "unix:hub.sock", target: "unix:hub.sock"},
		{in: "http://127.0.0.1:9000", target: "127.0.0.1:9000", plain: true},
		{in: "http://127.0.0.1", target: "127.0.0.1:7077", plain: true},
		{in: "https://hub.internal", target: "hub.internal:7077", tls: true},
		{in: "https://hub.internal:443/", target: "hub.internal:443", tls: true},
		{in: "grpc://hub:1", err: "scheme grpc:// is not one a hub address takes"},
		{in: "http://hub:1/models", err: "without a path"},
		{in: "hub:port", err: `port "port" is not a number`},
		{in: "hub:0", err: "is not a number from 1"},
		{in: "1:2:3:x", err: "IPv6 address in brackets"},
		{in: "", err: "empty address"},
		{in: "dns:///", err: "want dns:///host:port"},
	} {
		got, err := ParseAddr(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error with %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("%q: %v", c.in, err)
		case got != Addr{Target: c.target, TLS: c.tls, Plain: c.plain}:
			t.Errorf("%q: %+v, want %s tls=%v plain=%v", c.in, got, c.target, c.tls, c.plain)
		}
	}
}
