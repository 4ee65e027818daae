package hub

import (
	"context"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/connlimit"
	"github.com/tensorpress/tensorpress/internal/drain"
)

// DefaultDrain is the time Serve gives the streams in flight to finish
// once its context ends.
const DefaultDrain = 10 * time.Second

// ServeConfig is how Serve runs a hub on a listener. The zero value is
// the defaults: DefaultLimits, plain text (on loopback only), DefaultDrain.
type ServeConfig struct {
	// Limits bound each connection (zero: DefaultLimits).
	Limits Limits
	// Auth is the server's authentication: mutual TLS, a shared token, or
	// both. A listener off loopback needs one of them, or Auth.Insecure.
	Auth auth.Config
	// Drain is the time the fetches and uploads in flight get to finish
	// once the context ends, before they are cut (zero: DefaultDrain;
	// negative: none, they are cut at once).
	Drain time.Duration
	// Log gets the stop and drain lines (nil: none).
	Log *slog.Logger
	// Options are more gRPC server options, after those of Limits and
	// Auth (interceptors, stats handlers).
	Options []grpc.ServerOption
}

// Serve serves h on ln until ctx ends, then stops taking calls, gives the
// streams in flight c.Drain to finish (each connection gets a GOAWAY: a
// fetch with retries resumes elsewhere or after a restart) and cuts those
// left. It returns nil after a drain, or the listener's error. A listener
// off loopback without authentication is refused and closed.
func Serve(ctx context.Context, ln net.Listener, h *Hub, c ServeConfig) error {
	if err := c.Auth.CheckListen(ln.Addr().String()); err != nil {
		ln.Close()
		return err
	}
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits()
	}
	srv, err := c.server(h)
	if err != nil {
		ln.Close()
		return err
	}
	ln = connlimit.New(ln, c.Limits.MaxConns, c.Limits.MaxConnsPerPeer, c.Log)
	switch {
	case c.Drain == 0:
		c.Drain = DefaultDrain
	case c.Drain < 0:
		c.Drain = 0
	}
	return drain.Serve(ctx, srv, ln, c.Drain, c.Log)
}

// server makes the gRPC server of h with c's limits and authentication.
func (c ServeConfig) server(h *Hub) (*grpc.Server, error) {
	lopts, err := c.Limits.ServerOptions()
	if err != nil {
		return nil, err
	}
	aopts, err := c.Auth.ServerOptions()
	if err != nil {
		return nil, err
	}
	opts := append(append(lopts, aopts...), c.Options...)
	s := grpc.NewServer(opts...)
	hubpb.RegisterHubServer(s, NewServer(h))
	return s, nil
}
