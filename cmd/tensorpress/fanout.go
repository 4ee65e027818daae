package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/natsfan"
)

const fanoutText = `
Fan-out beyond one machine (NATS JetStream): the origin hub publishes each
version once into a NATS object store bucket; relay hubs on other machines
serve their own clients from it, so a version crosses the origin's link
once. A hub with none of these flags uses no NATS.

  origin, NATS inside:  hub --dir models/ --nats-listen 0.0.0.0:4222
  origin, a cluster:    hub --dir models/ --nats nats://n1:4222,nats://n2:4222 --nats-replicas 3
  relay:                hub --relay --nats nats://origin-host:4222
`

// fanoutFlags are the hub's NATS flags.
type fanoutFlags struct {
	url, listen, store, bucket *string
	replicas                   *int
	relay                      *bool
	spool                      *string
}

func addFanoutFlags(fs *flag.FlagSet) *fanoutFlags {
	return &fanoutFlags{
		url:      fs.String("nats", "", "NATS `URLs` (comma-separated) of an existing cluster to publish versions to, or, with --relay, to serve them from"),
		listen:   fs.String("nats-listen", "", "start a NATS server (JetStream) in this process, listening on `address`, and publish versions to it"),
		store:    fs.String("nats-store", "", "`directory` of the NATS server of --nats-listen (default: a temporary one, removed at exit)"),
		bucket:   fs.String("bucket", natsfan.DefaultBucket, "NATS object store `bucket` of the versions"),
		replicas: fs.Int("nats-replicas", 1, "JetStream replicas of the bucket (3 on a 3-node cluster)"),
		relay:    fs.Bool("relay", false, "serve the versions found in NATS (--nats) instead of a --dir"),
		spool:    fs.String("relay-spool", "", "with --relay, the `directory` each version is written to as it is read from NATS, then served from (default: a temporary one, removed at exit)"),
	}
}

func (f *fanoutFlags) enabled() bool { return *f.url != "" || *f.listen != "" }

func (f *fanoutFlags) check(dir string) error {
	switch {
	case *f.url != "" && *f.listen != "":
		return usagef("--nats and --nats-listen: one or the other")
	case *f.relay && *f.url == "":
		return usagef("--relay needs --nats (the cluster the versions are in)")
	case *f.relay && dir != "":
		return usagef("--relay serves what NATS holds; --dir is for an origin")
	case !*f.relay && dir == "":
		return usagef("--dir is required (or --relay with --nats)")
	case *f.spool != "" && !*f.relay:
		return usagef("--relay-spool goes with --relay")
	case *f.store != "" && *f.listen == "":
		return usagef("--nats-store goes with --nats-listen")
	case *f.replicas < 1 || *f.replicas > 5:
		return usagef("--nats-replicas %d: want 1 to 5", *f.replicas)
	}
	return nil
}

// fanout is a hub's connection to NATS.
type fanout struct {
	srv   *server.Server
	nc    *nats.Conn
	store jetstream.ObjectStore
	tmp   string
}

// openFanout connects (starting the server of --nats-listen first) and
// opens the bucket, waiting up to a minute for NATS to answer.
func openFanout(ctx context.Context, f *fanoutFlags, log *slog.Logger) (*fanout, error) {
	fo := &fanout{}
	url := *f.url
	opts := []nats.Option{
		nats.Name("tensorpress hub"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrl()) }),
	}
	if *f.listen != "" {
		dir := *f.store
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "tensorpress-nats-"); err != nil {
				return nil, err
			}
			fo.tmp = dir
		}
		srv, err := natsfan.StartServer(*f.listen, dir)
		if err != nil {
			fo.Close()
			return nil, err
		}
		fo.srv = srv
		url = srv.ClientURL()
		opts = append(opts, nats.InProcessServer(srv))
		log.Info("NATS server", "addr", srv.Addr().String(), "store", dir)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		fo.Close()
		return nil, fmt.Errorf("NATS at %s: %w", url, err)
	}
	fo.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		fo.Close()
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fo.store, err = natsfan.OpenStore(octx, js, natsfan.Config{Bucket: *f.bucket, Replicas: *f.replicas})
		cancel()
		if err == nil {
			return fo, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			fo.Close()
			return nil, fmt.Errorf("NATS at %s: %w", url, err)
		}
		log.Warn("NATS JetStream not ready; trying again", "err", err)
		time.Sleep(time.Second)
	}
}

func (fo *fanout) Close() error {
	if fo.nc != nil {
		fo.nc.Drain()
	}
	if fo.srv != nil {
		fo.srv.Shutdown()
		fo.srv.WaitForShutdown()
	}
	if fo.tmp != "" {
		os.RemoveAll(fo.tmp)
	}
	return nil
}

// dirTensors reads the tensors of a version directory one at a time, by
// the rules of hub.OpenVersion, for a Publisher.
func dirTensors(dir string) natsfan.Tensors {
	return func(yield func(*codec.Tensor, error) bool) {
		vd, err := hub.OpenVersion(dir)
		if err != nil {
			yield(nil, err)
			return
		}
		vd.Tensors()(yield)
	}
}

// publishQueue publishes the versions the hub publishes from its
// directory to NATS, one at a time, in the background: serving does not
// wait for NATS. At most queueLen versions wait; past that the oldest
// waiting is dropped (a newer version supersedes it), with a warning.
type publishQueue struct {
	pub  *natsfan.Publisher
	h    *hub.Hub
	dir  string
	log  *slog.Logger
	q    chan uint64
	done chan struct{}
}

const queueLen = 4

func newPublishQueue(ctx context.Context, pub *natsfan.Publisher, h *hub.Hub, dir string, log *slog.Logger) *publishQueue {
	p := &publishQueue{pub: pub, h: h, dir: dir, log: log, q: make(chan uint64, queueLen), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-ctx.Done():
				return
			case v := <-p.q:
				err := p.publish(ctx, v)
				if err != nil && !errors.Is(err, context.Canceled) {
					log.Error("not published to NATS", "version", v, "err", err)
				}
			}
		}
	}()
	return p
}

// publish puts version v into NATS: the frames the hub serves it with
// (encoded once, for NATS and the hub's clients: Hub.WriteVersion), or,
// where the hub no longer holds it, read again from its directory.
func (p *publishQueue) publish(ctx context.Context, v uint64) error {
	err := p.pub.PublishFrames(ctx, v, func(w io.Writer) error { return p.h.WriteVersion(ctx, v, w) })
	if errors.Is(err, hub.ErrNotFound) {
		err = p.pub.Publish(ctx, v, dirTensors(filepath.Join(p.dir, fmt.Sprint(v))))
	}
	return err
}

func (p *publishQueue) add(v uint64) {
	for {
		select {
		case p.q <- v:
			return
		default:
		}
		select {
		case old := <-p.q:
			p.log.Warn("NATS is behind: a waiting version is not published, a newer one is", "version", old)
		default:
		}
	}
}

// wait waits for the publishing goroutine to end (its context ended).
func (p *publishQueue) wait() { <-p.done }
