// Package drain stops servers the way an operator expects of a process on
// an open port: on a signal, stop taking new work, give the work in flight
// a while to finish, then cut what is left.
package drain

import (
	"context"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
)

// ThenCut runs wait (which returns when the work in flight is done) and,
// if it has not returned after d, calls cut to end that work, then waits
// for wait to return.
func ThenCut(wait func(), d time.Duration, cut func()) {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cut()
		<-done
	}
}

// Serve runs srv on ln until ctx ends, then stops it gracefully: the calls
// in flight get d to finish (GracefulStop sends each connection a GOAWAY),
// and are cut after (Stop). It returns srv.Serve's error if that ends
// first, else nil. log may be nil.
func Serve(ctx context.Context, srv *grpc.Server, ln net.Listener, d time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping", "drain", d)
	ThenCut(srv.GracefulStop, d, func() {
		log.Info("drain over: cutting the calls left")
		srv.Stop()
	})
	<-errc
	return nil
}
