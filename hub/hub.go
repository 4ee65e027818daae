package hub

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// Defaults of a Hub.
const (
	// DefaultRetention is how many versions a Hub keeps.
	DefaultRetention = 4
	// DefaultChunkSize is the decoded size of the chunks tensors are
	// served in, and of the batches small tensors share.
	DefaultChunkSize = 1 << 20
	// DefaultCacheBytes bounds the encoded chunks the Hub keeps for the
	// clients that ask for them next.
	DefaultCacheBytes = 256 << 20
	// DefaultUploadSlowDecoded is an upload's MaxSlowDecoded by default
	// (WithUploadLimits): gradient.DefaultSlowDecoded.
	DefaultUploadSlowDecoded = gradient.DefaultSlowDecoded
)

// ErrNotFound is returned for a version or tensor the Hub does not hold.
var ErrNotFound = errors.New("hub: not found")

// Hub holds published model versions and serves them (Server). It is safe
// for concurrent use.
type Hub struct {
	mu       sync.RWMutex
	versions map[uint64]*version
	order    []uint64          // published versions, oldest first
	rounds   map[uint64]*round // upload accumulators
	closed   uint64            // rounds below this are closed (CloseRound)
	journal  *journal          // RunFedAvg's record of the open round's updates, or nil

	retention int
	chunk     int
	policy    codec.Policy
	cache     *cache
	enc       *codec.Encoder
	budget    *budget.Budget // what is held for peers; nil: not counted
	upload    codec.Limits   // an upload's frame is decoded within these
	encoding  chan struct{}  // a token per encode running: at most GOMAXPROCS
	log       *slog.Logger

	encodes         atomic.Int64 // chunks encoded
	encodeNanos     atomic.Int64
	sent            atomic.Int64 // chunks sent
	bytesSent       atomic.Int64
	rawSent         atomic.Int64
	fetches         atomic.Int64 // fetch RPCs served
	active          atomic.Int64 // fetch streams open
	updates         atomic.Int64 // upload frames added
	updateBytes     atomic.Int64
	uploads         atomic.Int64 // upload streams open
	badUpdates      [2]atomic.Int64
	lateUpdates     atomic.Int64 // refused: their round was closed
	dupUpdates      atomic.Int64 // refused: the peer's update of the tensor was counted
	repeatedUpdates atomic.Int64 // acknowledged again: the same update was counted
	recipes         accounts     // segment bytes before and after coding, by recipe
	peers           accounts     // chunks and bytes sent, by client host
}

// Stats counts what a Hub has done.
type Stats struct {
	Fetches       int64   // fetch RPCs
	ActiveFetches int64   // fetch streams open now
	ChunksSent    int64   // chunks sent to clients
	BytesSent     int64   // their frames' bytes
	RawBytesSent  int64   // their tensors' decoded bytes
	Encodes       int64   // chunks encoded
	CacheHits     int64   // chunks taken from the cache of encoded chunks
	EncodeSeconds float64 // time spent encoding them
	Updates       int64   // uploaded updates added into a round's sum
	UpdateBytes   int64   // their frames' bytes
	ActiveUploads int64   // upload streams open now
	// Refused updates: malformed (InvalidArgument) and over the limits
	// (ResourceExhausted).
	MalformedUpdates, OversizedUpdates int64
	// LateUpdates were refused because CloseRound had ended their round
	// (FailedPrecondition): their clients keep them for a later round.
	LateUpdates int64
	// DuplicateUpdates were refused because the peer's update of the
	// tensor was already counted in the round (AlreadyExists).
	// RepeatedUpdates were that update again, the same frame and weight
	// (a retry whose first acknowledgement was lost): acknowledged again,
	// counted once.
	DuplicateUpdates, RepeatedUpdates int64
	// Recipes: by recipe (its text, or "raw"), the bytes of the segments
	// it coded, before (In) and after (Out); each chunk is counted when it
	// is encoded, not each time the cache serves it. Peers: by client
	// host, the chunks (In) and frames' bytes (Out) sent to it. At most
	// MaxAccounts names each, the rest under Other.
	Recipes, Peers map[string]Account
	Versions       int          // versions held
	Memory         budget.Stats // the memory budget (WithBudget; zero: none)
	// ShadowBytes is what the versions' shadows hold (the copies lossy
	// deltas are taken from: shadow.go), beside the versions themselves.
	ShadowBytes int64
}

