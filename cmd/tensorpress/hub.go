package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/natsfan"
	"github.com/tensorpress/tensorpress/metrics"
	"github.com/tensorpress/tensorpress/profile"
)

const hubText = `
hub serves the model versions in --dir to many clients over gRPC (the Hub
service of package hub: batched, pull-based fetches, each chunk encoded
once for all, deltas against the version a client holds, resumable).

Layout of --dir: one subdirectory per version, named by its number (1, 2,
...), holding either one .safetensors file or .npy files (one tensor
each, named by the file's base name). Files are read when chunks are
encoded, not held in memory; do not change them while they are served.
The newest --retention versions are served. A version directory that
appears later is published when --watch next looks: write it under
another name (.5.tmp) and rename it to its number when it is complete
(a version found incomplete is tried again at the next look). With
--watch on, --dir may hold no version yet: the hub waits for the first.

Chunks are coded as the --profile's rules say (lossless unless a rule
allows lossy coding and the client does not require lossless), else
lossless by data class.

Authentication: TLS with --tls-cert and --tls-key; client certificates
signed by --tls-ca required (mutual TLS) when it is given; a shared token
(--token-file, sent by clients in the tensorpress-token metadata) required
when it is given. A --listen or --metrics address off loopback without
client certificates or a token is refused unless --insecure.

Limits, for a port open to peers you do not trust: --memory bounds what
the hub holds for its peers at once (uploads as their frames' headers
claim before they are decoded, ResourceExhausted past it; the sums of a
round; the chunks of fetches in flight, which wait for it), beside the
--cache of encoded chunks; per connection, --handshake-timeout closes a
peer that does not open HTTP/2 in time, --idle-timeout one with no call
open, --max-streams bounds its calls at once and --max-message one
message received (an upload's update); --max-conns and
--max-conns-per-peer bound the connections open at once, in all and from
one IP address (one over is closed as soon as it is accepted).
--max-slow-decoded bounds the bytes of an update that decode through the
stages of some MB/s (floatcm, floatrank: about 0.1 s of a core a MiB, from
as little as 3 KB a MiB on the wire); an update over it is refused
(ResourceExhausted) before it is decoded.

--metrics serves /healthz and Prometheus metrics on /metrics: fetches,
chunks and bytes sent (by client host), bytes before and after coding by
recipe, encode time, cache hits, uploads, refused updates, open streams,
and the Go runtime's and the process's metrics. It uses --tls-cert,
--tls-key and --tls-ca as the hub does, and the token as a bearer token
(Authorization: Bearer TOKEN, Prometheus's authorization.credentials_file).

Logs: each version served (with progress while a large one is read), a
version directory that cannot be served (a warning; the others are
served), and a line per fetch and per upload at info.

Aggregation (--fedavg N): the hub runs federated averaging on --dir. Its
newest version is the global model; clients upload their updates (weight
deltas) with that version as their round; the round ends once N updates
of every tensor are counted (or at --fedavg-deadline, with at least one),
the model steps by --server-lr times the weighted mean update, and the
result is written to --dir as the next version and served. Every counted
update is journaled in --dir before it is acknowledged, so a hub killed
and started again counts them again, once; a late update is refused
(FailedPrecondition) and stays in its client's error feedback.
--fedavg-rounds ends the rounds after that many versions beyond the
first; the hub then serves the last until stopped.

SIGTERM or SIGINT stops it: streams in flight get --drain to finish, then
are cut (Unavailable), and the clients resume on the next hub.
`

// hubFlags are the flags of 'tensorpress hub'.
type hubFlags struct {
	dir, listen, prof, metrics *string
	retention                  *int
	cache, memory              *int64
	budget                     *budget.Budget // made by newHub, shared with a relay
	drain, watch               *time.Duration
	auth                       *authFlags
	limits                     *limitFlags
	fan                        *fanoutFlags
	fedavg, fedavgRounds       *int
	fedavgDeadline             *time.Duration
	serverLR                   *float64
	newLog                     func() (*slog.Logger, error)
}

func addHubFlags(fs *flag.FlagSet, stderr io.Writer) *hubFlags {
	return &hubFlags{
		dir:            fs.String("dir", "", "`directory` of versions (required, unless --relay)"),
		listen:         fs.String("listen", "127.0.0.1:7077", "`address` to listen on (host:port)"),
		prof:           fs.String("profile", "", "YAML profile `file` (default: lossless, by data class)"),
		retention:      fs.Int("retention", hub.DefaultRetention, "versions kept (the newest)"),
		cache:          sizeFlag(fs, "cache", hub.DefaultCacheBytes, "encoded chunks kept for the next clients, in `bytes` (256MiB, 1GiB)"),
		memory:         sizeFlag(fs, "memory", budget.DefaultBytes, "memory budget, in `bytes`, for what the hub holds for its peers at once, beside --cache (uploads, sums, fetches in flight)"),
		drain:          fs.Duration("drain", 10*time.Second, "time streams get to finish at shutdown"),
		metrics:        fs.String("metrics", "", "`address` to serve /metrics (Prometheus) and /healthz on (default: none)"),
		watch:          fs.Duration("watch", 2*time.Second, "how often --dir is looked at for new versions (0: never)"),
		auth:           addAuthFlags(fs),
		limits:         addLimitFlags(fs),
		fan:            addFanoutFlags(fs),
		fedavg:         fs.Int("fedavg", 0, "aggregate: a round ends at this many `updates` of every tensor (0: no aggregation)"),
		fedavgRounds:   fs.Int("fedavg-rounds", 0, "aggregate this many `rounds` (0: no end)"),
		fedavgDeadline: fs.Duration("fedavg-deadline", 0, "a round also ends this long after its version is served, with at least one update (0: none)"),
		serverLR:       fs.Float64("server-lr", 1, "the `step` on the round's weighted mean update"),
		newLog:         logFlags(fs, stderr),
	}
}

