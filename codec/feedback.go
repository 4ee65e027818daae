package codec

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Control kinds defined by format version 1 (docs/FORMAT.md, "Control
// frame"). Kinds below 1024 are tensorpress's; applications use 1024 and
// up.
const (
	// ControlFeedback carries a Feedback report, receiver to sender.
	ControlFeedback uint64 = 1
	// ControlEndAck acknowledges the peer's end frame; nothing follows it
	// but the acknowledging side's own data and end frame. No payload.
	ControlEndAck uint64 = 2
)

// Feedback is what a receiver reports to its sender in a ControlFeedback
// frame: totals since the stream began, so that a lost or merged report
// loses nothing.
type Feedback struct {
	Frames     uint64        // data frames decoded
	WireBytes  uint64        // their bytes on the wire
	RawBytes   uint64        // their decoded bytes
	Consumed   uint64        // decoded bytes the application has read
	DecodeTime time.Duration // time spent decoding them
}

// DecodeSpeed is the receiver's decode speed in decoded bytes per second,
// 0 when unknown.
func (f Feedback) DecodeSpeed() float64 {
	if f.DecodeTime <= 0 {
		return 0
	}
	return float64(f.RawBytes) / f.DecodeTime.Seconds()
}

// AppendBinary appends the report's payload: five uvarints (frames, wire
// bytes, decoded bytes, consumed bytes, decode nanoseconds).
func (f Feedback) AppendBinary(b []byte) []byte {
	b = binary.AppendUvarint(b, f.Frames)
	b = binary.AppendUvarint(b, f.WireBytes)
	b = binary.AppendUvarint(b, f.RawBytes)
	b = binary.AppendUvarint(b, f.Consumed)
	return binary.AppendUvarint(b, uint64(max(f.DecodeTime, 0)))
}

// ParseFeedback reads a feedback payload. Fields after the five known
// ones are ignored (later versions may add some). A truncated or overlong
// field, or a decode time beyond time.Duration, is ErrCorrupt.
func ParseFeedback(p []byte) (Feedback, error) {
	var v [5]uint64
	for i := range v {
		x, n := binary.Uvarint(p)
		if n <= 0 {
			return Feedback{}, fmt.Errorf("%w: feedback field %d of 5 is truncated or overlong", ErrCorrupt, i+1)
		}
		v[i], p = x, p[n:]
	}
	if v[4] > 1<<63-1 {
		return Feedback{}, fmt.Errorf("%w: feedback decode time %d ns out of range", ErrCorrupt, v[4])
	}
	return Feedback{Frames: v[0], WireBytes: v[1], RawBytes: v[2], Consumed: v[3], DecodeTime: time.Duration(v[4])}, nil
}

// The interfaces below are optional abilities of a Policy, found by type
// assertion by whatever carries its frames over a connection (package
// transport): a policy implements those it has use for.

// FeedbackObserver is implemented by policies that use the peer's
// feedback (decode speed, how far the application has read).
type FeedbackObserver interface {
	ObserveFeedback(Feedback)
}

// PeerObserver is implemented by policies that want the peer's hello
// (the stages it decodes) before the first frame is chosen: ObservePeer
// is called once, when the hello arrives.
type PeerObserver interface {
	ObservePeer(*Hello)
}