// Stats returns the Hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.RLock()
	n := len(h.versions)
	var shadow int64
	for _, v := range h.versions {
		for _, b := range v.shadow {
			shadow += int64(len(b))
		}
	}
	h.mu.RUnlock()
	return Stats{
		Fetches: h.fetches.Load(), ActiveFetches: h.active.Load(), ChunksSent: h.sent.Load(),
		BytesSent: h.bytesSent.Load(), RawBytesSent: h.rawSent.Load(), Encodes: h.encodes.Load(), CacheHits: h.cache.hits.Load(),
		EncodeSeconds: float64(h.encodeNanos.Load()) / 1e9, Updates: h.updates.Load(), UpdateBytes: h.updateBytes.Load(),
		ActiveUploads: h.uploads.Load(), MalformedUpdates: h.badUpdates[0].Load(), OversizedUpdates: h.badUpdates[1].Load(),
		LateUpdates: h.lateUpdates.Load(), DuplicateUpdates: h.dupUpdates.Load(), RepeatedUpdates: h.repeatedUpdates.Load(),
		Recipes: h.recipes.snapshot(), Peers: h.peers.snapshot(),
		Versions: n, Memory: h.budget.Stats(), ShadowBytes: shadow,
	}
}

// version is a published model version.
type version struct {
	id       uint64
	tensors  []*codec.Tensor // sorted by name; Data nil for those read from a file
	byName   map[string]*codec.Tensor
	sections map[string]*io.SectionReader // where the file-backed tensors' bytes are
	digests  map[string][32]byte
	bytes    uint64

	mu    sync.Mutex
	lossy map[string]*codec.Recipe // the policy's lossy recipe per tensor, or nil: asked once

	// shadow holds, per tensor sent through a lossy recipe, the copy a
	// client holds that fetched the versions one by one as lossy deltas
	// (shadow.go); lossy deltas against v are taken from it. Set before
	// v is published, read-only after. A tensor without one: its elements.
	shadow map[string][]byte
}

// read returns elements [off, off+count) of t, one of v's tensors: a slice
// of its data, or read from its file into a buffer from s.
func (v *version) read(t *codec.Tensor, off, count int, s *scratch) ([]byte, error) {
	esz := t.DType.Size()
	if t.Data != nil {
		return t.Data[off*esz : (off+count)*esz], nil
	}
	sec, ok := v.sections[t.Name]
	if !ok {
		return nil, fmt.Errorf("hub: tensor %q of version %d has no data", t.Name, v.id)
	}
	b := s.get(count * esz)
	if _, err := sec.ReadAt(b, int64(off*esz)); err != nil {
		return nil, fmt.Errorf("hub: reading tensor %q of version %d: %w", t.Name, v.id, err)
	}
	return b, nil
}

// scratch hands out buffers for one encoding and takes them all back
// after it: chunks read from files and deltas, which the encoded frames
// no longer need.
type scratch struct{ held []*[]byte }

var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

// get returns an 8-byte aligned buffer of n bytes.
func (s *scratch) get(n int) []byte {
	p := scratchPool.Get().(*[]byte)
	if cap(*p) < n {
		*p = codec.AlignedBytes(n)
	}
	s.held = append(s.held, p)
	return (*p)[:n]
}

// release returns the buffers.
func (s *scratch) release() {
	for _, p := range s.held {
		scratchPool.Put(p)
	}
	s.held = s.held[:0]
}

// Option configures a Hub.
type Option func(*Hub) error

// WithRetention keeps the n newest versions (default DefaultRetention).
func WithRetention(n int) Option {
	return func(h *Hub) error {
		if n < 1 {
			return fmt.Errorf("hub: retention %d: keep at least one version", n)
		}
		h.retention = n
		return nil
	}
}

// WithChunkSize sets the chunk size (default DefaultChunkSize, within
// codec.MinChunkSize and codec.MaxChunkSize).
func WithChunkSize(n int) Option {
	return func(h *Hub) error {
		if n < codec.MinChunkSize || n > codec.MaxChunkSize {
			return fmt.Errorf("hub: chunk size %d outside [%d, %d]", n, codec.MinChunkSize, codec.MaxChunkSize)
		}
		h.chunk = n
		return nil
	}
}

