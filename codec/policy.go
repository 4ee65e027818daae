package codec

import "time"

// FrameInfo describes a frame about to be encoded, for a Policy to choose
// its recipe.
type FrameInfo struct {
	Seq    uint64    // data frame number in the stream, from 0
	Type   FrameType // FrameTensor or FrameBytes
	Name   string    // tensor name ("" for byte streams)
	DType  DType     // Byte for byte streams
	Shape  []int64   // tensor shape (read-only)
	Tags   Tags      // tensor tags (read-only)
	Offset int64     // first element of the chunk
	Len    int       // decoded bytes in the frame
	First  bool      // the frame starts its tensor (lossy recipes change only here)
	Data   []byte    // the chunk's bytes: read-only, valid only during Choose
}

// FrameStats reports what happened to a frame once it was written.
type FrameStats struct {
	Info       FrameInfo // Data is nil
	Recipe     *Recipe   // the recipe used
	RawBytes   int       // decoded bytes
	FrameBytes int       // bytes on the wire, header included
	Segments   []SegmentStat
	Encode     time.Duration // time spent encoding
	Blocked    time.Duration // time spent in the underlying Write
	Err        error         // a failed frame reports its error here
	// Foreign: the frame was encoded elsewhere (Writer.WriteEncoded);
	// Recipe is nil, and Choose was not asked for it.
	Foreign bool
	// Inline: the frame was encoded on the caller's goroutine
	// (Writer.WriteFrame), not by the pipeline's encoders: one core.
	Inline bool
}

// Policy chooses the recipe for each frame and learns from the result.
// Choose is called in frame order from the goroutine that writes to the
// Writer; Observe is called in frame order from the Writer's output
// goroutine, so the two may run concurrently. Whatever Choose returns, the
// Writer refuses lossy recipes on tensors tagged lossless (ErrLossy), and
// keeps a non-elementwise recipe for all chunks of a tensor; a nil recipe
// stores the data raw. Neither method may panic or block for long: Observe
// runs on the Writer's output goroutine, between two writes.
type Policy interface {
	Choose(FrameInfo) *Recipe
	Observe(FrameStats)
}

// Cutter is implemented by a Policy that also chooses where the frames of
// a byte stream end, so that each frame holds one kind of data (weights,
// zeros, text) and suits one recipe, and so that a stream can start with
// small frames. The Writer calls Cut with the bytes it is about to put
// into one frame (at most the chunk size) and puts the first n of them
// into it: n is clamped to [1, len(data)]. Choose for that frame follows
// at once, its Data being data[:n]; the rest goes to the next Cut. Cut is
// called from the goroutine that writes, like Choose, and data is valid
// only during the call. Tensor frames are not cut.
type Cutter interface {
	Cut(data []byte) int
}

// FixedPolicy always chooses the same recipe.
type FixedPolicy struct{ Recipe *Recipe }

func (p FixedPolicy) Choose(FrameInfo) *Recipe { return p.Recipe }
func (p FixedPolicy) Observe(FrameStats)       {}
