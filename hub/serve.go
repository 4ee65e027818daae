package hub

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/float16"
	"github.com/tensorpress/tensorpress/rpc"
)

// BaseTrailer is the trailer key in which a fetch that asked for deltas
// says why it sent full copies instead.
const BaseTrailer = "tensorpress-base"

// smallTensor is the size up to which whole tensors share chunks.
const smallTensor = 64 << 10

// DefaultCredit is how many chunks a fetch may have in flight when the
// request grants none.
const DefaultCredit = 4

// maxCredit bounds what a client may grant, so that a client cannot make
// the hub queue a whole model for it.
const maxCredit = 64

func defaultPolicy() codec.Policy { return rpc.ByClass{} }

// item is one chunk of a fetch: several small whole tensors, or a range
// of one tensor's elements.
type item struct {
	tensors []*codec.Tensor // the batch, or the one tensor
	offset  int             // first element (one tensor)
	count   int             // elements (one tensor; 0 for a batch)
}

// rawBytes is the decoded size of the item's tensors.
func (it *item) rawBytes() int64 {
	if it.count > 0 {
		return int64(it.count) * int64(it.tensors[0].DType.Size())
	}
	var n int64
	for _, t := range it.tensors {
		n += t.NumBytes()
	}
	return n
}

// key names the item's encoded frames in the cache.
func (it *item) key(v, base uint64, lossless bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%d|%t|%d|%d", v, base, lossless, it.offset, it.count)
	for _, t := range it.tensors {
		b.WriteByte('|')
		b.WriteString(t.Name)
	}
	return b.String()
}

// plan cuts the selected tensors into items, the same for every request
// that selects the same tensors: small whole tensors batched up to the
// chunk size, larger ones in chunks of the chunk size.
func (h *Hub) plan(ts []*codec.Tensor) []item {
	var out []item
	var batch []*codec.Tensor
	size := 0
	flush := func() {
		if len(batch) > 0 {
			out = append(out, item{tensors: batch})
			batch, size = nil, 0
		}
	}
	maxBatch := codec.DefaultLimits().MaxTensors
	for _, t := range ts {
		n := int(t.NumBytes())
		if n <= smallTensor {
			if size+n > h.chunk || len(batch) == maxBatch {
				flush()
			}
			batch = append(batch, t)
			size += n
			continue
		}
		flush()
		esz := t.DType.Size()
		nel := n / esz
		step := max(1, h.chunk/esz)
		for off := 0; off < nel; off += step {
			out = append(out, item{tensors: []*codec.Tensor{t}, offset: off, count: min(step, nel-off)})
		}
	}
	flush()
	return out
}

// encode makes the frames of an item of version v; against base (when
// not nil) the tensors it holds with the same dtype and shape go as
// deltas. Unless lossless, a tensor for which the policy chose a lossy
// recipe (lossyRecipe) goes through it: whole, or as the arithmetic
// difference from its base.
func (h *Hub) encode(cur *version, it *item, base *version, lossless bool) ([]byte, error) {
	h.encodes.Add(1)
	defer func(t0 time.Time) { h.encodeNanos.Add(int64(time.Since(t0))) }(time.Now())
	var s scratch
	defer s.release()
	one := func(t *codec.Tensor, off, count int) (*codec.Tensor, *codec.Recipe, error) {
		var lr *codec.Recipe
		if !lossless {
			var err error
			if lr, err = h.lossyRecipe(cur, t, &s); err != nil {
				return nil, nil, err
			}
		}
		d, kind, err := deltaOf(cur, t, base, off, count, lr != nil, &s)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case lr != nil && kind != bitDelta:
			return d, lr, nil
		case kind == unchanged:
			return d, deltaRecipes[1], nil // all zeros: one segment, a few bytes
		case kind == bitDelta:
			return d, deltaRecipe(t.DType.Size()), nil
		}
		r := h.policy.Choose(codec.FrameInfo{Type: codec.FrameTensor, Name: d.Name, DType: d.DType, Shape: d.Shape,
			Tags: d.Tags, Offset: d.Offset, Len: len(d.Data), First: off == 0, Data: d.Data})
		if r.Lossy() || !elementwise(r) {
			r = nil // lossy recipes only as lossyRecipe chose them; chunks are cut by elements
		}
		return d, r, nil
	}
	if it.count == 0 {
		ts := make([]*codec.Tensor, len(it.tensors))
		rs := make([]*codec.Recipe, len(it.tensors))
		for i, t := range it.tensors {
			var err error
			if ts[i], rs[i], err = one(t, 0, int(t.NumElements())); err != nil {
				return nil, err
			}
		}
		return h.appendCounted(ts, rs)
	}
	ch, r, err := one(it.tensors[0], it.offset, it.count)
	if err != nil {
		return nil, err
	}
	return h.appendCounted([]*codec.Tensor{ch}, []*codec.Recipe{r})
}