// WithPolicy sets how chunks are coded. The policy must be deterministic
// for a chunk's data (its choice is cached, once, for every client): the
// default, rpc.ByClass, chooses by the kind of data.
func WithPolicy(p codec.Policy) Option {
	return func(h *Hub) error {
		if p == nil {
			return errors.New("hub: nil policy")
		}
		h.policy = p
		return nil
	}
}

// WithCacheBytes bounds the encoded-chunk cache (default
// DefaultCacheBytes; 0 turns it off: every chunk encoded per request).
func WithCacheBytes(n int64) Option {
	return func(h *Hub) error {
		if n < 0 {
			return fmt.Errorf("hub: cache of %d bytes", n)
		}
		h.cache = newCache(n)
		return nil
	}
}

// WithUploadLimits sets the limits an upload's frame is decoded with;
// zero fields take those of gradient.ReceiverLimits, the default. A frame
// over them is refused (ResourceExhausted) before it is decoded. Their
// MaxSlowDecoded, 1 MiB by default, bounds what decodes through the
// stages of some MB/s (floatcm, floatrank: a frame of 64 MiB of zeros is
// under 200 KB on the wire and takes 4-10 s, under its round's lock):
// raise it for peers that upload through them. The journal of a round is
// read again without that bound, as what it holds was accepted.
func WithUploadLimits(l codec.Limits) Option {
	return func(h *Hub) error {
		h.upload = l.Fill(gradient.ReceiverLimits())
		return nil
	}
}

// WithLogger logs the hub's work to l: a line per fetch and per upload
// at info (peer, version, tensors, bytes, duration, outcome), and the
// progress of publishing a large version from files. Default: none.
func WithLogger(l *slog.Logger) Option {
	return func(h *Hub) error {
		if l == nil {
			return errors.New("hub: nil logger")
		}
		h.log = l
		return nil
	}
}

