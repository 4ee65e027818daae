package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "google.golang.org/grpc/encoding/gzip" // an application's gzip calls are accepted

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/metrics"
	"github.com/tensorpress/tensorpress/proxy"
)

const proxyText = `
proxy is a gRPC sidecar: one on each side of a slow link, the application
unchanged. The application's client calls the local proxy as if it were
its server; the local proxy forwards every call (any service, any method,
every shape of streaming) over one connection to the remote proxy, which
calls the real server. Metadata, deadlines, cancellation and status codes
pass through; messages arrive bit for bit (lossless: content-addressed
objects, such as Flower's, keep their IDs).

  --side local:  listen for the application's client; --to is the remote proxy.
  --side remote: listen for the local proxy; --to is the application's server.

Between the proxies each message goes as tensorpress frames, lossless, whose
recipes an autotuner chooses per frame for the link; each proxy measures
how fast the other's messages arrive and tells it. Where --to is on this
host (loopback), nothing can be saved: the local proxy passes the
application's connections through as they are, and the remote proxy
passes them on (from a loopback peer only). --bandwidth gives the link's
rate instead of measuring it (and codes on loopback too). Both proxies
must run the same tensorpress release.

Authentication between the proxies: on the remote side --tls-cert and
--tls-key give its certificate, --tls-ca requires client certificates
signed by that authority (mutual TLS), --token-file requires the token in
every call; on the local side the same flags are what it presents to the
remote proxy (--tls-ca checks the remote's certificate). A listener off
loopback without mutual TLS or a token refuses to start unless --insecure;
the local side's listener, for the application, needs --insecure there.

For example, the server's machine runs
  tensorpress proxy --side remote --listen :7000 --to 127.0.0.1:50051 \
    --tls-cert remote.pem --tls-key remote-key.pem --tls-ca ca.pem
and the client's
  tensorpress proxy --side local --listen 127.0.0.1:50051 --to server-host:7000 \
    --tls-cert local.pem --tls-key local-key.pem --tls-ca ca.pem
SIGTERM or SIGINT stops a proxy: calls in flight get --drain to finish.

Limits, for a port on the internet: everything a proxy holds for its peers
(messages received, decoded, coded) is charged to --memory before it is
held, and a call that does not fit fails with RESOURCE_EXHAUSTED; a
message over --max-message is refused before it is decoded. A connection
gets --handshake-timeout to send its first bytes, its TLS and HTTP/2
handshake; --idle-timeout closes connections without calls (or bytes);
--max-streams, --max-conns and --max-conns-per-peer bound the rest.

--mode tcp forwards any byte stream instead (protocols that are not gRPC):
each connection to the local proxy becomes one to the remote proxy that
carries tensorpress frames (package transport), and one from the remote
proxy to --to. Half-closes pass through; the bytes arrive as they were
sent. TCP mode authenticates the hop with mutual TLS only (no token).
`

// proxyFlags are the command line of a proxy.
type proxyFlags struct {
	side, listen, to, mode, metrics, bandwidth    *string
	maxMsg, memory                                *int64
	drain, handshake, idle                        *time.Duration
	maxStreams, maxConns, maxConnsPerPeer         *int
	tlsCert, tlsKey, tlsCA, serverName, tokenFile *string
	insecure                                      *bool
	newLog                                        func() (*slog.Logger, error)
}

