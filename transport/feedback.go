package transport

import (
	"net"

	"github.com/tensorpress/tensorpress/codec"
)

// Control kinds of the transport; the wire format (docs/FORMAT.md) and
// their definitions are in package codec.
const (
	// ControlFeedback carries a Feedback report (receiver to sender).
	ControlFeedback = codec.ControlFeedback
	// ControlEndAck acknowledges the peer's end frame.
	ControlEndAck = codec.ControlEndAck
)

// Feedback is what a receiver reports to its sender.
//
// Deprecated: use codec.Feedback; this alias stays for existing code.
type Feedback = codec.Feedback

// FeedbackObserver is implemented by policies that use the peer's
// feedback.
//
// Deprecated: use codec.FeedbackObserver; this alias stays for existing
// code.
type FeedbackObserver = codec.FeedbackObserver

// PeerObserver is implemented by policies that want the peer's hello
// before the first frame is chosen: a Conn calls ObservePeer once, when
// the hello arrives; Write waits for it.
//
// Deprecated: use codec.PeerObserver; this alias stays for existing code.
type PeerObserver = codec.PeerObserver

// ConnUser is implemented by policies that measure the connection their
// frames go out on (autotune.Tuner: its addresses and the kernel's TCP
// statistics): Wrap calls UseConn once, with the wrapped connection,
// before anything is written.
type ConnUser interface {
	UseConn(net.Conn)
}

// ParseFeedback reads a feedback payload.
//
// Deprecated: use codec.ParseFeedback.
func ParseFeedback(p []byte) (Feedback, error) { return codec.ParseFeedback(p) }
