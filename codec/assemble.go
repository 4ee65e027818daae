package codec

import (
	"fmt"
	"io"
	"slices"
)

// The order rules of a stream (docs/FORMAT.md, "Order of frames in a
// stream"). A Reader checks every frame header against them before it
// reads the payload, whichever of Next, ReadTensor and Read asked for the
// frame, so that all three see the same stream:
//
//   - a hello opens a stream; another hello before its end frame is
//     corrupt;
//   - a tensor sent in chunks is a run of tensor frames (type 1) whose
//     chunks start at element 0, each where the previous one ended, until
//     the tensor is complete; only control frames may come between them.
//     Any other frame (another tensor, a chunk that leaves a gap or
//     overlaps, a tensors, bytes, hello or end frame) is corrupt, and the
//     end of the input inside the tensor is io.ErrUnexpectedEOF.
//
// Every frame still decodes on its own (Decoder.DecodeFrame checks one
// frame): these rules are about the order of frames, which only a stream
// has.

// chunkRun follows the tensor whose chunks a stream is in the middle of.
type chunkRun struct {
	open  bool   // a chunked tensor has begun and is not complete
	t     Tensor // its metadata (Data nil), from its first chunk
	next  int64  // first element of the next chunk
	total int64  // the tensor's element count
	start int64  // stream offset of its first chunk
}

// checkOrder checks the header of the frame at stream offset off against
// the order rules and advances the Reader's chunk run.
func (r *Reader) checkOrder(h *FrameHeader, off int64) error {
	c := &r.run
	if h.Type == FrameHello && r.expectEnd {
		return corruptf("a second hello before the end frame of the stream that opened with the hello at offset %d", r.helloAt)
	}
	switch h.Type {
	case FrameControl:
		return nil
	case FrameTensor:
		e := &h.Entries[0]
		t := &e.Tensor
		total := t.NumElements()
		whole := e.Count == total // a chunk field never covers the whole tensor
		if !c.open {
			if whole {
				return nil
			}
			if t.Offset != 0 {
				return corruptf("tensor %q: the stream's first chunk of it holds elements [%d, +%d), not the start", t.Name, t.Offset, e.Count)
			}
			*c = chunkRun{open: true, t: *t, next: e.Count, total: total, start: off}
			return nil
		}
		switch {
		case whole:
			return c.interrupted(fmt.Sprintf("the whole tensor %q", t.Name))
		case !sameTensor(&c.t, t):
			return c.interrupted(fmt.Sprintf("a chunk of tensor %q %v (name, dtype, shape, tags or version differ)", t.Name, t.Shape))
		case t.Offset != c.next:
			what := "leaves a gap"
			if t.Offset < c.next {
				what = "overlaps"
			}
			return corruptf("tensor %q: chunk [%d, +%d) after %d of %d elements %s", t.Name, t.Offset, e.Count, c.next, c.total, what)
		}
		if c.next += e.Count; c.next == c.total {
			c.open = false
		}
		return nil
	}
	if c.open {
		return c.interrupted(fmt.Sprintf("the %v frame", h.Type))
	}
	return nil
}

func (c *chunkRun) interrupted(by string) error {
	return corruptf("tensor %q (chunks from offset %d) interrupted after %d of %d elements by %s", c.t.Name, c.start, c.next, c.total, by)
}

// atEOF returns the error for input that ends at a frame boundary inside
// a chunked tensor, or nil.
func (c *chunkRun) atEOF() error {
	if !c.open {
		return nil
	}
	return fmt.Errorf("%w: tensor %q (chunks from offset %d) ends after %d of %d elements", io.ErrUnexpectedEOF, c.t.Name, c.start, c.next, c.total)
}

// sameTensor reports whether chunk b belongs to the tensor of chunk a: the
// same name, dtype, shape, tags and version fields.
func sameTensor(a, b *Tensor) bool {
	return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) &&
		a.Version == b.Version && a.Base == b.Base &&
		a.Tags.Lossless == b.Tags.Lossless && slices.Equal(a.Tags.Extra, b.Tags.Extra)
}