func (f *hubFlags) check() error {
	if err := f.fan.check(*f.dir); err != nil {
		return err
	}
	if *f.retention < 1 {
		return usagef("--retention %d: want at least 1", *f.retention)
	}
	if *f.fedavg < 0 || *f.fedavgRounds < 0 || *f.fedavgDeadline < 0 || !(*f.serverLR > 0 && *f.serverLR <= 10) {
		return usagef("--fedavg, --fedavg-rounds and --fedavg-deadline must not be negative, --server-lr in (0, 10]")
	}
	if *f.fedavg == 0 && (*f.fedavgRounds > 0 || *f.fedavgDeadline > 0) {
		return usagef("--fedavg-rounds and --fedavg-deadline are for --fedavg")
	}
	if *f.fedavg > 0 && (*f.dir == "" || f.fan.enabled()) {
		return usagef("--fedavg aggregates on --dir, without --nats or --relay")
	}
	if *f.memory <= 0 {
		return usagef("--memory %d: want more than 0", *f.memory)
	}
	if err := f.limits.check(); err != nil {
		return err
	}
	return f.auth.check(*f.listen, *f.metrics)
}

func cmdHub(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("hub", "hub --dir DIR [flags]   or   hub --relay --nats URL [flags]", hubText+fanoutText, stderr)
	f := addHubFlags(fs, stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := f.newLog()
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	h, err := f.newHub(log)
	if err != nil {
		return err
	}
	f.setMemoryLimit(log)
	ctx, stop := signal.NotifyContext(hubContext(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	src, err := f.startSources(ctx, h, log, cancel)
	defer src.close(stop)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *f.listen)
	if err != nil {
		return err
	}
	src.watch(ctx, *f.watch)
	for _, v := range h.Versions() {
		log.Info("serving", "version", v.Version, "tensors", v.Tensors, "bytes", v.Bytes)
	}
	log.Info("listening", "addr", ln.Addr().String(), "tls", f.auth.cfg.ServerTLS(), "mtls", f.auth.cfg.Mutual(),
		"token", f.auth.cfg.TokenFile != "", "memory", profile.FormatSize(*f.memory))
	if *f.metrics != "" {
		errc := make(chan error, 1)
		stopMetrics, err := serveMetricsAuth(*f.metrics, errc, log, f.auth.cfg, src.collectors...)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopMetrics()
		go func() {
			select {
			case err := <-errc: // the metrics server failed: stop the hub too
				cancel(err)
			case <-ctx.Done():
			}
		}()
	}
	drain := *f.drain
	if drain == 0 {
		drain = -1 // --drain 0: cut at once
	}
	if err := hub.Serve(ctx, ln, h, hub.ServeConfig{Limits: f.limits.l, Auth: f.auth.cfg, Drain: drain, Log: log}); err != nil {
		return err
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// newHub makes the hub the flags ask for.
func (f *hubFlags) newHub(log *slog.Logger) (*hub.Hub, error) {
	f.budget = budget.New(*f.memory)
	opts := []hub.Option{hub.WithRetention(*f.retention), hub.WithCacheBytes(*f.cache),
		hub.WithBudget(f.budget), hub.WithLogger(log), hub.WithUploadLimits(codec.Limits{MaxSlowDecoded: *f.limits.maxSlow})}
	if *f.prof != "" {
		p, err := profile.LoadFile(*f.prof)
		if err != nil {
			return nil, err
		}
		tu, err := autotune.New(autotune.WithProfile(p))
		if err != nil {
			return nil, err
		}
		opts = append(opts, hub.WithPolicy(tu))
	}
	return hub.New(opts...)
}

// setMemoryLimit makes the Go runtime's soft memory limit what the hub
// may hold, --memory and --cache, plus 32 MiB for the rest of the process
// (unless GOMEMLIMIT says otherwise): the garbage collector then returns
// what the budget released before the heap doubles.
func (f *hubFlags) setMemoryLimit(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := *f.memory + *f.cache + 32<<20
	debug.SetMemoryLimit(limit)
	log.Debug("Go memory limit", "bytes", limit)
}

// sources are where a hub's versions come from (its directory, NATS),
// and what goes with them: the NATS publisher, the metrics collectors,
// the functions that stop them.
type sources struct {
	w          *hub.Watcher
	collectors []prometheus.Collector
	closers    []func() // run last first
}

// startSources publishes what the hub serves at the start: the versions
// of --dir (to NATS too, with --nats), or those NATS holds (--relay).
func (f *hubFlags) startSources(ctx context.Context, h *hub.Hub, log *slog.Logger, fail context.CancelCauseFunc) (*sources, error) {
	src := &sources{collectors: []prometheus.Collector{metrics.Hub(h)}}
	if *f.fedavg > 0 {
		// The hub publishes the versions it aggregates; no watcher.
		done := make(chan struct{})
		go func() {
			defer close(done)
			err := hub.RunFedAvg(ctx, h, hub.FedAvgConfig{Dir: *f.dir, Clients: *f.fedavg, Deadline: *f.fedavgDeadline,
				ServerLR: float32(*f.serverLR), Rounds: *f.fedavgRounds, Log: log})
			switch {
			case err == nil:
				log.Info("fedavg: the rounds are done; serving the last version")
			case ctx.Err() == nil:
				log.Error("fedavg", "err", err)
				fail(err)
			}
		}()
		src.closers = append(src.closers, func() { <-done })
		// RunFedAvg publishes the first version at once; wait for it so
		// that the hub serves it when it starts listening.
		for start := time.Now(); len(h.Versions()) == 0 && time.Since(start) < time.Minute; {
			select {
			case <-done:
				return src, context.Cause(ctx)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return src, nil
	}
	var fo *fanout
	if f.fan.enabled() {
		var err error
		if fo, err = openFanout(ctx, f.fan, log); err != nil {
			return src, err
		}
		src.closers = append(src.closers, func() { fo.Close() })
	}
	if *f.dir == "" {
		src.relay(ctx, fo, h, *f.retention, log, natsfan.WithBudget(f.budget), natsfan.WithSpoolDir(*f.fan.spool))
		return src, nil
	}
	src.w = hub.NewWatcher(h, *f.dir, *f.retention, log)
	src.w.Empty = *f.watch > 0 // --watch publishes the first version when it appears
	src.closers = append(src.closers, func() { src.w.Close() })
	if fo != nil {
		pub := natsfan.NewPublisher(fo.nc, fo.store, *f.retention, log)
		q := newPublishQueue(ctx, pub, h, *f.dir, log)
		src.closers = append(src.closers, q.wait)
		src.w.OnPublish = q.add
		src.collectors = append(src.collectors, metrics.NATS(pub, nil))
	}
	return src, src.w.Start()
}

// relay serves the versions NATS holds.
func (src *sources) relay(ctx context.Context, fo *fanout, h *hub.Hub, retention int, log *slog.Logger, opts ...natsfan.RelayOption) {
	relay := natsfan.NewRelay(fo.nc, fo.store, h, retention, codec.Limits{}, log, opts...)
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		relay.Run(ctx)
	}()
	src.closers = append(src.closers, func() { <-relayed })
	src.collectors = append(src.collectors, metrics.NATS(nil, relay))
}

// watch looks at the directory every interval (0: never) until ctx ends.
func (src *sources) watch(ctx context.Context, interval time.Duration) {
	if src.w == nil || interval <= 0 {
		return
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		src.w.Run(ctx, interval)
	}()
	src.closers = append(src.closers, func() { <-watched })
}

// close ends the context (stop) and stops the sources, the last started
// first.
func (src *sources) close(stop func()) {
	stop()
	for i := len(src.closers) - 1; i >= 0; i-- {
		src.closers[i]()
	}
}

// serveMetrics serves /metrics (c, Go and process metrics) and /healthz
// on addr, in plain HTTP, to anyone; a failure of the server goes to
// errc. The function it returns stops it.
func serveMetrics(addr string, errc chan error, log *slog.Logger, cs ...prometheus.Collector) (func(), error) {
	return serveMetricsAuth(addr, errc, log, auth.Config{Insecure: true}, cs...)
}

// serveMetricsAuth is serveMetrics with ac's authentication: TLS (client
// certificates required with a CA), the token as a bearer token.
func serveMetricsAuth(addr string, errc chan error, log *slog.Logger, ac auth.Config, cs ...prometheus.Collector) (func(), error) {
	tc, err := ac.ServerTLSConfig()
	if err != nil {
		return nil, err
	}
	check, err := bearerCheck(ac)
	if err != nil {
		return nil, err
	}
	mln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(cs...))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	hs := &http.Server{Handler: check(mux), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, TLSConfig: tc}
	go func() {
		var err error
		if tc != nil {
			err = hs.ServeTLS(mln, "", "")
		} else {
			err = hs.Serve(mln)
		}
		if err != http.ErrServerClosed {
			errc <- err
		}
	}()
	log.Info("metrics", "addr", mln.Addr().String(), "tls", tc != nil)
	return func() { hs.Close() }, nil
}

// hubContext is the context a hub or proxy runs in until a signal: tests
// end it.
var hubContext = context.Background
