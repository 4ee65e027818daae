package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// Request is what a client fetches.
type Request struct {
	Version         uint64 // 0: the newest
	Specs           []Spec // none: every tensor
	RequireLossless bool   // never a lossy recipe
	// Credit is how many chunks may be in flight towards the client
	// (default DefaultCredit, at most 64): the client's memory is about
	// that many chunks, whatever the model's size.
	Credit int
	// Limits bound what the client decodes (zero fields: codec's
	// defaults).
	Limits codec.Limits
	// Base is the version the client holds (0: none): the hub sends the
	// tensors that version also has as deltas against it, and BaseTensor
	// returns the client's copy of one (nil: it has none). A tensor whose
	// delta cannot be applied (no copy) or whose result does not match
	// the version's digest is not an error of the hub: the fetch goes on
	// and ends with a *BaseError naming them, to fetch again whole.
	Base       uint64
	BaseTensor func(name string) *codec.Tensor
	// FastDeltas asks for the deltas that decode fastest (DeltaCodingZstd,
	// over 1 GB/s a core) rather than the smallest (DeltaCoding, about
	// 250 MB/s a core and 3% smaller between FedAvg rounds): for links
	// faster than the client decodes, such as a LAN at 1 Gbit/s or more.
	FastDeltas bool
	// Retries is how many times in a row a fetch whose stream breaks (the
	// connection lost, the hub restarted or drained) or cannot be opened
	// again tries a new one, resuming after the last chunk it received on
	// the same version; a chunk received starts the count again. 0: none
	// (the default); negative: no limit but the context's and Stall.
	// Chunks are whole frames and the hub's plan is the same for the same
	// request, so the tensors assemble across streams as if nothing
	// happened; only the chunks in flight come twice.
	Retries int
	// RetryWait is the pause before the first new stream (default 100
	// ms); each failure in a row doubles it, up to RetryMaxWait (default
	// 5 s), and each pause is drawn at random between half of it and all
	// of it, so that a fleet does not come back in step.
	RetryWait, RetryMaxWait time.Duration
	// OnRetry, if not nil, is called before each pause with what broke.
	OnRetry func(RetryInfo)
	// Stall, if positive, ends the fetch with an error wrapping
	// ErrStalled when no chunk has come for that long, new streams
	// included: a deadline per chunk rather than for the whole fetch
	// (which the context may still set).
	Stall time.Duration
	// Progress, if not nil, is called with each chunk's sequence number
	// once got has had all of its tensors (FetchChunks). A client that
	// records it with what it wrote can resume after it when it starts
	// again, killed in between: ResumeAfter, with the same request and
	// Version set to the version fetched.
	Progress func(seq uint64)
	// ResumeAfter skips the chunks up to this sequence number, received
	// by an earlier FetchChunks of the same request (Version must be set).
	ResumeAfter uint64
}

// RetryInfo tells Request.OnRetry about a broken stream.
type RetryInfo struct {
	Attempt int           // failures in a row, from 1
	Seq     uint64        // the last chunk received: the new stream resumes after it
	Wait    time.Duration // the pause before the next try
	Err     error         // what broke
}

// ErrStalled is wrapped by the error of a fetch that received no chunk for
// Request.Stall.
var ErrStalled = errors.New("hub: no progress")

// BaseError is the error of a fetch whose deltas did not give the
// version for some tensors: the client's base copy of them differs from
// the hub's base version (or it has none). Every other tensor was
// fetched and checked; Result is complete but for these.
type BaseError struct {
	Base  uint64   // the base version asked for
	Names []string // the tensors to fetch again without a base, sorted
}

func (e *BaseError) Error() string {
	return fmt.Sprintf("hub: %d tensors fetched as deltas against version %d do not match the version (the client's base copy differs from the hub's): %s",
		len(e.Names), e.Base, strings.Join(e.Names[:min(len(e.Names), 5)], ", "))
}

// Unwrap makes a BaseError a checksum error (codec.ErrChecksum).
func (e *BaseError) Unwrap() error { return codec.ErrChecksum }

// Result tells how a fetch went.
type Result struct {
	Version uint64 // the version fetched
	Deltas  int    // tensors that came as deltas against the base
	Full    int    // tensors that came whole
	Resumed int    // streams opened again after a break
	// BaseNote is the hub's reason for sending full copies where deltas
	// were asked for (the base is no longer kept), or "".
	BaseNote string
	// Digests are the version's digests of the tensors fetched (SHA-256
	// of their little-endian bytes).
	Digests map[string][32]byte
	// Unchecked names the tensors a resumed fetch (ResumeAfter) did not
	// check, having received none or only the end of them: check the
	// copy written before against Digests.
	Unchecked []string
	// Lossy names the tensors that came through a lossy recipe (the
	// request did not require lossless and the hub's policy chose one):
	// within that recipe's error of the version, so not checked against
	// its digest; every other tensor is checked bit for bit.
	Lossy []string
}

