package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/hub/natsfan"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/tensorfile"
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
(a version found incomplete is tried again at the next look).

Chunks are coded as the --profile's rules say (lossless unless a rule
allows lossy coding and the client does not require lossless), else
lossless by data class. TLS with --tls-cert and --tls-key.

--metrics serves /healthz and Prometheus metrics on /metrics: fetches,
chunks and bytes sent (by client host), bytes before and after coding by
recipe, encode time, cache hits, uploads, refused updates, open streams,
and the Go runtime's and the process's metrics.

SIGTERM or SIGINT stops it: streams in flight get --drain to finish, then
are cut (Unavailable), and the clients resume on the next hub.
`

func cmdHub(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("hub", "hub --dir DIR [flags]   or   hub --relay --nats URL [flags]", hubText+fanoutText, stderr)
	dir := fs.String("dir", "", "`directory` of versions (required, unless --relay)")
	listen := fs.String("listen", "127.0.0.1:7077", "`address` to listen on (host:port)")
	prof := fs.String("profile", "", "YAML profile `file` (default: lossless, by data class)")
	certFile := fs.String("tls-cert", "", "TLS certificate `file` (PEM), with --tls-key")
	keyFile := fs.String("tls-key", "", "TLS key `file` (PEM)")
	retention := fs.Int("retention", hub.DefaultRetention, "versions kept (the newest)")
	cache := sizeFlag(fs, "cache", hub.DefaultCacheBytes, "encoded chunks kept for the next clients, in `bytes` (256MiB, 1GiB)")
	drain := fs.Duration("drain", 10*time.Second, "time streams get to finish at shutdown")
	metricsAddr := fs.String("metrics", "", "`address` to serve /metrics (Prometheus) and /healthz on (default: none)")
	watch := fs.Duration("watch", 2*time.Second, "how often --dir is looked at for new versions (0: never)")
	fan := addFanoutFlags(fs)
	newLog := logFlags(fs, stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := newLog()
	if err != nil {
		return err
	}
	if err := fan.check(*dir); err != nil {
		return err
	}
	switch {
	case (*certFile == "") != (*keyFile == ""):
		return usagef("--tls-cert and --tls-key go together")
	case *retention < 1:
		return usagef("--retention %d: want at least 1", *retention)
	}
	opts := []hub.Option{hub.WithRetention(*retention), hub.WithCacheBytes(*cache)}
	if *prof != "" {
		p, err := profile.LoadFile(*prof)
		if err != nil {
			return err
		}
		tu, err := autotune.New(autotune.WithProfile(p))
		if err != nil {
			return err
		}
		opts = append(opts, hub.WithPolicy(tu))
	}
	h, err := hub.New(opts...)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(hubContext(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var fo *fanout
	collectors := []prometheus.Collector{hub.Collector(h)}
	if fan.enabled() {
		if fo, err = openFanout(ctx, fan, log); err != nil {
			return err
		}
		defer fo.Close()
	}
	var w *dirWatcher
	if *dir != "" {
		w = newDirWatcher(h, *dir, *retention, log)
		defer w.Close()
		if fo != nil {
			pub := natsfan.NewPublisher(fo.nc, fo.store, *retention, log)
			q := newPublishQueue(ctx, pub, *dir, log)
			defer func() { stop(); q.wait() }()
			w.onPublish = q.add
			collectors = append(collectors, natsfan.Collector(pub, nil))
		}
		if err := w.start(); err != nil {
			return err
		}
	} else {
		relay := natsfan.NewRelay(fo.store, h, *retention, codec.Limits{}, log)
		relayed := make(chan struct{})
		go func() {
			defer close(relayed)
			relay.Run(ctx)
		}()
		defer func() { stop(); <-relayed }()
		collectors = append(collectors, natsfan.Collector(nil, relay))
	}
	sopts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := grpc.NewServer(sopts...)
	hubpb.RegisterHubServer(s, hub.NewServer(h))
	if w != nil && *watch > 0 {
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			w.run(ctx, *watch)
		}()
		defer func() { stop(); <-watched }() // before w.Close
	}
	for _, v := range h.Versions() {
		log.Info("serving", "version", v.Version, "tensors", v.Tensors, "bytes", v.Bytes)
	}
	log.Info("listening", "addr", ln.Addr().String(), "tls", *certFile != "")
	errc := make(chan error, 2)
	if *metricsAddr != "" {
		stopMetrics, err := serveMetrics(*metricsAddr, errc, log, collectors...)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopMetrics()
	}
	return serve(ctx, s, ln, errc, *drain, log)
}

// serveMetrics serves /metrics (c, Go and process metrics) and /healthz
// on addr; a failure of the server goes to errc. The function it returns
// stops it.
func serveMetrics(addr string, errc chan error, log *slog.Logger, cs ...prometheus.Collector) (func(), error) {
	mln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(mln); err != http.ErrServerClosed {
			errc <- err
		}
	}()
	log.Info("metrics", "addr", mln.Addr().String())
	return func() { hs.Close() }, nil
}

// serve runs s on ln until ctx ends (or s, or errc, fails), then stops it
// gracefully: calls in flight get drain to finish, and are cut after.
func serve(ctx context.Context, s *grpc.Server, ln net.Listener, errc chan error, drain time.Duration, log *slog.Logger) error {
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping", "drain", drain)
	drainThenCut(s.GracefulStop, drain, func() {
		log.Info("drain over: cutting the calls left")
		s.Stop()
	})
	return nil
}

// drainThenCut runs wait (which returns when the work in flight is done)
// and, if it has not returned after drain, calls cut to end that work,
// then waits for wait to return.
func drainThenCut(wait func(), drain time.Duration, cut func()) {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(drain):
		cut()
		<-done
	}
}

// hubContext is the context a hub or proxy runs in until a signal: tests
// end it.
var hubContext = context.Background

func publishVersion(h *hub.Hub, v uint64, dir string) ([]io.Closer, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var st, npy []string
	for _, e := range ents {
		switch {
		case strings.HasSuffix(e.Name(), ".safetensors"):
			st = append(st, e.Name())
		case strings.HasSuffix(e.Name(), ".npy"):
			npy = append(npy, e.Name())
		}
	}
	switch {
	case len(st) == 1 && len(npy) == 0:
		f, err := tensorfile.OpenSafetensorsFile(filepath.Join(dir, st[0]))
		if err != nil {
			return nil, err
		}
		return []io.Closer{f}, h.PublishSafetensors(v, f.Safetensors)
	case len(st) == 0 && len(npy) > 0:
		var closers []io.Closer
		var files []hub.NpyFile
		for _, name := range npy {
			f, err := os.Open(filepath.Join(dir, name))
			if err != nil {
				return closers, err
			}
			closers = append(closers, f)
			fi, err := f.Stat()
			if err != nil {
				return closers, err
			}
			files = append(files, hub.NpyFile{Name: strings.TrimSuffix(name, ".npy"), R: f, Size: fi.Size()})
		}
		return closers, h.PublishNpy(v, files)
	}
	return nil, fmt.Errorf("%s: want one .safetensors file or .npy files, found %d and %d", dir, len(st), len(npy))
}
