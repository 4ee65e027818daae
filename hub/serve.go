package hub

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
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
// deltas.
func (h *Hub) encode(cur *version, it *item, base *version, lossless bool) ([]byte, error) {
	h.encodes.Add(1)
	var s scratch
	defer s.release()
	choose := func(t *codec.Tensor, first bool, changed bool) *codec.Recipe {
		if t.Base != 0 {
			if !changed {
				return deltaRecipes[1] // all zeros: one segment, a few bytes
			}
			return deltaRecipe(t.DType.Size())
		}
		r := h.policy.Choose(codec.FrameInfo{Type: codec.FrameTensor, Name: t.Name, DType: t.DType, Shape: t.Shape,
			Tags: t.Tags, Offset: t.Offset, Len: len(t.Data), First: first, Data: t.Data})
		if r.Lossy() && (lossless || t.Tags.Lossless) {
			return nil
		}
		if g, _ := r.Granularity(); g != codec.Elementwise {
			return nil // chunks are cut by elements: block and whole-tensor recipes do not fit them
		}
		return r
	}
	if it.count == 0 {
		ts := make([]*codec.Tensor, len(it.tensors))
		rs := make([]*codec.Recipe, len(it.tensors))
		for i, t := range it.tensors {
			var changed bool
			var err error
			if ts[i], changed, err = deltaOf(cur, t, base, 0, int(t.NumElements()), &s); err != nil {
				return nil, err
			}
			rs[i] = choose(ts[i], true, changed)
		}
		return h.enc.AppendTensors(nil, ts, rs)
	}
	ch, changed, err := deltaOf(cur, it.tensors[0], base, it.offset, it.count, &s)
	if err != nil {
		return nil, err
	}
	return h.enc.AppendTensor(nil, ch, choose(ch, it.offset == 0, changed))
}

// deltaOf returns elements [off, off+count) of t: as they are, or, when
// base holds a tensor of the same name, dtype and shape, as a lossless
// delta against it (diff; Base set to the base version), all zeros where
// nothing changed. changed reports whether any element did.
func deltaOf(cur *version, t *codec.Tensor, base *version, off, count int, s *scratch) (*codec.Tensor, bool, error) {
	c := *t
	data, err := cur.read(t, off, count, s)
	if err != nil {
		return nil, false, err
	}
	c.Offset, c.Data = int64(off), data
	if base == nil {
		return &c, true, nil
	}
	bt, ok := base.byName[t.Name]
	if !ok || bt.DType != t.DType || !slices.Equal(bt.Shape, t.Shape) {
		return &c, true, nil
	}
	bd, err := base.read(bt, off, count, s)
	if err != nil {
		return nil, false, err
	}
	d := s.get(len(c.Data))
	changed := diff(d, c.Data, bd, t.DType.Size())
	c.Data, c.Base = d, base.id
	return &c, changed, nil
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
			for _, t := range ts {
				d := ver.digests[t.Name]
				c.Digests = append(c.Digests, &hubpb.TensorDigest{Name: t.Name, Sha256: d[:]})
			}
		}
		if err := st.Send(c); err != nil {
			return err
		}
		s.h.sent.Add(1)
		credit--
	}
	return nil
}

// cache keeps encoded chunks, at most max bytes, the least recently used
// evicted first; a chunk being encoded is waited for, not encoded again.
type cache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	m     map[string]*list.Element // of *centry
	lru   list.List                // front: most recent
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
