package main

import (
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // an application's gzip calls are accepted

	"github.com/tensorpress/tensorpress/proxy"
	"github.com/tensorpress/tensorpress/rpc"
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
                 Messages to the remote proxy go through the tensorpress
                 compressor (float runs found inside the bytes are coded by
                 class).
  --side remote: listen for the local proxy; --to is the application's server.

For example, the client's machine runs
  tensorpress proxy --side local --listen 127.0.0.1:50051 --to server-host:7000
and the server's
  tensorpress proxy --side remote --listen :7000 --to 127.0.0.1:50051
SIGTERM or SIGINT stops a proxy: calls in flight get --drain to finish.
`

func cmdProxy(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("proxy", "proxy --side local|remote --listen ADDR --to ADDR [flags]", proxyText, stderr)
	side := fs.String("side", "", "`local` (beside the client) or `remote` (beside the server); required")
	listen := fs.String("listen", "", "`address` to listen on (host:port); required")
	to := fs.String("to", "", "`address` to forward to: the remote proxy, or the server; required")
	maxMsg := fs.Int("max-message", proxy.DefaultMaxMessageSize, "largest message, in `bytes`, both ways")
	drain := fs.Duration("drain", 10*time.Second, "time calls get to finish at shutdown")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *side != "local" && *side != "remote":
		return usagef("--side %q: want local or remote", *side)
	case *listen == "":
		return usagef("--listen is required")
	case *to == "":
		return usagef("--to is required")
	}
	conn, err := grpc.NewClient(*to, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	opts := []proxy.Option{proxy.WithMaxMessageSize(*maxMsg)}
	if *side == "local" {
		opts = append(opts, proxy.WithCallOptions(grpc.UseCompressor(rpc.Name)))
	}
	sopts, err := proxy.ServerOptions(conn, opts...)
	if err != nil {
		return usagef("%v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := grpc.NewServer(sopts...)
	ctx, stop := signal.NotifyContext(hubContext(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	log.Info("listening", "addr", ln.Addr().String(), "side", *side, "to", *to)
	return serve(ctx, s, ln, make(chan error, 1), *drain, log)
}
