package hub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/budget"
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
func (it *item) key(v, base uint64, lossless bool, coding uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%d|%t|%d|%d|%d", v, base, lossless, coding, it.offset, it.count)
	for _, t := range it.tensors {
		b.WriteByte('|')
		b.WriteString(t.Name)
	}
	return b.String()
}

// chunkElems is how many elements of esz bytes a chunk of a large tensor
// holds: plan's step, and the runs of deltas in exponent order.
func (h *Hub) chunkElems(esz int) int { return max(1, h.chunk/esz) }

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
		step := h.chunkElems(esz)
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
// difference from its base. Lossless deltas go in coding (a DeltaCoding).
func (h *Hub) encode(cur *version, it *item, base *version, lossless bool, coding uint32) ([]byte, error) {
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
		order := 0
		if coding >= DeltaCodingOrdered {
			order = h.chunkElems(t.DType.Size()) // runs of plan's chunks
		}
		d, kind, err := deltaOf(cur, t, base, off, count, lr != nil, order, &s)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case lr != nil && kind != bitDelta:
			return d, lr, nil
		case kind == unchanged:
			return d, deltaRecipe(1, DeltaCodingZstd), nil // all zeros: one segment, a few bytes
		case kind == bitDelta:
			return d, deltaRecipe(t.DType.Size(), coding), nil
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

// chunkable reports whether lossy recipe r codes a tensor of elements of
// esz bytes chunk by chunk as it would code it whole: it works element by
// element, or by blocks that tile the hub's chunks (blockwise int8 with
// blocks of 4096 in chunks of 65536 elements), so every chunk starts a
// block.
func (h *Hub) chunkable(r *codec.Recipe, esz int) bool {
	switch g, blk := r.Granularity(); g {
	case codec.Elementwise:
		return true
	case codec.Block:
		return blk > 0 && esz > 0 && max(1, h.chunk/esz)%blk == 0
	}
	return false
}

// lossyRecipe returns the lossy recipe the policy chooses for tensor t of
// version cur, given the tensor's first chunk, or nil (a lossless recipe,
// a tensor tagged lossless, or a recipe that cannot code it chunk by
// chunk: chunkable). The policy is asked once per version and
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
	if r == nil || !r.Lossy() || !h.chunkable(r, t.DType.Size()) {
		r = nil
	}
	if cur.lossy == nil {
		cur.lossy = map[string]*codec.Recipe{}
	}
	cur.lossy[t.Name] = r
	return r, nil
}