func defineProxyFlags(fs *flag.FlagSet, stderr io.Writer) *proxyFlags {
	lim := proxy.DefaultLimits()
	return &proxyFlags{
		side:            fs.String("side", "", "`local` (beside the client) or `remote` (beside the server); required"),
		listen:          fs.String("listen", "", "`address` to listen on (host:port); required"),
		to:              fs.String("to", "", "`address` to forward to: the remote proxy, or the server; required"),
		mode:            fs.String("mode", "grpc", "`grpc` (any gRPC service) or `tcp` (any byte stream, through package transport)"),
		maxMsg:          sizeFlag(fs, "max-message", proxy.DefaultMaxMessageSize, "largest message, in `bytes`, both ways (grpc; 64MiB, 1GiB)"),
		memory:          sizeFlag(fs, "memory", budget.DefaultBytes, "memory budget, in `bytes`, for everything the proxy holds for its peers (grpc)"),
		drain:           fs.Duration("drain", proxy.DefaultDrain, "time calls get to finish at shutdown"),
		handshake:       fs.Duration("handshake-timeout", lim.HandshakeTimeout, "time a connection gets to send its first bytes, TLS and HTTP/2 handshake"),
		idle:            fs.Duration("idle-timeout", lim.IdleTimeout, "close a connection without calls (grpc) or bytes (pass-through, tcp) for this long"),
		maxStreams:      fs.Int("max-streams", int(lim.MaxStreams), "concurrent calls per connection"),
		maxConns:        fs.Int("max-conns", lim.MaxConns, "connections open at once, all peers"),
		maxConnsPerPeer: fs.Int("max-conns-per-peer", lim.MaxConnsPerPeer, "connections open at once from one IP address"),
		metrics:         fs.String("metrics", "", "`address` to serve /metrics (Prometheus) and /healthz on, without authentication: off loopback with --insecure only (default: none)"),
		bandwidth:       fs.String("bandwidth", "auto", "the link's `rate` between the proxies (10Mbit, 1Gbit; auto: measured), local side (the remote takes the local's)"),
		tlsCert:         fs.String("tls-cert", "", "certificate `file` (PEM): the remote side's server certificate, the local side's client certificate"),
		tlsKey:          fs.String("tls-key", "", "key `file` (PEM) of --tls-cert"),
		tlsCA:           fs.String("tls-ca", "", "authority `file` (PEM): remote side, require client certificates it signed (mutual TLS); local side, check the remote's certificate"),
		serverName:      fs.String("tls-server-name", "", "`name` the local side checks the remote's certificate for (default: the host of --to)"),
		tokenFile:       fs.String("token-file", "", "`file` holding the shared token between the proxies (grpc; 16 bytes or more, such as 32 random hex digits): required by the remote side, sent by the local side"),
		insecure:        fs.Bool("insecure", false, "allow a listener off loopback without mutual TLS or a token (--listen, --metrics)"),
		newLog:          logFlags(fs, stderr),
	}
}