// appendCounted encodes one frame of ts and counts its segments' bytes,
// before and after coding, under the recipe of the tensor each belongs to.
func (h *Hub) appendCounted(ts []*codec.Tensor, rs []*codec.Recipe) ([]byte, error) {
	stats := make([]codec.SegmentStat, 0, 2*len(ts))
	frame, stats, err := h.enc.AppendTensorsStats(nil, stats, ts, rs)
	if err != nil {
		return nil, err
	}
	for i, t := range ts {
		var raw, stored int64
		for _, st := range stats {
			if st.Tensor == t.Name {
				raw += int64(st.RawLen)
				stored += int64(st.StoredLen)
			}
		}
		h.recipes.add(recipeName(rs[i]), raw, stored)
	}
	return frame, nil
}

// recipeName is the label of r in Stats.Recipes: its text, or "raw".
func recipeName(r *codec.Recipe) string {
	if s := r.String(); s != "" {
		return s
	}
	return "raw"
}

func elementwise(r *codec.Recipe) bool {
	g, _ := r.Granularity()
	return g == codec.Elementwise
}

// lossyRecipe returns the lossy recipe the policy chooses for tensor t of
// version cur, given the tensor's first chunk, or nil (a lossless recipe,
// a tensor tagged lossless, or a recipe that does not work element by
// element, which chunks need). The policy is asked once per version and
// tensor, so that every chunk and every client get the same answer.
func (h *Hub) lossyRecipe(cur *version, t *codec.Tensor, s *scratch) (*codec.Recipe, error) {
	if t.Tags.Lossless {
		return nil, nil
	}
	cur.mu.Lock()
	defer cur.mu.Unlock()
	if r, ok := cur.lossy[t.Name]; ok {
		return r, nil
	}
	n := int(t.NumElements())
	if t.DType.Size() > 0 {
		n = min(n, max(1, h.chunk/t.DType.Size()))
	}
	first, err := cur.read(t, 0, n, s)
	if err != nil {
		return nil, err
	}
	r := h.policy.Choose(codec.FrameInfo{Type: codec.FrameTensor, Name: t.Name, DType: t.DType, Shape: t.Shape,
		Tags: t.Tags, Len: len(first), First: true, Data: first})
	if r == nil || !r.Lossy() || !elementwise(r) {
		r = nil
	}
	if cur.lossy == nil {
		cur.lossy = map[string]*codec.Recipe{}
	}
	cur.lossy[t.Name] = r
	return r, nil
}

// A delta's kind.
const (
	noDelta   = iota // the elements as they are
	unchanged        // a bit delta of zeros
	bitDelta         // diff: lossless
	subDelta         // the arithmetic difference (DeltaTag)
)

// DeltaTag marks a tensor whose delta is the arithmetic difference of its
// elements from the base's (in the element's float type), sent through a
// lossy recipe; deltas without it are the lossless diff of the bits.
var DeltaTag = codec.Tag{Key: "tensorpress.delta", Value: "sub"}

// deltaOf returns elements [off, off+count) of t: as they are, or, when
// base holds a tensor of the same name, dtype and shape, as a delta
// against it (Base set to the base version): the arithmetic difference
// when sub and the dtype is a float (tagged DeltaTag), else the lossless
// diff of the bits.
func deltaOf(cur *version, t *codec.Tensor, base *version, off, count int, sub bool, s *scratch) (*codec.Tensor, int, error) {
	c := *t
	data, err := cur.read(t, off, count, s)
	if err != nil {
		return nil, 0, err
	}
	c.Offset, c.Data = int64(off), data
	if base == nil {
		return &c, noDelta, nil
	}
	bt, ok := base.byName[t.Name]
	if !ok || bt.DType != t.DType || !slices.Equal(bt.Shape, t.Shape) {
		return &c, noDelta, nil
	}
	bd, err := base.read(bt, off, count, s)
	if err != nil {
		return nil, 0, err
	}
	d := s.get(len(c.Data))
	c.Data, c.Base = d, base.id
	if sub && subtract(d, data, bd, t.DType) {
		c.Tags.Extra = append(slices.Clip(c.Tags.Extra), DeltaTag)
		return &c, subDelta, nil
	}
	if !diff(d, data, bd, t.DType.Size()) {
		return &c, unchanged, nil
	}
	return &c, bitDelta, nil
}