// Fetch fetches what req selects from the hub behind c in one RPC and
// calls got with each tensor as soon as it is whole, in name order (a
// delta already applied to the client's base copy). Each tensor is
// checked against the digest the hub sends with its last chunk; a
// mismatch, or a tensor missing or extra, is an error after the last one.
func Fetch(ctx context.Context, c hubpb.HubClient, req Request, got func(*codec.Tensor) error) (Result, error) {
	return newFetchState(req, false, got).run(ctx, c)
}

// FetchChunks is Fetch for models larger than the client's memory: got
// gets each tensor's chunks as they are decoded, in order (a chunk has
// its Offset set and holds its elements only; a small tensor comes
// whole), to write out and drop; the client holds about its credit's
// worth of chunks, and with a Base one tensor's base copy at a time. Each
// tensor's digest is checked as its last chunk passes.
func FetchChunks(ctx context.Context, c hubpb.HubClient, req Request, got func(*codec.Tensor) error) (Result, error) {
	return newFetchState(req, true, got).run(ctx, c)
}

// fetchState is one fetch: what it received so far, checked as each
// tensor or chunk is taken, and reconciled with the hub's digests at the
// end.
type fetchState struct {
	req    Request
	chunks bool // FetchChunks: got takes chunks
	got    func(*codec.Tensor) error
	cr     *chunkReader
	res    Result

	sums      map[string][32]byte // digests of the tensors received whole
	unchecked map[string]bool     // tensors whose start came before a resume
	deltas    map[string]bool     // tensors that came as deltas
	baseBad   map[string]bool     // deltas the client could not apply
	part      *partial            // the tensor whose chunks are arriving
}

func newFetchState(req Request, chunks bool, got func(*codec.Tensor) error) *fetchState {
	return &fetchState{req: req, chunks: chunks, got: got, sums: map[string][32]byte{},
		unchecked: map[string]bool{}, deltas: map[string]bool{}, baseBad: map[string]bool{}}
}

// run opens the fetch, takes every chunk, checks the whole and reads the
// hub's status.
func (s *fetchState) run(ctx context.Context, c hubpb.HubClient) (Result, error) {
	if s.req.ResumeAfter > 0 && (!s.chunks || s.req.Version == 0) {
		return s.res, errors.New("hub: ResumeAfter needs FetchChunks and the Version of the fetch it resumes")
	}
	cr, cancel := newChunkReader(ctx, c, s.req)
	defer cancel()
	s.cr = cr
	err := cr.start()
	if err == nil {
		if s.chunks {
			err = s.readChunks()
		} else {
			err = s.readStream()
		}
	}
	s.res.Version, s.res.Resumed = cr.version, cr.resumed
	if err != nil {
		return s.res, err
	}
	baseErr, err := s.reconcile()
	if err != nil {
		return s.res, err
	}
	if err := s.finish(); err != nil {
		return s.res, err
	}
	if baseErr != nil {
		return s.res, baseErr
	}
	return s.res, nil
}

// readChunks decodes chunk by chunk: each holds whole frames, decoded on
// their own.
func (s *fetchState) readChunks() error {
	dec, err := codec.NewDecoder(codec.WithLimits(s.req.Limits))
	if err != nil {
		return err
	}
	cr := s.cr
	for !cr.last {
		if err := cr.next(); err != nil {
			return err
		}
		for b := cr.cur; len(b) > 0; {
			f, n, err := dec.DecodeFrame(b)
			if err != nil {
				return fmt.Errorf("hub: fetch: chunk %d: %w", cr.seq, err)
			}
			if f.Header.Type != codec.FrameTensor && f.Header.Type != codec.FrameTensors {
				return fmt.Errorf("%w: hub: chunk %d holds a frame of type %d", codec.ErrCorrupt, cr.seq, f.Header.Type)
			}
			b = b[n:]
			for _, t := range f.Tensors {
				if err := s.take(t); err != nil {
					return err
				}
			}
		}
		cr.cur = nil
		if s.req.Progress != nil {
			s.req.Progress(cr.seq)
		}
	}
	if s.part != nil {
		return fmt.Errorf("%w: hub: tensor %q incomplete after the last chunk", codec.ErrCorrupt, s.part.name)
	}
	return nil
}

// readStream reads the chunks as one stream of frames, each tensor whole.
func (s *fetchState) readStream() error {
	r, err := codec.NewReader(s.cr, codec.WithLimits(s.req.Limits))
	if err != nil {
		return err
	}
	for {
		t, err := r.ReadTensor()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if s.cr.err != nil {
				return s.cr.err
			}
			return fmt.Errorf("hub: fetch: %w", err)
		}
		if err := s.take(t); err != nil {
			return err
		}
	}
}

