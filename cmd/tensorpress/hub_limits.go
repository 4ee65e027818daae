package main

import (
	"crypto/subtle"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/hub"
)

// authFlags are a server's authentication flags (package auth).
type authFlags struct {
	cfg auth.Config
}

func addAuthFlags(fs *flag.FlagSet) *authFlags {
	a := &authFlags{}
	fs.StringVar(&a.cfg.CertFile, "tls-cert", "", "TLS certificate `file` (PEM), with --tls-key: TLS on")
	fs.StringVar(&a.cfg.KeyFile, "tls-key", "", "TLS key `file` (PEM)")
	fs.StringVar(&a.cfg.CAFile, "tls-ca", "", "CA certificates `file` (PEM): client certificates signed by them required (mutual TLS)")
	fs.StringVar(&a.cfg.TokenFile, "token-file", "", "`file` holding a shared token every call must carry (tensorpress-token metadata; 16 bytes at least)")
	fs.BoolVar(&a.cfg.Insecure, "insecure", false, "allow a --listen or --metrics address off loopback with no client certificates and no token")
	return a
}

// check refuses flags that cannot work, and listeners off loopback that
// anyone could use.
func (a *authFlags) check(listen, metrics string) error {
	c := a.cfg
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return usagef("--tls-cert and --tls-key go together")
	case c.CAFile != "" && c.CertFile == "":
		return usagef("--tls-ca needs --tls-cert and --tls-key (client certificates are asked for over TLS)")
	}
	if err := c.Check(); err != nil {
		return err
	}
	for flag, addr := range map[string]string{"--listen": listen, "--metrics": metrics} {
		if addr == "" {
			continue
		}
		if err := c.CheckListen(addr); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// bearerCheck returns an HTTP middleware that requires c's token as a
// bearer token (Authorization: Bearer TOKEN), or lets every request in
// when c has no token.
func bearerCheck(c auth.Config) (func(http.Handler) http.Handler, error) {
	if c.TokenFile == "" {
		return func(h http.Handler) http.Handler { return h }, nil
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return nil, err
	}
	want := []byte("Bearer " + strings.TrimSpace(string(b)))
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "missing or wrong token", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}, nil
}

// limitFlags are the hub's per-connection limits (hub.Limits) and the
// bound on an upload's slow-decoding bytes (hub.WithUploadLimits).
type limitFlags struct {
	l          hub.Limits
	maxStreams *uint
	maxMessage *int64
	maxSlow    *int64
}

func addLimitFlags(fs *flag.FlagSet) *limitFlags {
	f := &limitFlags{l: hub.DefaultLimits()}
	fs.DurationVar(&f.l.Handshake, "handshake-timeout", hub.DefaultHandshake, "time a new connection gets to open HTTP/2 (and TLS) before it is closed")
	fs.DurationVar(&f.l.Idle, "idle-timeout", hub.DefaultIdle, "a connection with no call open for this long is closed")
	f.maxStreams = fs.Uint("max-streams", hub.DefaultMaxStreams, "calls open at once on one connection")
	f.maxMessage = sizeFlag(fs, "max-message", hub.DefaultMaxMessage, "largest message received, in `bytes` (an upload's update)")
	fs.IntVar(&f.l.MaxConns, "max-conns", hub.DefaultMaxConns, "connections open at once, all peers together")
	fs.IntVar(&f.l.MaxConnsPerPeer, "max-conns-per-peer", hub.DefaultMaxPerPeer, "connections open at once from one IP address")
	f.maxSlow = sizeFlag(fs, "max-slow-decoded", hub.DefaultUploadSlowDecoded, "`bytes` of an upload's update that may decode through stages of some MB/s (floatcm, floatrank)")
	return f
}

func (f *limitFlags) check() error {
	if *f.maxStreams == 0 || *f.maxStreams > 1<<20 {
		return usagef("--max-streams %d: want 1 to %d", *f.maxStreams, 1<<20)
	}
	if *f.maxMessage > 1<<30 {
		return usagef("--max-message %d: want at most 1GiB", *f.maxMessage)
	}
	if *f.maxSlow <= 0 {
		return usagef("--max-slow-decoded %d: want more than 0", *f.maxSlow)
	}
	f.l.MaxStreams, f.l.MaxMessage = uint32(*f.maxStreams), int(*f.maxMessage)
	if err := f.l.Check(); err != nil {
		return usagef("%v", err)
	}
	return nil
}
