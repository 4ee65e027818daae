package transport

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// Control kinds of the transport (kinds below 1024 are tensorpress's).
const (
	// ControlFeedback carries a Feedback report (receiver to sender).
	ControlFeedback uint64 = 1
	// ControlEndAck acknowledges the peer's end frame; nothing follows it
	// but the acknowledging side's own data and end frame.
	ControlEndAck uint64 = 2
)

// Feedback is what a receiver reports to its sender: totals since the
// stream began, so that a lost or merged report loses nothing.
type Feedback struct {
	Frames     uint64        // data frames decoded
	WireBytes  uint64        // their bytes on the wire
	RawBytes   uint64        // their decoded bytes
	Consumed   uint64        // decoded bytes the application has read
	DecodeTime time.Duration // time spent decoding them
}

// FeedbackObserver is implemented by policies that use the peer's
// feedback (decode speed, how far the application has read).
type FeedbackObserver interface {
	ObserveFeedback(Feedback)
}

// PeerObserver is implemented by policies that want the peer's hello
// (the stages it decodes) before the first frame is chosen: a Conn calls
// ObservePeer once, when the hello arrives; Write waits for it.
type PeerObserver interface {
	ObservePeer(*codec.Hello)
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
// ones are ignored (later versions may add some).
func ParseFeedback(p []byte) (Feedback, error) {
	var v [5]uint64
	for i := range v {
		x, n := binary.Uvarint(p)
		if n <= 0 {
			return Feedback{}, fmt.Errorf("%w: transport: feedback field %d of 5 is truncated or overlong", codec.ErrCorrupt, i+1)
		}
		v[i], p = x, p[n:]
	}
	if v[4] > 1<<63-1 {
		return Feedback{}, fmt.Errorf("%w: transport: feedback decode time %d ns out of range", codec.ErrCorrupt, v[4])
	}
	return Feedback{Frames: v[0], WireBytes: v[1], RawBytes: v[2], Consumed: v[3], DecodeTime: time.Duration(v[4])}, nil
}
