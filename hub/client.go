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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	// returns the client's copy of one (nil: it has none, an error).
	Base       uint64
	BaseTensor func(name string) *codec.Tensor
	// Retries is how many times a fetch whose stream breaks (the
	// connection lost, the hub restarted) opens a new one and resumes
	// after the last chunk it received, on the same version (default 0:
	// none). Chunks are whole frames and the hub's plan is the same for
	// the same request, so the tensors assemble across streams as if
	// nothing happened; only the chunks in flight come twice.
	Retries int
	// RetryWait is the pause before each new stream (default 100 ms,
	// doubling).
	RetryWait time.Duration
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
	return fetch(ctx, c, req, false, got)
}

// FetchChunks is Fetch for models larger than the client's memory: got
// gets each tensor's chunks as they are decoded, in order (a chunk has
// its Offset set and holds its elements only; a small tensor comes
// whole), to write out and drop; the client holds about its credit's
// worth of chunks. Each tensor's digest is checked as its last chunk
// passes. It does not take deltas (req.Base must be 0).
func FetchChunks(ctx context.Context, c hubpb.HubClient, req Request, got func(*codec.Tensor) error) (Result, error) {
	if req.Base != 0 {
		return Result{}, errors.New("hub: FetchChunks does not apply deltas: fetch with Base 0, or with Fetch")
	}
	return fetch(ctx, c, req, true, got)
}