func cmdProxy(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("proxy", "proxy --side local|remote --listen ADDR --to ADDR [flags]", proxyText, stderr)
	f := defineProxyFlags(fs, stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := f.newLog()
	if err != nil {
		return err
	}
	side, err := f.build(log)
	if err != nil {
		return err
	}
	ln, err := f.listenChecked()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(proxyContext(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *f.metrics != "" {
		stopMetrics, err := f.serveMetrics(side, log, stop)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopMetrics()
	}
	return side.Serve(ctx, ln)
}

// proxyContext is the context a proxy runs in until a signal: tests end
// it.
var proxyContext = context.Background

// build checks the flags and returns the proxy they describe.
func (f *proxyFlags) build(log *slog.Logger) (*proxy.Side, error) {
	switch {
	case *f.side != "local" && *f.side != "remote":
		return nil, usagef("--side %q: want local or remote", *f.side)
	case *f.listen == "":
		return nil, usagef("--listen is required")
	case *f.to == "":
		return nil, usagef("--to is required")
	case *f.mode != "grpc" && *f.mode != "tcp":
		return nil, usagef("--mode %q: want grpc or tcp", *f.mode)
	case *f.memory <= 0:
		return nil, usagef("--memory %d: want more than 0", *f.memory)
	case *f.maxStreams <= 0 || int64(*f.maxStreams) > 1<<31-1:
		return nil, usagef("--max-streams %d: want 1 or more", *f.maxStreams)
	case *f.mode == "tcp" && *f.tokenFile != "":
		return nil, usagef("--token-file: TCP mode authenticates the hop with mutual TLS only (--tls-cert, --tls-key, --tls-ca)")
	}
	opts, err := f.options(log)
	if err != nil {
		return nil, err
	}
	newSide := proxy.NewLocal
	if *f.side == "remote" {
		newSide = proxy.NewRemote
	}
	s, err := newSide(*f.to, opts...)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return s, nil
}

// options are the proxy's options from the flags.
func (f *proxyFlags) options(log *slog.Logger) ([]proxy.Option, error) {
	bw, err := parseBandwidth(*f.bandwidth)
	if err != nil {
		return nil, usagef("--bandwidth %q: %v", *f.bandwidth, err)
	}
	if *f.maxMsg <= 0 || *f.maxMsg > 1<<31-1 {
		return nil, usagef("--max-message %d: want 1 to %d bytes", *f.maxMsg, 1<<31-1)
	}
	lim := proxy.Limits{
		HandshakeTimeout: *f.handshake, IdleTimeout: *f.idle, MaxStreams: uint32(*f.maxStreams),
		MaxConns: *f.maxConns, MaxConnsPerPeer: *f.maxConnsPerPeer,
	}
	listen, dial := f.auth()
	opts := []proxy.Option{
		proxy.WithLogger(log), proxy.WithBandwidth(bw), proxy.WithMaxMessageSize(int(*f.maxMsg)),
		proxy.WithBudget(budget.New(*f.memory)), proxy.WithLimits(lim), proxy.WithDrain(*f.drain),
		proxy.WithListenAuth(listen), proxy.WithDialAuth(dial),
	}
	if *f.mode == "tcp" {
		opts = append(opts, proxy.WithTCP())
	}
	return opts, nil
}

// auth returns what the listener requires and what the dial presents:
// the TLS and token flags are the remote side's listener's, or the local
// side's dial to the remote proxy.
func (f *proxyFlags) auth() (listen, dial auth.Config) {
	a := auth.Config{
		CertFile: *f.tlsCert, KeyFile: *f.tlsKey, CAFile: *f.tlsCA,
		ServerName: *f.serverName, TokenFile: *f.tokenFile,
	}
	if *f.side == "remote" {
		a.Insecure = *f.insecure
		return a, auth.Config{}
	}
	return auth.Config{Insecure: *f.insecure}, a
}

// listenChecked listens on --listen, once the listener's authentication
// allows that address.
func (f *proxyFlags) listenChecked() (net.Listener, error) {
	listen, _ := f.auth()
	if err := listen.CheckListen(*f.listen); err != nil {
		if *f.side == "local" {
			return nil, fmt.Errorf("%w (the local side's listener, for the application, has no authentication of its own: keep it on loopback)", err)
		}
		return nil, err
	}
	return net.Listen("tcp", *f.listen)
}

// serveMetrics serves the proxy's metrics on --metrics; a failure of
// that server stops the proxy.
func (f *proxyFlags) serveMetrics(side *proxy.Side, log *slog.Logger, stop func()) (func(), error) {
	if err := (auth.Config{Insecure: *f.insecure}).CheckListen(*f.metrics); err != nil {
		return nil, fmt.Errorf("--metrics: %w (/metrics has no authentication)", err)
	}
	errc := make(chan error, 1)
	stopMetrics, err := serveMetrics(*f.metrics, errc, log, metrics.Proxy(side.Stats()))
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		select {
		case err := <-errc:
			log.Error("metrics server failed: stopping", "err", err)
			stop()
		case <-done:
		}
	}()
	return func() {
		close(done)
		stopMetrics()
	}, nil
}

// parseBandwidth reads a rate in bits per second ("10Mbit", "1Gbit",
// "500kbit", "1e9") as bytes per second; "auto" or "" is 0.
func parseBandwidth(s string) (float64, error) {
	if s == "auto" || s == "" {
		return 0, nil
	}
	num, mult := strings.TrimSuffix(strings.ToLower(s), "bit"), 1.0
	for suf, m := range map[string]float64{"k": 1e3, "m": 1e6, "g": 1e9} {
		if rest, ok := strings.CutSuffix(num, suf); ok {
			num, mult = rest, m
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v > 0) || v*mult > 1e13 {
		return 0, fmt.Errorf("want a rate such as 10Mbit or auto")
	}
	return v * mult / 8, nil
}