// subtract sets d to cur − base element by element, rounded to dt, and
// reports whether dt is a float type it handles.
func subtract(d, cur, base []byte, dt codec.DType) bool {
	le := binary.LittleEndian
	switch dt {
	case codec.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			x := math.Float32frombits(le.Uint32(cur[i:])) - math.Float32frombits(le.Uint32(base[i:]))
			le.PutUint32(d[i:], math.Float32bits(x))
		}
	case codec.F64:
		for i := 0; i+8 <= len(d); i += 8 {
			x := math.Float64frombits(le.Uint64(cur[i:])) - math.Float64frombits(le.Uint64(base[i:]))
			le.PutUint64(d[i:], math.Float64bits(x))
		}
	case codec.F16, codec.BF16:
		to, from := float16.F16ToF32, float16.F16FromF32
		if dt == codec.BF16 {
			to, from = float16.BF16ToF32, float16.BF16FromF32
		}
		for i := 0; i+2 <= len(d); i += 2 {
			le.PutUint16(d[i:], from(to(le.Uint16(cur[i:]))-to(le.Uint16(base[i:]))))
		}
	default:
		return false
	}
	return true
}

// add turns d, a difference made by subtract, into base + d, in place.
func add(d, base []byte, dt codec.DType) {
	le := binary.LittleEndian
	switch dt {
	case codec.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			x := math.Float32frombits(le.Uint32(base[i:])) + math.Float32frombits(le.Uint32(d[i:]))
			le.PutUint32(d[i:], math.Float32bits(x))
		}
	case codec.F64:
		for i := 0; i+8 <= len(d); i += 8 {
			x := math.Float64frombits(le.Uint64(base[i:])) + math.Float64frombits(le.Uint64(d[i:]))
			le.PutUint64(d[i:], math.Float64bits(x))
		}
	case codec.F16, codec.BF16:
		to, from := float16.F16ToF32, float16.F16FromF32
		if dt == codec.BF16 {
			to, from = float16.BF16ToF32, float16.BF16FromF32
		}
		for i := 0; i+2 <= len(d); i += 2 {
			le.PutUint16(d[i:], from(to(le.Uint16(base[i:]))+to(le.Uint16(d[i:]))))
		}
	}
}

// diff sets d to the delta of the elements of esz bytes in cur against
// base: the zigzag-coded wrapping difference of their bits as unsigned
// little-endian integers (a float that moved a little gives a small
// number, whose high bytes are zero), and reports whether any element
// differs. Elements of other sizes are XORed byte by byte.
func diff(d, cur, base []byte, esz int) bool {
	var any uint64
	switch esz {
	case 2:
		for i := 0; i+2 <= len(d); i += 2 {
			x := binary.LittleEndian.Uint16(cur[i:]) - binary.LittleEndian.Uint16(base[i:])
			z := x<<1 ^ uint16(int16(x)>>15)
			binary.LittleEndian.PutUint16(d[i:], z)
			any |= uint64(z)
		}
	case 4:
		for i := 0; i+4 <= len(d); i += 4 {
			x := binary.LittleEndian.Uint32(cur[i:]) - binary.LittleEndian.Uint32(base[i:])
			z := x<<1 ^ uint32(int32(x)>>31)
			binary.LittleEndian.PutUint32(d[i:], z)
			any |= uint64(z)
		}
	case 8:
		for i := 0; i+8 <= len(d); i += 8 {
			x := binary.LittleEndian.Uint64(cur[i:]) - binary.LittleEndian.Uint64(base[i:])
			z := x<<1 ^ uint64(int64(x)>>63)
			binary.LittleEndian.PutUint64(d[i:], z)
			any |= z
		}
	default:
		for i := range d {
			d[i] = cur[i] ^ base[i]
			any |= uint64(d[i])
		}
	}
	return any != 0
}