func fetch(ctx context.Context, c hubpb.HubClient, req Request, chunks bool, got func(*codec.Tensor) error) (res Result, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	credit := req.Credit
	if credit <= 0 {
		credit = DefaultCredit
	}
	credit = min(credit, maxCredit)
	pr := &hubpb.FetchRequest{Version: req.Version, RequireLossless: req.RequireLossless, Credit: uint32(credit), Base: req.Base}
	for _, sp := range req.Specs {
		pr.Specs = append(pr.Specs, &hubpb.TensorSpec{Names: sp.Names, Tags: sp.Tags})
	}
	cr := &chunkReader{ctx: ctx, c: c, req: pr, grantEvery: max(1, credit/2), retries: req.Retries, wait: req.RetryWait}
	if cr.wait <= 0 {
		cr.wait = 100 * time.Millisecond
	}
	if req.ResumeAfter > 0 {
		if !chunks || req.Version == 0 {
			return res, errors.New("hub: ResumeAfter needs FetchChunks and the Version of the fetch it resumes")
		}
		cr.seq, cr.version = req.ResumeAfter, req.Version
	}
	if err := cr.open(); err != nil {
		return res, err
	}
	defer func() { res.Resumed = cr.resumed }()
	sums := map[string][32]byte{}
	unchecked := map[string]bool{}
	var part *partial // the tensor whose chunks are arriving (chunks)
	take := func(t *codec.Tensor) error {
		if _, dup := sums[t.Name]; dup || unchecked[t.Name] {
			return fmt.Errorf("%w: hub: tensor %q arrived twice", codec.ErrCorrupt, t.Name)
		}
		if part != nil && (t.Name != part.name || t.IsWhole()) {
			return fmt.Errorf("%w: hub: tensor %q before the rest of %q", codec.ErrCorrupt, t.Name, part.name)
		}
		if t.IsWhole() {
			if t.Base != 0 {
				if err := undoDelta(t, req); err != nil {
					return err
				}
				res.Deltas++
			} else {
				res.Full++
			}
			sums[t.Name] = sha256.Sum256(t.Data)
			return got(t)
		}
		// A chunk (FetchChunks): in order, completing its tensor. The
		// first chunk of a resumed fetch may continue a tensor whose
		// start came before: that tensor is not checked here.
		esz := int64(t.DType.Size())
		switch {
		case t.Base != 0:
			return fmt.Errorf("%w: hub: chunk of %q is a delta", codec.ErrCorrupt, t.Name)
		case part != nil:
			if t.Offset != part.next || t.DType != part.dtype || !slices.Equal(t.Shape, part.shape) {
				return fmt.Errorf("%w: hub: chunk of %q at element %d, want %d", codec.ErrCorrupt, t.Name, t.Offset, part.next)
			}
		case t.Offset == 0:
			part = &partial{name: t.Name, dtype: t.DType, shape: t.Shape, h: sha256.New()}
		case req.ResumeAfter > 0 && len(sums) == 0 && len(unchecked) == 0:
			part = &partial{name: t.Name, dtype: t.DType, shape: t.Shape, next: t.Offset}
		default:
			return fmt.Errorf("%w: hub: chunk of %q starts at element %d", codec.ErrCorrupt, t.Name, t.Offset)
		}
		if part.h != nil {
			part.h.Write(t.Data)
		}
		part.next += int64(len(t.Data)) / esz
		if part.next*esz == t.NumBytes() {
			if part.h != nil {
				sums[t.Name] = [32]byte(part.h.Sum(nil))
			} else {
				unchecked[t.Name] = true
			}
			res.Full++
			part = nil
		}
		return got(t)
	}
	if chunks {
		// Chunk by chunk: each holds whole frames, decoded on their own.
		dec, err := codec.NewDecoder(codec.WithLimits(req.Limits))
		if err != nil {
			return res, err
		}
		for !cr.last {
			if err := cr.next(); err != nil {
				res.Version = cr.version
				return res, err
			}
			res.Version = cr.version
			for b := cr.cur; len(b) > 0; {
				f, n, err := dec.DecodeFrame(b)
				if err != nil {
					return res, fmt.Errorf("hub: fetch: chunk %d: %w", cr.seq, err)
				}
				if f.Header.Type != codec.FrameTensor && f.Header.Type != codec.FrameTensors {
					return res, fmt.Errorf("%w: hub: chunk %d holds a frame of type %d", codec.ErrCorrupt, cr.seq, f.Header.Type)
				}
				b = b[n:]
				for _, t := range f.Tensors {
					if err := take(t); err != nil {
						return res, err
					}
				}
			}
			cr.cur = nil
			if req.Progress != nil {
				req.Progress(cr.seq)
			}
		}
		if part != nil {
			return res, fmt.Errorf("%w: hub: tensor %q incomplete after the last chunk", codec.ErrCorrupt, part.name)
		}
	} else {
		r, err := codec.NewReader(cr, codec.WithLimits(req.Limits))
		if err != nil {
			return res, err
		}
		for {
			t, err := r.ReadTensor()
			if err == io.EOF {
				break
			}
			res.Version = cr.version
			if err != nil {
				if cr.err != nil {
					return res, cr.err
				}
				return res, fmt.Errorf("hub: fetch: %w", err)
			}
			if err := take(t); err != nil {
				return res, err
			}
		}
	}
	res.Version = cr.version
	if cr.err != nil && !errors.Is(cr.err, io.EOF) {
		return res, cr.err
	}
	if !cr.last {
		return res, fmt.Errorf("hub: fetch: %w before the last chunk", io.ErrUnexpectedEOF)
	}
	if req.ResumeAfter == 0 && len(cr.digests) != len(sums) {
		return res, fmt.Errorf("%w: hub: %d tensors arrived, the hub sent %d", codec.ErrCorrupt, len(sums), len(cr.digests))
	}
	res.Digests = make(map[string][32]byte, len(cr.digests))
	for _, d := range cr.digests {
		if len(d.Sha256) != sha256.Size {
			return res, fmt.Errorf("%w: hub: digest of %q is %d bytes", codec.ErrCorrupt, d.Name, len(d.Sha256))
		}
		res.Digests[d.Name] = [32]byte(d.Sha256)
		s, ok := sums[d.Name]
		if !ok && req.ResumeAfter > 0 {
			res.Unchecked = append(res.Unchecked, d.Name) // it came before the resume, or began there
			delete(unchecked, d.Name)
			continue
		}
		if ok && d.Lossy && !req.RequireLossless {
			res.Lossy = append(res.Lossy, d.Name)
			continue
		}
		if !ok || !bytes.Equal(s[:], d.Sha256) {
			return res, fmt.Errorf("%w: hub: tensor %q does not match its digest", codec.ErrChecksum, d.Name)
		}
	}
	if len(unchecked) > 0 || len(sums) > len(cr.digests) {
		return res, fmt.Errorf("%w: hub: tensors arrived that the hub sent no digest for", codec.ErrCorrupt)
	}
	st := cr.st
	st.CloseSend()
	// The hub's status and trailer follow its last chunk.
	if _, err := st.Recv(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: hub: a chunk after the last", codec.ErrCorrupt)
		}
		return res, err
	}
	if tr := st.Trailer()[BaseTrailer]; len(tr) > 0 {
		res.BaseNote = tr[0]
	}
	return res, nil
}

// partial is the running digest of a tensor arriving in chunks.
type partial struct {
	name  string
	dtype codec.DType
	shape []int64
	h     hash.Hash // nil: its start came before a resume
	next  int64     // the element the next chunk starts at
}

