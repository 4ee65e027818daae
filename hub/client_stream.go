package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// Defaults of the retry policy (Request.RetryWait, RetryMaxWait).
const (
	DefaultRetryWait    = 100 * time.Millisecond
	DefaultRetryMaxWait = 5 * time.Second
)

// chunkReader reads the frames of a fetch's chunks as one stream, granting
// credit as chunks are consumed, and opening a new stream after a break,
// with a pause that grows, up to the retries, the stall timeout or the
// context.
type chunkReader struct {
	ctx      context.Context // the fetch's: ends with the caller's, or at a stall
	c        hubpb.HubClient
	req      *hubpb.FetchRequest
	st       hubpb.Hub_FetchClient
	stCancel context.CancelFunc // ends st
	cur      []byte
	consumed int // chunks read to their end, not yet granted back
	every    int // chunks granted at once
	last     bool
	granted  bool // the hub ended its side: no more credit to grant
	version  uint64
	seq      uint64
	digests  []*hubpb.TensorDigest
	err      error

	retries       int // Request.Retries
	wait, maxWait time.Duration
	onRetry       func(RetryInfo)
	fails         int // failures since the last chunk
	resumed       int // streams opened again
	stall         time.Duration
	watchdog      *time.Timer // ends ctx after stall without a chunk
	stalledCause  error       // what ends ctx at a stall
	cancelFetch   context.CancelCauseFunc
}

// newChunkReader returns the reader of a fetch of req and the function
// that releases it.
func newChunkReader(ctx context.Context, c hubpb.HubClient, req Request) (*chunkReader, func()) {
	credit := req.Credit
	if credit <= 0 {
		credit = DefaultCredit
	}
	credit = min(credit, maxCredit)
	pr := &hubpb.FetchRequest{Version: req.Version, RequireLossless: req.RequireLossless, Credit: uint32(credit), Base: req.Base, DeltaCoding: DeltaCoding}
	if req.FastDeltas {
		pr.DeltaCoding = DeltaCodingZstd
	}
	for _, sp := range req.Specs {
		pr.Specs = append(pr.Specs, &hubpb.TensorSpec{Names: sp.Names, Tags: sp.Tags})
	}
	cr := &chunkReader{c: c, req: pr, every: max(1, credit/2), retries: req.Retries,
		wait: req.RetryWait, maxWait: req.RetryMaxWait, onRetry: req.OnRetry, stall: req.Stall}
	if cr.wait <= 0 {
		cr.wait = DefaultRetryWait
	}
	if cr.maxWait <= 0 {
		cr.maxWait = max(DefaultRetryMaxWait, cr.wait)
	}
	if req.ResumeAfter > 0 {
		cr.seq, cr.version = req.ResumeAfter, req.Version
	}
	cr.stalledCause = fmt.Errorf("%w: no chunk for %v", ErrStalled, req.Stall)
	cr.ctx, cr.cancelFetch = context.WithCancelCause(ctx)
	if cr.stall > 0 {
		cr.watchdog = time.AfterFunc(cr.stall, func() { cr.cancelFetch(cr.stalledCause) })
	}
	return cr, func() {
		if cr.watchdog != nil {
			cr.watchdog.Stop()
		}
		cr.cancelFetch(context.Canceled)
		if cr.stCancel != nil {
			cr.stCancel()
		}
	}
}

// start opens the first stream, trying again as after a break.
func (c *chunkReader) start() error {
	if err := c.open(); err != nil {
		if c.err = c.recover(err); c.err != nil {
			return c.err
		}
	}
	return nil
}

// open opens a stream for the request, resuming after chunk c.seq of
// version c.version once a chunk has come. The stream before, if any, is
// ended.
func (c *chunkReader) open() error {
	if c.stCancel != nil {
		c.stCancel()
	}
	ctx, cancel := context.WithCancel(c.ctx)
	st, err := c.c.Fetch(ctx, grpc.CallContentSubtype(WireCodecName))
	if err != nil {
		cancel()
		return err
	}
	req := c.req
	if c.seq > 0 {
		req = proto.Clone(c.req).(*hubpb.FetchRequest)
		req.Version, req.ResumeAfter = c.version, c.seq
	}
	if err := st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: req}}); err != nil && err != io.EOF {
		cancel()
		return err
	}
	c.st, c.stCancel, c.consumed, c.granted = st, cancel, 0, false
	return nil
}

// retryable reports whether a broken stream may be opened again: the
// connection or the hub went away, not a refusal.
func retryable(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Internal, codes.Unknown, codes.DeadlineExceeded:
		return true
	}
	return false
}

// recover opens a new stream after err broke the last one (or stopped
// one from opening), pausing before each try, until one opens, the
// retries are spent, the fetch stalls or its context ends; then it
// returns the error that ends the fetch.
func (c *chunkReader) recover(err error) error {
	for {
		if context.Cause(c.ctx) == c.stalledCause {
			if c.fails == 0 {
				return fmt.Errorf("%w (after chunk %d)", c.stalledCause, c.seq) // err is the stall's own
			}
			return fmt.Errorf("%w (after chunk %d; the last error: %v)", c.stalledCause, c.seq, err)
		}
		if c.ctx.Err() != nil || !retryable(err) || c.retries == 0 || c.retries > 0 && c.fails >= c.retries {
			if c.fails > 0 {
				return fmt.Errorf("hub: fetch: %d tries in a row failed: %w", c.fails+1, err)
			}
			return err
		}
		c.fails++
		wait := c.backoff()
		if c.onRetry != nil {
			c.onRetry(RetryInfo{Attempt: c.fails, Seq: c.seq, Wait: wait, Err: err})
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			continue
		}
		if err = c.open(); err == nil {
			c.resumed++
			return nil
		}
	}
}

// backoff is the pause before try c.fails: RetryWait doubled at each
// failure in a row, at most RetryMaxWait, drawn between half and all.
func (c *chunkReader) backoff() time.Duration {
	w := c.maxWait
	if shift := c.fails - 1; shift < 30 && c.wait<<shift < c.maxWait {
		w = c.wait << shift
	}
	return w/2 + rand.N(w/2+1)
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

// next receives the next chunk into c.cur (a new stream after a break)
// and grants the hub credit for it.
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
			if err = c.recover(err); err != nil {
				c.err = err
				return err
			}
			continue
		}
		if m.Seq != c.seq+1 || c.version != 0 && m.Version != c.version {
			c.err = fmt.Errorf("%w: hub: chunk %d of version %d after chunk %d of version %d", codec.ErrCorrupt, m.Seq, m.Version, c.seq, c.version)
			return c.err
		}
		c.seq, c.version, c.cur = m.Seq, m.Version, m.Frames
		c.fails = 0
		if c.watchdog != nil {
			c.watchdog.Reset(c.stall)
		}
		if m.Last {
			c.last, c.digests = true, m.Digests
			return nil
		}
		c.err = c.grant()
		return c.err
	}
}

// grant tells the hub that a chunk is ours now: it may send another.
func (c *chunkReader) grant() error {
	if c.consumed++; c.consumed < c.every || c.granted {
		return nil
	}
	err := c.st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: uint32(c.consumed)}})
	c.consumed = 0
	if err == io.EOF {
		// The hub has sent everything or the stream broke: Recv tells
		// which.
		c.granted = true
		return nil
	}
	return err
}
