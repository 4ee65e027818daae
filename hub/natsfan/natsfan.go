package natsfan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/rpc"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// DefaultBucket is the object store bucket versions go into.
const DefaultBucket = "tensorpress"

// ChunkSize is the size of the object store's chunks (NATS messages):
// well within the default max_payload of 1 MB.
const ChunkSize = 256 << 10

// Config describes the bucket a Publisher creates (or finds).
type Config struct {
	Bucket   string // DefaultBucket if empty
	Replicas int    // JetStream replicas of the bucket (1 if 0): 3 on a 3-node cluster
	// Storage: jetstream.FileStorage unless MemoryStorage is set.
	MemoryStorage bool
}

// OpenStore creates the bucket of cfg, or opens it if it exists with the
// same settings: compression off (the frames are already compressed).
func OpenStore(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.ObjectStore, error) {
	return openBucket(ctx, js, cfg, "", "tensorpress model versions, each one object of tensorpress frames")
}

// openBucket creates (or opens) cfg's bucket, its name with suffix, with
// compression off (what it holds is tensorpress frames).
func openBucket(ctx context.Context, js jetstream.JetStream, cfg Config, suffix, description string) (jetstream.ObjectStore, error) {
	name := cfg.Bucket
	if name == "" {
		name = DefaultBucket
	}
	name += suffix
	st := jetstream.FileStorage
	if cfg.MemoryStorage {
		st = jetstream.MemoryStorage
	}
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      name,
		Description: description,
		Replicas:    max(1, cfg.Replicas),
		Storage:     st,
		Compression: false,
	})
	if err != nil {
		return nil, fmt.Errorf("natsfan: bucket %q: %w", name, err)
	}
	return os, nil
}

// objectName is the name of version v's object.
func objectName(v uint64) string { return strconv.FormatUint(v, 10) }