// frames returns the item's encoded frames: from the cache, or encoded
// once for every request that asks for them meanwhile, what encoding
// holds charged meanwhile (charge; nil: not counted).
func (h *Hub) frames(charge func(n int64) (*budget.Charge, error), cur *version, it *item, base *version, lossless bool, coding uint32) ([]byte, error) {
	var b uint64
	if base != nil {
		b = base.id
	} else {
		coding = 0 // no deltas: one cache entry for every coding
	}
	coding = min(coding, DeltaCoding)
	return h.cache.get(cur.id, it.key(cur.id, b, lossless, coding), func() ([]byte, error) {
		if charge != nil {
			// What encoding holds: the elements read (or the delta),
			// the base's, and the frames made.
			ch, err := charge(3 * it.rawBytes())
			if err != nil {
				return nil, err
			}
			defer ch.Release()
		}
		h.encoding <- struct{}{}
		defer func() { <-h.encoding }()
		return h.encode(cur, it, base, lossless, coding)
	})
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

// Fetch implements hubpb.HubServer: it opens the fetch (the request, the
// version, its plan), then sends its chunks as the client grants credit.
func (s *Server) Fetch(st hubpb.Hub_FetchServer) (err error) {
	s.h.fetches.Add(1)
	s.h.active.Add(1)
	defer s.h.active.Add(-1)
	f := &fetchStream{h: s.h, st: st, ctx: st.Context(), start: time.Now()}
	defer func() { f.logDone(err) }()
	if err := f.open(); err != nil {
		return err
	}
	defer f.held.releaseAll()
	go f.receiveGrants()
	return f.send()
}

// fetchStream is one Fetch stream, served.
type fetchStream struct {
	h     *Hub
	st    hubpb.Hub_FetchServer
	ctx   context.Context
	start time.Time

	req       *hubpb.FetchRequest
	ver, base *version
	ts        []*codec.Tensor // the tensors selected
	plan      []item
	credit    int
	grants    chan int
	held      charges // the budget's charges of the chunks gRPC may hold

	chunks, bytes int64 // sent
}

// open reads the request and finds what it asks for.
func (f *fetchStream) open() error {
	first, err := f.st.Recv()
	if err != nil {
		return err
	}
	f.req = first.GetRequest()
	if f.req == nil {
		return status.Error(codes.InvalidArgument, "hub: a fetch opens with a request")
	}
	if f.ver, err = f.h.get(f.req.Version); err != nil {
		return status.Error(codes.NotFound, err.Error())
	}
	specs := make([]Spec, len(f.req.Specs))
	for i, sp := range f.req.Specs {
		specs[i] = Spec{Names: sp.Names, Tags: sp.Tags}
	}
	if f.ts, err = f.ver.selectTensors(specs); err != nil {
		if errors.Is(err, ErrNotFound) {
			return status.Error(codes.NotFound, err.Error())
		}
		return status.Error(codes.InvalidArgument, err.Error())
	}
	f.plan = f.h.plan(f.ts)
	// Deltas against the base the client holds, if the hub still keeps it;
	// else full copies, and the trailer says why.
	if f.req.Base != 0 && f.req.Base != f.ver.id {
		if f.base, err = f.h.get(f.req.Base); err != nil {
			f.base = nil
			f.st.SetTrailer(metadata.Pairs(BaseTrailer, fmt.Sprintf("full copies: base version %d is not kept", f.req.Base)))
		}
	}
	if f.req.ResumeAfter > uint64(len(f.plan)) {
		return status.Errorf(codes.InvalidArgument, "hub: resume after chunk %d of %d", f.req.ResumeAfter, len(f.plan))
	}
	f.credit = int(f.req.Credit)
	if f.credit == 0 {
		f.credit = DefaultCredit
	}
	f.credit = min(f.credit, maxCredit)
	f.grants = make(chan int, 1)
	return nil
}

// receiveGrants takes the client's credit grants while chunks are sent,
// until the stream ends.
func (f *fetchStream) receiveGrants() {
	defer close(f.grants)
	for {
		m, err := f.st.Recv()
		if err != nil {
			return
		}
		select {
		case f.grants <- int(m.GetCredit()):
		case <-f.ctx.Done():
			return
		}
	}
}

// send sends the chunks after the request's ResumeAfter, each when the
// client has credit for it.
func (f *fetchStream) send() error {
	last := uint64(len(f.plan))
	if last == 0 {
		last = 1 // an empty version: one last chunk with no frames
	}
	for seq := f.req.ResumeAfter + 1; seq <= last; seq++ {
		if err := f.awaitCredit(); err != nil {
			return err
		}
		c, err := f.chunk(seq, last)
		if err != nil {
			return err
		}
		if err := f.st.Send(c); err != nil {
			return err
		}
		// gRPC may still hold the chunk sent, queued for a client that
		// reads slowly, until the next Send returns: the one before it
		// is gone.
		f.held.keep(1)
		f.sent(seq, c)
	}
	return nil
}

// testHookNoCredit, when set, is called each time a fetch finds the
// client's credit spent, before it waits for more.
var testHookNoCredit func()

// awaitCredit returns when the client has credit for one more chunk.
func (f *fetchStream) awaitCredit() error {
	for f.credit <= 0 {
		if testHookNoCredit != nil {
			testHookNoCredit()
		}
		select {
		case n, ok := <-f.grants:
			if !ok {
				return status.Error(codes.Canceled, "hub: the client stopped granting credit")
			}
			f.credit = min(f.credit+n, maxCredit)
		case <-f.ctx.Done():
			return status.FromContextError(f.ctx.Err()).Err()
		}
	}
	return nil
}

// chunk makes chunk seq of last: its frames, charged to the budget until
// the next chunk is sent (or the stream ends), and with the digests on
// the last.
func (f *fetchStream) chunk(seq, last uint64) (*hubpb.FetchChunk, error) {
	c := &hubpb.FetchChunk{Seq: seq, Version: f.ver.id, Last: seq == last}
	if len(f.plan) > 0 {
		frames, err := f.h.frames(f.charge, f.ver, &f.plan[seq-1], f.base, f.req.RequireLossless, f.req.DeltaCoding)
		if err != nil {
			return nil, fetchError(f.ctx, seq, err)
		}
		ch, err := f.charge(int64(len(frames)))
		if err != nil {
			return nil, fetchError(f.ctx, seq, err)
		}
		f.held.push(ch)
		c.Frames = frames
	}
	if c.Last {
		var err error
		if c.Digests, err = f.h.digests(f.ver, f.ts, f.req.RequireLossless); err != nil {
			return nil, status.Errorf(codes.Internal, "hub: %v", err)
		}
	}
	return c, nil
}

// charge charges a chunk of n bytes to the budget. When it does not fit
// now, the fetch gives back the charge of the chunk before (which gRPC
// has sent by now unless the client is slow) and waits: fetches that wait
// never hold the budget they wait for.
func (f *fetchStream) charge(n int64) (*budget.Charge, error) {
	ch, err := f.h.budget.TryCharge(n)
	if err == nil {
		return ch, nil
	}
	f.held.releaseAll()
	return f.h.budget.Charge(f.ctx, n)
}

// fetchError is the status of a chunk that could not be made.
func fetchError(ctx context.Context, seq uint64, err error) error {
	switch {
	case errors.Is(err, budget.ErrExhausted):
		return status.Errorf(codes.ResourceExhausted, "hub: chunk %d: %v", seq, err)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Internal, "hub: encoding chunk %d: %v", seq, err)
}

// sent counts chunk seq, c, sent.
func (f *fetchStream) sent(seq uint64, c *hubpb.FetchChunk) {
	n := int64(len(c.Frames))
	f.h.sent.Add(1)
	f.h.bytesSent.Add(n)
	f.h.peers.add(peerName(f.ctx), 1, n)
	if len(f.plan) > 0 {
		f.h.rawSent.Add(f.plan[seq-1].rawBytes())
	}
	f.chunks++
	f.bytes += n
	f.credit--
}

// logDone logs the fetch's end at info (an error of the client's at
// info too: a fetch that was cut is the client's to resume).
func (f *fetchStream) logDone(err error) {
	args := []any{"peer", peerName(f.ctx), "chunks", f.chunks, "bytes", f.bytes, "duration", time.Since(f.start).Round(time.Millisecond)}
	switch {
	case f.ver != nil:
		args = append(args, "version", f.ver.id, "tensors", len(f.ts))
	case f.req != nil:
		args = append(args, "version", f.req.Version) // not found
	}
	if f.base != nil {
		args = append(args, "base", f.base.id)
	}
	f.h.log.Info("fetch", append(args, outcome(err)...)...)
}

// outcome is the log attributes of an RPC's end: outcome=ok, or its
// status code and message.
func outcome(err error) []any {
	if err == nil {
		return []any{"outcome", "ok"}
	}
	st, _ := status.FromError(err)
	return []any{"outcome", st.Code().String(), "err", st.Message()}
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