// undiff turns d, a delta made by diff against base, back into the
// elements themselves, in place.
func undiff(d, base []byte, esz int) {
	switch esz {
	case 2:
		for i := 0; i+2 <= len(d); i += 2 {
			z := binary.LittleEndian.Uint16(d[i:])
			x := z>>1 ^ -(z & 1)
			binary.LittleEndian.PutUint16(d[i:], binary.LittleEndian.Uint16(base[i:])+x)
		}
	case 4:
		for i := 0; i+4 <= len(d); i += 4 {
			z := binary.LittleEndian.Uint32(d[i:])
			x := z>>1 ^ -(z & 1)
			binary.LittleEndian.PutUint32(d[i:], binary.LittleEndian.Uint32(base[i:])+x)
		}
	case 8:
		for i := 0; i+8 <= len(d); i += 8 {
			z := binary.LittleEndian.Uint64(d[i:])
			x := z>>1 ^ -(z & 1)
			binary.LittleEndian.PutUint64(d[i:], binary.LittleEndian.Uint64(base[i:])+x)
		}
	default:
		for i := range d {
			d[i] ^= base[i]
		}
	}
}

// deltaRecipes code deltas: the element's bytes shuffled into planes
// (the high ones mostly zero between successive versions), then zstd.
var deltaRecipes = map[int]*codec.Recipe{
	1: codec.MustParseRecipe("*:zstd(1)"),
	2: codec.MustParseRecipe("shuffle2 | *:zstd(1)"),
	4: codec.MustParseRecipe("shuffle4 | *:zstd(1)"),
	8: codec.MustParseRecipe("shuffle8 | *:zstd(1)"),
}

func deltaRecipe(esz int) *codec.Recipe {
	if r, ok := deltaRecipes[esz]; ok {
		return r
	}
	return deltaRecipes[1]
}

// frames returns the item's encoded frames: from the cache, or encoded
// once for every request that asks for them meanwhile.
func (h *Hub) frames(cur *version, it *item, base *version, lossless bool) ([]byte, error) {
	var b uint64
	if base != nil {
		b = base.id
	}
	return h.cache.get(cur.id, it.key(cur.id, b, lossless), func() ([]byte, error) { return h.encode(cur, it, base, lossless) })
}

// Server serves a Hub over gRPC (hubpb.HubServer).
type Server struct {
	hubpb.UnimplementedHubServer
	h *Hub
}

// NewServer returns the gRPC service of h; register it with
// hubpb.RegisterHubServer.
func NewServer(h *Hub) *Server { return &Server{h: h} }

// Versions implements hubpb.HubServer.
func (s *Server) Versions(context.Context, *hubpb.VersionsRequest) (*hubpb.VersionsReply, error) {
	var out hubpb.VersionsReply
	for _, v := range s.h.Versions() {
		out.Versions = append(out.Versions, &hubpb.VersionInfo{Version: v.Version, Tensors: uint32(v.Tensors), Bytes: v.Bytes})
	}
	return &out, nil
}