// versionOf is the version of an object name, or 0 if it is none.
func versionOf(name string) uint64 {
	v, err := strconv.ParseUint(name, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// Tensors is a model version's tensors, one at a time (each read when it
// is yielded, so that a version need not be held whole); a Publisher may
// range over it more than once (once per attempt).
type Tensors = iter.Seq2[*codec.Tensor, error]

// Slice is Tensors over tensors held in memory.
func Slice(ts []*codec.Tensor) Tensors {
	return func(yield func(*codec.Tensor, error) bool) {
		for _, t := range ts {
			if !yield(t, nil) {
				return
			}
		}
	}
}

// Publisher puts model versions into a bucket, each encoded once
// (lossless, recipes by data class, as a hub codes them by default): the
// bytes of a version cross the publisher's link to NATS once, whatever
// the number of relays. A version is visible whole or not at all: its
// description is published only after every chunk's acknowledgement, and
// a failed attempt leaves nothing behind (its chunks are purged). Publish
// retries until it succeeds or its context ends.
type Publisher struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store jetstream.ObjectStore
	keep  int
	log   *slog.Logger

	// Published counts the versions put, PutBytes their objects' bytes,
	// Retries the attempts that failed and were tried again, Republished
	// the chunks published again (the same bytes) for want of an
	// acknowledgement.
	Published, PutBytes, Retries, Republished atomic.Int64
}

// NewPublisher returns a Publisher into store, reached through nc, that
// keeps the newest keep versions there (all if 0), logging to log
// (slog.Default if nil).
func NewPublisher(nc *nats.Conn, store jetstream.ObjectStore, keep int, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	// jetstream.New fails only for a nil connection or a bad option.
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	return &Publisher{nc: nc, js: js, store: store, keep: keep, log: log}
}

// Publish puts version v (greater than 0) made of ts.
func (p *Publisher) Publish(ctx context.Context, v uint64, ts Tensors) error {
	return p.PublishFrames(ctx, v, func(w io.Writer) error { return encode(w, ts) })
}

// PublishFrames is Publish for a version already encoded: write writes
// its tensorpress frames (tensor and tensors frames, each tensor's chunks
// in order, as a codec.Writer or a hub's fetch lays them out) to w, once
// per attempt. An error of write ends Publish (trying again does not
// help).
func (p *Publisher) PublishFrames(ctx context.Context, v uint64, write func(io.Writer) error) error {
	if v == 0 {
		return errors.New("natsfan: version 0")
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		info, err := p.put(ctx, v, write)
		if err == nil {
			p.Published.Add(1)
			p.PutBytes.Add(int64(info.Size))
			p.log.Info("published to NATS", "version", v, "bytes", info.Size, "attempts", attempt)
			p.prune(ctx, v)
			return nil
		}
		var fatal errEncode
		if errors.As(err, &fatal) || ctx.Err() != nil || errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("natsfan: version %d: %w", v, err)
		}
		p.Retries.Add(1)
		p.log.Warn("publishing to NATS failed; trying again", "version", v, "attempt", attempt, "in", backoff, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return fmt.Errorf("natsfan: version %d: %w (last error: %v)", v, ctx.Err(), err)
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errEncode marks a failure to read or encode the tensors: trying again
// does not help.
type errEncode struct{ error }

func (e errEncode) Unwrap() error { return e.error }

func (p *Publisher) put(ctx context.Context, v uint64, write func(io.Writer) error) (*jetstream.ObjectInfo, error) {
	// A put whose connection drops is doomed (chunks published before the
	// drop may be lost, and their acknowledgements never come): the
	// attempt ends at once, to be tried again once connected.
	//
	// The attempt's context has no deadline, so that the object store
	// waits for each chunk's acknowledgement a JetStream timeout at most
	// (with a deadline it would wait until the deadline for one that was
	// lost with a node); the caller's deadline still cancels it.
	parent := ctx
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	defer cancel(nil)
	reconnects := p.nc.Stats().Reconnects
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-parent.Done():
				cancel(parent.Err())
				return
			case <-t.C:
				if !p.nc.IsConnected() || p.nc.Stats().Reconnects != reconnects {
					cancel(errDropped)
					return
				}
			}
		}
	}()
	if !p.nc.IsConnected() {
		return nil, nats.ErrConnectionReconnecting
	}
	info, err := putObject(ctx, p.js, p.store, jetstream.ObjectMeta{
		Name:     objectName(v),
		Metadata: map[string]string{"tensorpress-version": objectName(v)},
	}, write, func() { p.Republished.Add(1) })
	if err != nil && errors.Is(context.Cause(ctx), errDropped) {
		err = fmt.Errorf("%w: %v", errDropped, err)
	}
	return info, err
}

var errDropped = errors.New("the connection to NATS dropped during the put")

// encode writes ts to w as tensorpress frames (a codec.Writer stream, lossless).
func encode(w io.Writer, ts Tensors) error {
	cw, err := codec.NewWriter(w, codec.WithPolicy(rpc.ByClass{}))
	if err != nil {
		return err
	}
	for t, err := range ts {
		if err == nil {
			err = cw.WriteTensor(t)
		}
		if err != nil {
			cw.Close()
			return err
		}
	}
	return cw.Close()
}

// prune deletes the versions older than the newest p.keep, up to v.
func (p *Publisher) prune(ctx context.Context, v uint64) {
	if p.keep <= 0 {
		return
	}
	infos, err := p.store.List(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoObjectsFound) {
			p.log.Warn("listing NATS versions", "err", err)
		}
		return
	}
	var vs []uint64
	for _, in := range infos {
		if x := versionOf(in.Name); x != 0 {
			vs = append(vs, x)
		}
	}
	if len(vs) <= p.keep {
		return
	}
	newest := max(v, maxOf(vs))
	for _, x := range vs {
		if newest-x >= uint64(p.keep) && x < newest {
			if err := p.store.Delete(ctx, objectName(x)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				p.log.Warn("deleting an old NATS version", "version", x, "err", err)
			}
		}
	}
}