// take checks where t (a whole tensor or a chunk) fits and hands it on.
func (s *fetchState) take(t *codec.Tensor) error {
	if _, dup := s.sums[t.Name]; dup || s.unchecked[t.Name] || s.baseBad[t.Name] && s.part == nil {
		return fmt.Errorf("%w: hub: tensor %q arrived twice", codec.ErrCorrupt, t.Name)
	}
	if s.part != nil && (t.Name != s.part.name || t.IsWhole()) {
		return fmt.Errorf("%w: hub: tensor %q before the rest of %q", codec.ErrCorrupt, t.Name, s.part.name)
	}
	if t.IsWhole() {
		return s.takeWhole(t)
	}
	return s.takeChunk(t)
}

// takeWhole takes a whole tensor, applying its delta.
func (s *fetchState) takeWhole(t *codec.Tensor) error {
	if t.Base != 0 {
		s.deltas[t.Name] = true
		s.res.Deltas++
		var b *codec.Tensor
		if s.req.BaseTensor != nil && t.Base == s.req.Base {
			b = s.req.BaseTensor(t.Name)
		}
		if ok, err := undoDelta(t, b, 0, s.req.Base); err != nil || !ok {
			s.baseBad[t.Name] = true
			return err
		}
	} else {
		s.res.Full++
	}
	s.sums[t.Name] = sha256.Sum256(t.Data)
	return s.got(t)
}

// takeChunk takes a chunk (FetchChunks): in order, completing its
// tensor. The first chunk of a resumed fetch may continue a tensor whose
// start came before: that tensor is not checked here.
func (s *fetchState) takeChunk(t *codec.Tensor) error {
	p := s.part
	switch {
	case p != nil:
		if t.Offset != p.next || t.DType != p.dtype || !slices.Equal(t.Shape, p.shape) {
			return fmt.Errorf("%w: hub: chunk of %q at element %d, want %d", codec.ErrCorrupt, t.Name, t.Offset, p.next)
		}
	case t.Offset == 0:
		p = &partial{name: t.Name, dtype: t.DType, shape: t.Shape, h: sha256.New()}
	case s.req.ResumeAfter > 0 && len(s.sums) == 0 && len(s.unchecked) == 0 && len(s.baseBad) == 0:
		p = &partial{name: t.Name, dtype: t.DType, shape: t.Shape, next: t.Offset}
	default:
		return fmt.Errorf("%w: hub: chunk of %q starts at element %d", codec.ErrCorrupt, t.Name, t.Offset)
	}
	s.part = p
	ok, err := s.undoChunk(t, p)
	if err != nil {
		return err
	}
	if ok && p.h != nil {
		p.h.Write(t.Data)
	}
	p.next += int64(len(t.Data)) / int64(t.DType.Size())
	if p.next*int64(t.DType.Size()) == t.NumBytes() {
		s.finishTensor(p)
	}
	if !ok {
		return nil // the tensor is fetched again whole
	}
	return s.got(t)
}

// undoChunk applies a delta chunk to the client's copy of its tensor (got
// at its first chunk), reporting false where it cannot.
func (s *fetchState) undoChunk(t *codec.Tensor, p *partial) (bool, error) {
	if t.Base == 0 {
		if p.delta {
			return false, fmt.Errorf("%w: hub: chunk of %q at element %d is not a delta, those before were", codec.ErrCorrupt, t.Name, t.Offset)
		}
		return !s.baseBad[t.Name], nil
	}
	if !p.delta {
		if p.next != 0 && p.h != nil {
			return false, fmt.Errorf("%w: hub: chunk of %q at element %d is a delta, those before were not", codec.ErrCorrupt, t.Name, t.Offset)
		}
		p.delta = true
		s.deltas[t.Name] = true
		if s.req.BaseTensor != nil && t.Base == s.req.Base {
			p.base = s.req.BaseTensor(t.Name)
		}
	}
	if s.baseBad[t.Name] {
		return false, nil
	}
	ok, err := undoDelta(t, p.base, t.Offset, s.req.Base)
	if !ok {
		s.baseBad[t.Name] = true
	}
	return ok, err
}

// finishTensor records the digest of a tensor whose last chunk passed.
func (s *fetchState) finishTensor(p *partial) {
	switch {
	case s.baseBad[p.name]:
	case p.h == nil:
		s.unchecked[p.name] = true
	default:
		s.sums[p.name] = [32]byte(p.h.Sum(nil))
	}
	if p.delta {
		s.res.Deltas++
	} else {
		s.res.Full++
	}
	s.part = nil
}