// Fetch implements hubpb.HubServer.
func (s *Server) Fetch(st hubpb.Hub_FetchServer) error {
	s.h.fetches.Add(1)
	s.h.active.Add(1)
	defer s.h.active.Add(-1)
	first, err := st.Recv()
	if err != nil {
		return err
	}
	req := first.GetRequest()
	if req == nil {
		return status.Error(codes.InvalidArgument, "hub: a fetch opens with a request")
	}
	ver, err := s.h.get(req.Version)
	if err != nil {
		return status.Error(codes.NotFound, err.Error())
	}
	specs := make([]Spec, len(req.Specs))
	for i, sp := range req.Specs {
		specs[i] = Spec{Names: sp.Names, Tags: sp.Tags}
	}
	ts, err := ver.selectTensors(specs)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return status.Error(codes.NotFound, err.Error())
		}
		return status.Error(codes.InvalidArgument, err.Error())
	}
	plan := s.h.plan(ts)
	// Deltas against the base the client holds, if the hub still keeps it;
	// else full copies, and the trailer says why.
	var base *version
	if req.Base != 0 && req.Base != ver.id {
		if base, err = s.h.get(req.Base); err != nil {
			base = nil
			st.SetTrailer(metadata.Pairs(BaseTrailer, fmt.Sprintf("full copies: base version %d is not kept", req.Base)))
		}
	}
	if req.ResumeAfter > uint64(len(plan)) {
		return status.Errorf(codes.InvalidArgument, "hub: resume after chunk %d of %d", req.ResumeAfter, len(plan))
	}
	credit := int(req.Credit)
	if credit == 0 {
		credit = DefaultCredit
	}
	credit = min(credit, maxCredit)
	// Credit grants arrive while chunks are sent.
	ctx := st.Context()
	grants := make(chan int, 1)
	go func() {
		defer close(grants)
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			n := int(m.GetCredit())
			select {
			case grants <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	last := uint64(len(plan))
	if last == 0 {
		last = 1 // an empty version: one last chunk with no frames
	}
	for seq := req.ResumeAfter + 1; seq <= last; seq++ {
		for credit <= 0 {
			select {
			case n, ok := <-grants:
				if !ok {
					return status.Error(codes.Canceled, "hub: the client stopped granting credit")
				}
				credit = min(credit+n, maxCredit)
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		c := &hubpb.FetchChunk{Seq: seq, Version: ver.id, Last: seq == last}
		if len(plan) > 0 {
			if c.Frames, err = s.h.frames(ver, &plan[seq-1], base, req.RequireLossless); err != nil {
				return status.Errorf(codes.Internal, "hub: encoding chunk %d: %v", seq, err)
			}
		}
		if c.Last {
			if c.Digests, err = s.h.digests(ver, ts, req.RequireLossless); err != nil {
				return status.Errorf(codes.Internal, "hub: %v", err)
			}
		}
		if err := st.Send(c); err != nil {
			return err
		}
		s.h.sent.Add(1)
		s.h.bytesSent.Add(int64(len(c.Frames)))
		s.h.peers.add(peerName(ctx), 1, int64(len(c.Frames)))
		if len(plan) > 0 {
			s.h.rawSent.Add(plan[seq-1].rawBytes())
		}
		credit--
	}
	return nil
}

// digests lists the digests of tensors ts of ver, saying which go
// through a lossy recipe.
func (h *Hub) digests(ver *version, ts []*codec.Tensor, lossless bool) ([]*hubpb.TensorDigest, error) {
	var s scratch
	defer s.release()
	out := make([]*hubpb.TensorDigest, 0, len(ts))
	for _, t := range ts {
		d := ver.digests[t.Name]
		var lr *codec.Recipe
		if !lossless {
			var err error
			if lr, err = h.lossyRecipe(ver, t, &s); err != nil {
				return nil, err
			}
		}
		out = append(out, &hubpb.TensorDigest{Name: t.Name, Sha256: d[:], Lossy: lr != nil})
	}
	return out, nil
}

// cache keeps encoded chunks, at most max bytes, the least recently used
// evicted first; a chunk being encoded is waited for, not encoded again.
type cache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	m     map[string]*list.Element // of *centry
	lru   list.List                // front: most recent
	hits  atomic.Int64             // gets answered by an entry already there
}

type centry struct {
	key     string
	version uint64
	ready   chan struct{}
	frames  []byte
	err     error
}

func newCache(max int64) *cache { return &cache{max: max, m: map[string]*list.Element{}} }

func (c *cache) get(v uint64, key string, encode func() ([]byte, error)) ([]byte, error) {
	if c.max == 0 {
		return encode()
	}
	c.mu.Lock()
	if el, ok := c.m[key]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*centry)
		c.mu.Unlock()
		c.hits.Add(1)
		<-e.ready
		return e.frames, e.err
	}
	e := &centry{key: key, version: v, ready: make(chan struct{})}
	c.m[key] = c.lru.PushFront(e)
	c.mu.Unlock()
	e.frames, e.err = encode()
	close(e.ready)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.err != nil {
		c.remove(key)
		return nil, e.err
	}
	if el, ok := c.m[key]; ok && el.Value.(*centry) == e {
		c.bytes += int64(len(e.frames))
		for c.bytes > c.max && c.lru.Len() > 1 {
			old := c.lru.Back().Value.(*centry)
			if old == e {
				break
			}
			c.remove(old.key)
		}
	}
	return e.frames, nil
}

// remove drops key (under mu).
func (c *cache) remove(key string) {
	el, ok := c.m[key]
	if !ok {
		return
	}
	e := el.Value.(*centry)
	select {
	case <-e.ready:
		c.bytes -= int64(len(e.frames))
	default: // being encoded: not counted yet
	}
	c.lru.Remove(el)
	delete(c.m, key)
}

// dropVersion drops the chunks of version v.
func (c *cache) dropVersion(v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, el := range c.m {
		if el.Value.(*centry).version == v {
			c.remove(key)
		}
	}
}