func maxOf(vs []uint64) uint64 {
	var m uint64
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

// Decode reads the tensors of a version's object, checking each frame
// (and, through the object store, the object's SHA-256).
func Decode(r io.Reader, lim codec.Limits) ([]*codec.Tensor, error) {
	rd, err := codec.NewReader(r, codec.WithLimits(lim))
	if err != nil {
		return nil, err
	}
	var ts []*codec.Tensor
	for {
		t, err := rd.ReadTensor()
		if err == io.EOF {
			return ts, nil
		}
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
}

// Relay serves the versions of a bucket from a local Hub: each version
// that appears whole in the bucket (and those already there at the
// start, the newest the hub keeps) is fetched once, checked, decoded and
// published into the hub, whose clients then fetch it from this relay.
type Relay struct {
	js     jetstream.JetStream
	store  jetstream.ObjectStore
	h      *hub.Hub
	keep   int
	limits codec.Limits
	log    *slog.Logger

	dir     string // spool directory (WithSpoolDir; "": a temporary one per Run)
	budget  *budget.Budget
	served  []spooled // versions served from spool files
	closing []spooled // files of versions dropped, closed at the next cleaning
	listed  []uint64  // the newest versions the last listing found (reconcile's goroutine only)

	// Relayed counts the versions published into the hub, GotBytes their
	// objects' bytes, Failed the gets or decodes that failed.
	Relayed, GotBytes, Failed atomic.Int64
}

// NewRelay returns a Relay from store, reached through nc, into h, which
// keeps keep versions (hub.WithRetention), logging to log (slog.Default
// if nil). The limits bound what a version may claim
// (codec.DefaultLimits if zero).
func NewRelay(nc *nats.Conn, store jetstream.ObjectStore, h *hub.Hub, keep int, lim codec.Limits, log *slog.Logger, opts ...RelayOption) *Relay {
	if log == nil {
		log = slog.Default()
	}
	if lim == (codec.Limits{}) {
		lim = codec.DefaultLimits()
	}
	// jetstream.New fails only for a nil connection or a bad option.
	js, _ := jetstream.New(nc)
	r := &Relay{js: js, store: store, h: h, keep: max(1, keep), limits: lim, log: log}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
	}
	return r
}

// RelayOption configures a Relay.
type RelayOption func(*Relay)

// WithSpoolDir makes a Relay write the versions it serves into dir, one
// safetensors file each (<version>.safetensors, removed when the hub no
// longer keeps the version), and serve them from there. Without it, Run
// spools into a temporary directory it removes when it returns. Files of
// that form that the Relay does not serve are removed from dir.
func WithSpoolDir(dir string) RelayOption { return func(r *Relay) { r.dir = dir } }

// WithBudget charges what a Relay holds while it spools a version (one
// frame's payload and its decoded bytes at a time) to b, waiting while b
// is spent. Without it nothing is charged (a frame is bounded by the
// limits of NewRelay).
func WithBudget(b *budget.Budget) RelayOption { return func(r *Relay) { r.budget = b } }

// Run relays until ctx ends, then returns nil. While NATS is down or the
// bucket cannot be read, it logs why and tries again.
func (r *Relay) Run(ctx context.Context) error {
	if r.dir == "" {
		dir, err := os.MkdirTemp("", "tensorpress-relay-")
		if err != nil {
			return fmt.Errorf("natsfan: a spool directory: %w", err)
		}
		r.dir = dir
		defer func() { r.closeAll(); os.RemoveAll(dir); r.dir = "" }()
	} else {
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return fmt.Errorf("natsfan: the spool directory: %w", err)
		}
		defer r.closeAll()
	}
	r.clean(func(uint64) bool { return true })
	for {
		err := r.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("watching the NATS bucket; starting again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// watch relays what one watcher of the bucket announces, until ctx ends
// or the watcher fails.
func (r *Relay) watch(ctx context.Context) error {
	w, err := r.store.Watch(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer w.Stop()
	// The watcher only prompts: what the relay fetches comes from listing
	// the bucket, at the start, at each update and every ReconcileEvery,
	// so that an update the watcher misses (a node lost, a consumer
	// reset) delays a version, never loses it.
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-retry.C:
		case info, ok := <-w.Updates():
			if !ok {
				return errors.New("the watcher stopped")
			}
			if info != nil {
				r.log.Debug("NATS bucket update", "object", info.Name, "deleted", info.Deleted, "size", info.Size)
			}
		}
		wait := ReconcileEvery
		if !r.reconcile(ctx) {
			wait = time.Second
		}
		if !retry.Stop() {
			select {
			case <-retry.C:
			default:
			}
		}
		retry.Reset(wait)
	}
}

// ReconcileEvery is how often a relay lists the bucket for versions it
// has not relayed yet, besides when its watcher announces one.
var ReconcileEvery = 5 * time.Second

// reconcile relays the versions of the bucket the hub lacks, among the
// newest it keeps; it reports whether none is left to try again.
func (r *Relay) reconcile(ctx context.Context) bool {
	infos, err := r.store.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return true
	}
	done := true
	if err != nil {
		// Right after a node dies, listing can fail for a minute while
		// gets succeed: the versions the last listing found are tried
		// again meanwhile.
		r.log.Warn("listing the NATS bucket; trying again", "err", err)
		done = false
	} else {
		r.listed = r.listed[:0]
		for _, in := range infos {
			if v := versionOf(in.Name); v != 0 && !in.Deleted {
				r.listed = append(r.listed, v)
			}
		}
		slices.Sort(r.listed)
		r.listed = r.listed[max(0, len(r.listed)-r.keep):]
	}
	for _, v := range r.listed {
		if !r.relay(ctx, v) {
			done = false
		}
	}
	return done
}

// relay fetches version v into the hub; it reports whether v is done
// (relayed, held already, or no longer worth it).
func (r *Relay) relay(ctx context.Context, v uint64) bool {
	for _, in := range r.h.Versions() {
		if in.Version == v {
			return true
		}
	}
	// A get that stalls (a request or a chunk that never comes, a
	// consumer that stalled) ends after StallTimeout without an answer,
	// and the version is tried again.
	gctx, cancel := context.WithTimeout(ctx, GetTimeout)
	defer cancel()
	o, err := getObject(gctx, r.js, r.store, objectName(v))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		// A replica may answer before it has the object the update
		// announced: try again (a deletion's update ends the tries).
		r.log.Debug("a version announced is not found yet; trying again", "version", v)
		return false
	}
	if err != nil {
		r.Failed.Add(1)
		r.log.Warn("getting a version from NATS; trying again", "version", v, "err", err)
		return false
	}
	defer o.Close()
	sp := &spooler{dir: r.dir, budget: r.budget, lim: r.limits}
	f, err := sp.spool(gctx, v, o)
	if err != nil {
		r.Failed.Add(1)
		r.log.Warn("a version from NATS did not come whole or did not decode; trying again", "version", v, "err", err)
		return false
	}
	return r.serve(v, f, o.n)
}