// reconcile checks what arrived against the hub's digests: an error for
// a tensor that does not match, missing or extra; a *BaseError for the
// deltas that did not give the version.
func (s *fetchState) reconcile() (*BaseError, error) {
	cr, req := s.cr, s.req
	if !cr.last {
		return nil, fmt.Errorf("hub: fetch: %w before the last chunk", io.ErrUnexpectedEOF)
	}
	if req.ResumeAfter == 0 && len(cr.digests) != len(s.sums)+len(s.baseBad) {
		return nil, fmt.Errorf("%w: hub: %d tensors arrived, the hub sent %d", codec.ErrCorrupt, len(s.sums)+len(s.baseBad), len(cr.digests))
	}
	s.res.Digests = make(map[string][32]byte, len(cr.digests))
	var bad []string
	for _, d := range cr.digests {
		if len(d.Sha256) != sha256.Size {
			return nil, fmt.Errorf("%w: hub: digest of %q is %d bytes", codec.ErrCorrupt, d.Name, len(d.Sha256))
		}
		s.res.Digests[d.Name] = [32]byte(d.Sha256)
		sum, ok := s.sums[d.Name]
		switch {
		case s.baseBad[d.Name]:
			bad = append(bad, d.Name)
		case !ok && req.ResumeAfter > 0:
			s.res.Unchecked = append(s.res.Unchecked, d.Name) // it came before the resume, or began there
			delete(s.unchecked, d.Name)
		case ok && d.Lossy && !req.RequireLossless:
			s.res.Lossy = append(s.res.Lossy, d.Name)
		case ok && bytes.Equal(sum[:], d.Sha256):
		case ok && s.deltas[d.Name]:
			bad = append(bad, d.Name)
		default:
			return nil, fmt.Errorf("%w: hub: tensor %q does not match its digest", codec.ErrChecksum, d.Name)
		}
	}
	if len(s.unchecked) > 0 || len(s.sums)+len(s.baseBad) > len(cr.digests) {
		return nil, fmt.Errorf("%w: hub: tensors arrived that the hub sent no digest for", codec.ErrCorrupt)
	}
	if len(bad) == 0 {
		return nil, nil
	}
	sort.Strings(bad)
	return &BaseError{Base: req.Base, Names: bad}, nil
}

// finish reads the hub's status and trailer, which follow its last chunk.
func (s *fetchState) finish() error {
	st := s.cr.st
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: hub: a chunk after the last", codec.ErrCorrupt)
		}
		return err
	}
	if tr := st.Trailer()[BaseTrailer]; len(tr) > 0 {
		s.res.BaseNote = tr[0]
	}
	return nil
}

// partial is the running digest of a tensor arriving in chunks.
type partial struct {
	name  string
	dtype codec.DType
	shape []int64
	h     hash.Hash     // nil: its start came before a resume
	next  int64         // the element the next chunk starts at
	delta bool          // its chunks are deltas
	base  *codec.Tensor // the client's copy of it in the base (delta)
}

// dropTag removes t's extra tag i (nil when none is left).
func dropTag(t *codec.Tensor, i int) {
	t.Tags.Extra = slices.Delete(t.Tags.Extra, i, i+1)
	if len(t.Tags.Extra) == 0 {
		t.Tags.Extra = nil
	}
}

// undoDelta turns t, a delta against version base (the whole tensor, or
// its chunk at element off), into the tensor itself, given b, the
// client's copy of the whole tensor there. It reports false, leaving t
// as it is, where b does not fit (nil: the client has none), and an
// error for a delta against another version.
func undoDelta(t, b *codec.Tensor, off int64, base uint64) (bool, error) {
	if t.Base != base {
		return false, fmt.Errorf("%w: hub: tensor %q is a delta against version %d, the client holds %d", codec.ErrCorrupt, t.Name, t.Base, base)
	}
	esz := int64(t.DType.Size())
	if b == nil || off < 0 || b.DType != t.DType || int64(len(b.Data)) != t.NumBytes() || (off+int64(len(t.Data))/esz)*esz > int64(len(b.Data)) {
		return false, nil
	}
	bd := b.Data[off*esz : off*esz+int64(len(t.Data))]
	if i := slices.Index(t.Tags.Extra, DeltaTag); i >= 0 {
		add(t.Data, bd, t.DType)
		dropTag(t, i)
	} else {
		i, k, err := orderRun(t.Tags.Extra)
		if err != nil {
			return false, err
		}
		if i >= 0 {
			if w, _ := expField(t.DType); w == 0 || off%int64(k) != 0 {
				return false, fmt.Errorf("%w: hub: tensor %q: a delta of %v elements in exponent order, in runs of %d, at element %d", codec.ErrCorrupt, t.Name, t.DType, k, off)
			}
			var s scratch
			d := s.get(len(t.Data))
			inRuns(d, t.Data, bd, t.DType, k, true)
			copy(t.Data, d)
			s.release()
			dropTag(t, i)
		}
		undiff(t.Data, bd, int(esz))
	}
	t.Base = 0
	return true, nil
}