// New returns an empty Hub.
func New(opts ...Option) (*Hub, error) {
	enc, err := codec.NewEncoder()
	if err != nil {
		return nil, err
	}
	h := &Hub{versions: map[uint64]*version{}, retention: DefaultRetention, chunk: DefaultChunkSize,
		policy: defaultPolicy(), cache: newCache(DefaultCacheBytes), enc: enc, log: slog.New(slog.DiscardHandler), upload: gradient.ReceiverLimits(),
		encoding: make(chan struct{}, runtime.GOMAXPROCS(0))}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("hub: nil option")
		}
		if err := o(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Publish makes tensors model version v (greater than 0, not published
// before). The Hub keeps the tensors as they are: do not change them
// afterwards. Versions beyond the retention are dropped, oldest first.
func (h *Hub) Publish(v uint64, tensors []*codec.Tensor) error {
	if v == 0 {
		return errors.New("hub: version 0 is reserved (it means the newest)")
	}
	ver := &version{id: v, byName: make(map[string]*codec.Tensor, len(tensors)), digests: make(map[string][32]byte, len(tensors))}
	for _, t := range tensors {
		if t == nil {
			return errors.New("hub: Publish: a nil tensor")
		}
		if err := t.Validate(); err != nil {
			return fmt.Errorf("hub: Publish version %d: %w", v, err)
		}
		if !t.IsWhole() {
			return fmt.Errorf("hub: Publish version %d: tensor %q is a chunk", v, t.Name)
		}
		if _, dup := ver.byName[t.Name]; dup {
			return fmt.Errorf("hub: Publish version %d: tensor %q twice", v, t.Name)
		}
		for _, tg := range t.Tags.Extra {
			if tg.Key == DeltaTag.Key {
				return fmt.Errorf("hub: Publish version %d: tensor %q: tag %q is the hub's own", v, t.Name, tg.Key)
			}
		}
		c := *t
		c.Version, c.Base = v, 0
		ver.byName[t.Name] = &c
		ver.tensors = append(ver.tensors, &c)
		ver.digests[t.Name] = sha256.Sum256(t.Data)
		ver.bytes += uint64(len(t.Data))
	}
	return h.publish(ver)
}

// PublishSafetensors makes the tensors of the safetensors file s version
// v without holding them: the Hub keeps their metadata and reads each
// chunk from s when it encodes it (a chunk encoded once serves every
// client; the cache bounds what stays in memory). s must stay open while
// the version is kept. The digests are computed now, reading s once.
func (h *Hub) PublishSafetensors(v uint64, s *tensorfile.Safetensors) error {
	fts := make([]fileTensor, 0, s.Len())
	for i, ti := range s.Tensors() {
		sec, err := s.Section(i)
		if err != nil {
			return err
		}
		fts = append(fts, fileTensor{t: codec.Tensor{Name: ti.Name, DType: ti.DType, Shape: slices.Clone(ti.Shape)}, sec: sec})
	}
	return h.publishFiles("PublishSafetensors", v, fts)
}

// NpyFile is one tensor of a model published from .npy files: the array
// in R (an *os.File, say), Size bytes long, served under Name.
type NpyFile struct {
	Name string
	R    io.ReaderAt
	Size int64
}

// PublishNpy makes the arrays of the .npy files version v, as
// PublishSafetensors does for a safetensors file: only their headers and
// digests are kept, and each chunk is read from its file when it is
// encoded. The files must stay open while the version is kept. A file
// whose header np.load would not read as a little-endian C-order array of
// a supported dtype, or whose length is not the header's plus the data's,
// is refused (errors wrap codec.ErrUnsupported or codec.ErrCorrupt).
func (h *Hub) PublishNpy(v uint64, files []NpyFile) error {
	fts := make([]fileTensor, 0, len(files))
	for _, f := range files {
		hd, err := tensorfile.ReadNpyHeader(io.NewSectionReader(f.R, 0, f.Size))
		if err == io.EOF {
			err = fmt.Errorf("empty file: %w", codec.ErrCorrupt)
		}
		if err != nil {
			return fmt.Errorf("hub: PublishNpy version %d: tensor %q: %w", v, f.Name, err)
		}
		if end := hd.DataOffset() + hd.DataSize(); end != f.Size {
			return fmt.Errorf("hub: PublishNpy version %d: tensor %q: the header says %d bytes, the file has %d: %w",
				v, f.Name, end, f.Size, codec.ErrCorrupt)
		}
		fts = append(fts, fileTensor{t: codec.Tensor{Name: f.Name, DType: hd.DType, Shape: hd.Shape},
			sec: io.NewSectionReader(f.R, hd.DataOffset(), hd.DataSize())})
	}
	return h.publishFiles("PublishNpy", v, fts)
}

// fileTensor is a tensor's metadata and where its bytes are.
type fileTensor struct {
	t   codec.Tensor
	sec *io.SectionReader
}

// publishFiles publishes file-backed tensors as version v, reading each
// once for its digest.
func (h *Hub) publishFiles(op string, v uint64, fts []fileTensor) error {
	if v == 0 {
		return errors.New("hub: version 0 is reserved (it means the newest)")
	}
	ver := &version{id: v, byName: map[string]*codec.Tensor{}, sections: map[string]*io.SectionReader{}, digests: map[string][32]byte{}}
	prog := h.newProgress(v, fts)
	buf := make([]byte, 1<<20)
	for _, ft := range fts {
		t := &ft.t
		if _, dup := ver.byName[t.Name]; dup {
			return fmt.Errorf("hub: %s version %d: tensor %q twice", op, v, t.Name)
		}
		if t.Name == "" {
			return fmt.Errorf("hub: %s version %d: a tensor without a name", op, v)
		}
		d := sha256.New()
		if _, err := io.CopyBuffer(d, io.NewSectionReader(ft.sec, 0, ft.sec.Size()), buf); err != nil {
			return fmt.Errorf("hub: %s version %d: tensor %q: %w", op, v, t.Name, err)
		}
		t.Version = v
		ver.tensors = append(ver.tensors, t)
		ver.byName[t.Name] = t
		ver.sections[t.Name] = ft.sec
		ver.digests[t.Name] = [32]byte(d.Sum(nil))
		ver.bytes += uint64(ft.sec.Size())
		prog.add(ft.sec.Size())
	}
	return h.publish(ver)
}

// progressEvery is how often reading a version's files for their digests
// is logged.
const progressEvery = 2 * time.Second

// progress logs how far reading a version's files has come: at the
// start, then every progressEvery.
type progress struct {
	log         *slog.Logger
	v           uint64
	done, total int64
	last        time.Time
}

func (h *Hub) newProgress(v uint64, fts []fileTensor) *progress {
	p := &progress{log: h.log, v: v, last: time.Now()}
	for _, ft := range fts {
		p.total += ft.sec.Size()
	}
	p.log.Info("reading version", "version", v, "tensors", len(fts), "bytes", p.total)
	return p
}

func (p *progress) add(n int64) {
	p.done += n
	if now := time.Now(); now.Sub(p.last) >= progressEvery && p.done < p.total {
		p.last = now
		p.log.Info("reading version", "version", p.v, "done", fmt.Sprintf("%.0f%%", 100*float64(p.done)/float64(p.total)),
			"bytes", p.done, "of", p.total)
	}
}

// publish adds ver and drops versions beyond the retention.
func (h *Hub) publish(ver *version) error {
	v := ver.id
	sort.Slice(ver.tensors, func(i, j int) bool { return ver.tensors[i].Name < ver.tensors[j].Name })
	h.makeShadow(ver, h.before(v))
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.versions[v]; ok {
		return fmt.Errorf("hub: version %d is published already", v)
	}
	h.versions[v] = ver
	h.order = append(h.order, v)
	slices.Sort(h.order)
	for len(h.order) > h.retention {
		old := h.order[0]
		h.order = h.order[1:]
		delete(h.versions, old)
		h.cache.dropVersion(old)
	}
	return nil
}

// get returns version v (0: the newest).
func (h *Hub) get(v uint64) (*version, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if v == 0 {
		if len(h.order) == 0 {
			return nil, fmt.Errorf("%w: no version published", ErrNotFound)
		}
		v = h.order[len(h.order)-1]
	}
	ver, ok := h.versions[v]
	if !ok {
		return nil, fmt.Errorf("%w: version %d (the hub keeps %v)", ErrNotFound, v, h.order)
	}
	return ver, nil
}

// Spec selects tensors: by name or glob (path.Match), by tags (each key
// given must have one of the values), or all when both are empty.
type Spec struct {
	Names []string
	Tags  map[string]string
}

func (s *Spec) matches(t *codec.Tensor) (bool, error) {
	if len(s.Names) > 0 {
		ok := false
		for _, n := range s.Names {
			m, err := path.Match(n, t.Name)
			if err != nil {
				return false, fmt.Errorf("hub: name pattern %q: %w", n, err)
			}
			ok = ok || m
		}
		if !ok {
			return false, nil
		}
	}
	for k, v := range s.Tags {
		found := false
		for _, tg := range t.Tags.Extra {
			found = found || tg.Key == k && tg.Value == v
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

// selectTensors returns the tensors of ver any spec selects (all when
// there are none), in name order.
func (ver *version) selectTensors(specs []Spec) ([]*codec.Tensor, error) {
	if len(specs) == 0 {
		return ver.tensors, nil
	}
	var out []*codec.Tensor
	for _, t := range ver.tensors {
		for i := range specs {
			ok, err := specs[i].matches(t)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, t)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no tensor of version %d matches the request", ErrNotFound, ver.id)
	}
	return out, nil
}

// VersionInfo describes a published version.
type VersionInfo struct {
	Version uint64
	Tensors int
	Bytes   uint64
}

// Versions lists the published versions, newest first.
func (h *Hub) Versions() []VersionInfo {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]VersionInfo, 0, len(h.order))
	for i := len(h.order) - 1; i >= 0; i-- {
		v := h.versions[h.order[i]]
		out = append(out, VersionInfo{Version: v.id, Tensors: len(v.tensors), Bytes: v.bytes})
	}
	return out
}

// FrameBytes returns what a Hub made with opts sends for a fetch of all of
// model, in frame bytes (before gRPC's framing): full copies when base is
// nil, else deltas against base, in the coding this release's clients ask
// for (DeltaCoding). It measures; it serves nothing.
func FrameBytes(model, base []*codec.Tensor, opts ...Option) (int64, error) {
	h, err := New(append(opts, WithCacheBytes(0))...)
	if err != nil {
		return 0, err
	}
	var bv *version
	if base != nil {
		if err := h.Publish(1, base); err != nil {
			return 0, err
		}
		if bv, err = h.get(1); err != nil {
			return 0, err
		}
	}
	if err := h.Publish(2, model); err != nil {
		return 0, err
	}
	v, err := h.get(2)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, it := range h.plan(v.tensors) {
		f, err := h.frames(nil, v, &it, bv, false, DeltaCoding)
		if err != nil {
			return 0, err
		}
		n += int64(len(f))
	}
	return n, nil
}