// undoDelta turns t, a delta against req.Base, into the tensor itself.
func undoDelta(t *codec.Tensor, req Request) error {
	if t.Base != req.Base {
		return fmt.Errorf("%w: hub: tensor %q is a delta against version %d, the client holds %d", codec.ErrCorrupt, t.Name, t.Base, req.Base)
	}
	var b *codec.Tensor
	if req.BaseTensor != nil {
		b = req.BaseTensor(t.Name)
	}
	if b == nil || len(b.Data) != len(t.Data) || b.DType != t.DType {
		return fmt.Errorf("hub: tensor %q came as a delta against version %d, and the client has no copy of it there", t.Name, t.Base)
	}
	if i := slices.Index(t.Tags.Extra, DeltaTag); i >= 0 {
		add(t.Data, b.Data, t.DType)
		t.Tags.Extra = slices.Delete(t.Tags.Extra, i, i+1)
		if len(t.Tags.Extra) == 0 {
			t.Tags.Extra = nil
		}
	} else {
		undiff(t.Data, b.Data, t.DType.Size())
	}
	t.Base = 0
	return nil
}

// chunkReader reads the frames of a fetch's chunks as one stream, granting
// credit as chunks are consumed, and opening a new stream after a break.
type chunkReader struct {
	ctx        context.Context
	c          hubpb.HubClient
	req        *hubpb.FetchRequest
	st         hubpb.Hub_FetchClient
	cur        []byte
	consumed   int // chunks read to their end, not yet granted back
	grantEvery int
	last       bool
	granted    bool // the hub ended its side: no more credit to grant
	version    uint64
	seq        uint64
	digests    []*hubpb.TensorDigest
	err        error
	retries    int
	resumed    int
	wait       time.Duration
}

// open opens a stream for the request, resuming after chunk c.seq of
// version c.version once a chunk has come.
func (c *chunkReader) open() error {
	st, err := c.c.Fetch(c.ctx, grpc.CallContentSubtype(WireCodecName))
	if err != nil {
		return err
	}
	req := c.req
	if c.seq > 0 {
		req = proto.Clone(c.req).(*hubpb.FetchRequest)
		req.Version, req.ResumeAfter = c.version, c.seq
	}
	if err := st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: req}}); err != nil && err != io.EOF {
		return err
	}
	c.st, c.consumed, c.granted = st, 0, false
	return nil
}

// retryable reports whether a broken stream may be opened again: the
// connection or the hub went away, not a refusal.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Internal, codes.Unknown, codes.DeadlineExceeded:
		return true
	}
	return false
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.last {
			return 0, io.EOF
		}
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// next receives the next chunk into c.cur (a new stream after a break,
// up to the retries) and grants the hub credit for it.
func (c *chunkReader) next() error {
	if c.err != nil {
		return c.err
	}
	for {
		m, err := c.st.Recv()
		if err != nil {
			if err == io.EOF {
				err = fmt.Errorf("hub: fetch: the stream ended before the last chunk: %w", io.ErrUnexpectedEOF)
			}
			if c.ctx.Err() == nil && c.resumed < c.retries && (retryable(err) || errors.Is(err, io.ErrUnexpectedEOF)) {
				c.resumed++
				t := time.NewTimer(c.wait << min(c.resumed-1, 6))
				select {
				case <-t.C:
				case <-c.ctx.Done():
					t.Stop()
				}
				if oerr := c.open(); oerr == nil {
					continue
				}
			}
			c.err = err
			return err
		}
		if m.Seq != c.seq+1 || c.version != 0 && m.Version != c.version {
			c.err = fmt.Errorf("%w: hub: chunk %d of version %d after chunk %d of version %d", codec.ErrCorrupt, m.Seq, m.Version, c.seq, c.version)
			return c.err
		}
		c.seq, c.version, c.cur = m.Seq, m.Version, m.Frames
		if m.Last {
			c.last, c.digests = true, m.Digests
			return nil
		}
		// This chunk is ours now: the hub may send another.
		if c.consumed++; c.consumed >= c.grantEvery && !c.granted {
			err := c.st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: uint32(c.consumed)}})
			switch {
			case err == io.EOF:
				// The hub has sent everything or the stream broke: Recv
				// tells which.
				c.granted = true
			case err != nil:
				c.err = err
				return err
			}
			c.consumed = 0
		}
		return nil
	}
}