// serve publishes version v, spooled into f, into the hub.
func (r *Relay) serve(v uint64, f *tensorfile.SafetensorsFile, n int64) bool {
	if err := r.h.PublishSafetensors(v, f.Safetensors); err != nil {
		f.Close()
		os.Remove(filepath.Join(r.dir, fmt.Sprintf("%d.safetensors", v)))
		r.log.Warn("publishing a version from NATS", "version", v, "err", err)
		return true // refused by the hub (older than it keeps, say): trying again will not help
	}
	r.served = append(r.served, spooled{v: v, f: f})
	r.clean(r.holds)
	r.Relayed.Add(1)
	r.GotBytes.Add(n)
	r.log.Info("relayed from NATS", "version", v, "tensors", f.Len(), "bytes", n, "file", filepath.Join(r.dir, fmt.Sprintf("%d.safetensors", v)))
	return true
}

// holds reports whether the hub keeps version v.
func (r *Relay) holds(v uint64) bool {
	return slices.ContainsFunc(r.h.Versions(), func(in hub.VersionInfo) bool { return in.Version == v })
}

// closeAll closes the spool files (Run has ended).
func (r *Relay) closeAll() {
	for _, sp := range append(r.served, r.closing...) {
		sp.f.Close()
	}
	r.served, r.closing = nil, nil
}

// GetTimeout bounds the time a relay takes to get one version.
var GetTimeout = 24 * time.Hour

// StallTimeout is how long a relay waits for the next bytes of a version
// it is getting before it gives up on this attempt and tries again.
var StallTimeout = 15 * time.Second
