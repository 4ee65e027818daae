package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // an application's gzip calls are accepted
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/proxy"
	"github.com/tensorpress/tensorpress/transport"
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
recipes an autotuner chooses per frame for the link (float runs found
inside protobuf bytes fields coded by plane, mostly-zero data as
positions, the rest with zstd, or stored raw where the link is faster
than the coders); each proxy measures how fast the other's messages
arrive and tells it. Where --to is on this host (loopback), nothing can
be saved: the local proxy passes the application's connections through
as they are, and the remote proxy passes them on. --bandwidth gives the
link's rate instead of measuring it (and codes on loopback too). Both
proxies must run the same tensorpress release.

For example, the client's machine runs
  tensorpress proxy --side local --listen 127.0.0.1:50051 --to server-host:7000
and the server's
  tensorpress proxy --side remote --listen :7000 --to 127.0.0.1:50051
SIGTERM or SIGINT stops a proxy: calls in flight get --drain to finish.

--mode tcp forwards any byte stream instead (protocols that are not gRPC):
each connection to the local proxy becomes one to the remote proxy that
carries tensorpress frames (package transport: the autotuner picks each
frame's recipe on the measured link), and one from the remote proxy to
--to. Half-closes pass through; the bytes arrive as they were sent.
`

func cmdProxy(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("proxy", "proxy --side local|remote --listen ADDR --to ADDR [flags]", proxyText, stderr)
	side := fs.String("side", "", "`local` (beside the client) or `remote` (beside the server); required")
	listen := fs.String("listen", "", "`address` to listen on (host:port); required")
	to := fs.String("to", "", "`address` to forward to: the remote proxy, or the server; required")
	mode := fs.String("mode", "grpc", "`grpc` (any gRPC service) or `tcp` (any byte stream, through package transport)")
	maxMsg := sizeFlag(fs, "max-message", proxy.DefaultMaxMessageSize, "largest message, in `bytes`, both ways (grpc; 64MiB, 1GiB)")
	drain := fs.Duration("drain", 10*time.Second, "time calls get to finish at shutdown")
	metricsAddr := fs.String("metrics", "", "`address` to serve /metrics (Prometheus) and /healthz on (grpc mode; default: none)")
	bwFlag := fs.String("bandwidth", "auto", "the link's `rate` between the proxies (10Mbit, 1Gbit; auto: measured), local side (the remote takes the local's)")
	newLog := logFlags(fs, stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLog()
	if err != nil {
		return err
	}
	switch {
	case *side != "local" && *side != "remote":
		return usagef("--side %q: want local or remote", *side)
	case *listen == "":
		return usagef("--listen is required")
	case *to == "":
		return usagef("--to is required")
	case *mode != "grpc" && *mode != "tcp":
		return usagef("--mode %q: want grpc or tcp", *mode)
	}
	bw, err := parseBandwidth(*bwFlag)
	if err != nil {
		return usagef("--bandwidth %q: %v", *bwFlag, err)
	}
	if *mode == "tcp" {
		return tcpProxy(*listen, *to, *drain, log, "tcp", func(c net.Conn) error { return forwardTCP(*side, c, *to) })
	}
	var stats proxy.Stats
	if *side == "local" && bw == 0 && onLoopback(*to) {
		// Nothing to save on loopback: pass the connections through.
		log.Info("the remote proxy is on this host: passing connections through, no coding", "to", *to)
		if *metricsAddr != "" {
			errc := make(chan error, 1)
			stopMetrics, err := serveMetrics(*metricsAddr, errc, log, proxy.Collector(&stats))
			if err != nil {
				return err
			}
			defer stopMetrics()
		}
		return tcpProxy(*listen, *to, *drain, log, "grpc-passthrough", func(c net.Conn) error {
			return forwardRaw(c, *to, rawMagic, &stats.HopOut, &stats.HopIn)
		})
	}
	hop, err := proxy.NewHop(bw)
	if err != nil {
		return usagef("%v", err)
	}
	conn, err := grpc.NewClient(*to, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(hopWindow), grpc.WithInitialConnWindowSize(hopWindow),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			if *side == "local" {
				return hop.Conn(c), nil
			}
			return c, nil
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	opts := []proxy.Option{proxy.WithMaxMessageSize(int(*maxMsg)), proxy.WithStats(&stats)}
	if *side == "local" {
		opts = append(opts, proxy.WithOutgoingHop(hop))
	} else {
		opts = append(opts, proxy.WithIncomingHop(hop))
	}
	sopts, err := proxy.ServerOptions(conn, opts...)
	if err != nil {
		return usagef("%v", err)
	}
	sopts = append(sopts, grpc.ChainStreamInterceptor(logCalls(log, *to)))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *side == "remote" {
		sniff := newSniffListener(ln, *to)
		defer sniff.closeRaw()
		ln = hop.Listener(sniff)
		sopts = append(sopts, grpc.InitialWindowSize(hopWindow), grpc.InitialConnWindowSize(hopWindow))
	}
	s := grpc.NewServer(sopts...)
	ctx, stop := signal.NotifyContext(hubContext(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("listening", "addr", ln.Addr().String(), "side", *side, "to", *to)
	errc := make(chan error, 2)
	if *metricsAddr != "" {
		stopMetrics, err := serveMetrics(*metricsAddr, errc, log, proxy.Collector(&stats))
		if err != nil {
			ln.Close()
			return err
		}
		defer stopMetrics()
	}
	return serve(ctx, s, ln, errc, *drain, log)
}

// tcpProxy accepts connections on listen and hands each to forward
// (forwardTCP: on the local side carried to the remote proxy through
// transport.Wrap, on the remote side unwrapped and forwarded to the
// server; forwardRaw: passed through as it is); SIGTERM stops accepting,
// and the connections open get drain to end.
func tcpProxy(listen, to string, drain time.Duration, log *slog.Logger, mode string, forward func(net.Conn) error) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(hubContext(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("listening", "addr", ln.Addr().String(), "to", to, "mode", mode)
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				log.Error("accept", "err", err)
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			track(c, true)
			defer track(c, false)
			if err := forward(c); err != nil {
				var op *net.OpError
				if errors.As(err, &op) && op.Op == "dial" {
					log.Warn("connection not forwarded: the next hop is down", "remote", c.RemoteAddr().String(), "to", to, "err", err)
				} else {
					log.Info("connection ended", "remote", c.RemoteAddr().String(), "err", err)
				}
			}
		}()
	}
	drainThenCut(wg.Wait, drain, func() {
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	})
	return nil
}

// forwardTCP carries c to the next hop: wrapped in tensorpress frames
// toward the remote proxy (local side), or unwrapped toward the server
// (remote side).
func forwardTCP(side string, c net.Conn, to string) error {
	defer c.Close()
	d, err := net.Dial("tcp", to)
	if err != nil {
		return err
	}
	defer d.Close()
	var in, out net.Conn = c, d // out: toward the server
	var wrapped *transport.Conn
	if side == "local" {
		wrapped, err = transport.Wrap(d)
		out = wrapped
	} else {
		wrapped, err = transport.Wrap(c)
		in = wrapped
	}
	if err != nil {
		return err
	}
	defer wrapped.Close()
	errc := make(chan error, 2)
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		errc <- err
	}
	go pipe(out, in)
	go pipe(in, out)
	return errors.Join(<-errc, <-errc)
}

// hopWindow is the flow-control window of the connection between the
// proxies, per stream and per connection: a message of a few megabytes
// crosses without waiting for window updates (gRPC's default starts at
// 64 KiB and grows with its bandwidth-delay estimate).
const hopWindow = 8 << 20

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

// logCalls logs each call that ends in an error: at warn level where the
// proxy or the next hop failed (Unavailable, Internal, ResourceExhausted,
// Unimplemented: a peer down, a bad message, a limit, another release),
// else, where the status is the application's own, at debug level.
func logCalls(log *slog.Logger, to string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		if err == nil {
			return nil
		}
		st := status.Convert(err)
		level := slog.LevelDebug
		switch st.Code() {
		case codes.Unavailable, codes.Internal, codes.ResourceExhausted, codes.Unimplemented:
			level = slog.LevelWarn
		}
		log.Log(ss.Context(), level, "call failed", "method", info.FullMethod, "to", to, "code", st.Code().String(), "err", st.Message())
		return err
	}
}
