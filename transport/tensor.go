package transport

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/tensorpress/tensorpress/codec"
)

// Tensors on a Conn. A stream carries byte data (Write, Read), tensors
// (WriteTensor, ReadTensor) or both, in the order they were written; each
// kind is read by its own method, and a method that meets the other kind
// returns ErrTensorNext or ErrBytesNext without consuming it.

var (
	// ErrTensorNext is returned by Read when the next item of the stream is
	// a tensor: read it with ReadTensor.
	ErrTensorNext = errors.New("transport: the next item is a tensor (use ReadTensor)")
	// ErrBytesNext is returned by ReadTensor when the next item of the
	// stream is byte data: read it with Read.
	ErrBytesNext = errors.New("transport: the next item is byte data (use Read)")
)

// AckObserver learns what the peer received of the frames this end sent,
// for a layer above the Conn that must know what arrived (package session
// commits gradient updates on it). Its methods are called from the Conn's
// goroutines, and from Close, and must not block.
type AckObserver interface {
	// Acked: the peer reports having received the first frames data
	// frames this end sent (WriteEncoded returns the count its frame
	// completes); math.MaxUint64 when it acknowledged the end of the
	// stream, so every frame.
	Acked(frames uint64)
	// Ended: no report will come any more (the peer's stream ended or
	// failed, or the Conn is closing), and why. It is called once, after
	// the last Acked.
	Ended(why error)
}

// item is what the background reader hands to Read and ReadTensor.
type item struct {
	b []byte        // decoded byte data (a pooled buffer)
	t *codec.Tensor // or a whole tensor
}

// WriteTensor sends t, a whole tensor, as tensor frames coded as the
// policy chooses, and returns once they are written to the connection
// (the peer may not have read them yet). Profile rules and gradient
// updates are a session's (package session): the Conn sends what it is
// given.
func (c *Conn) WriteTensor(t *codec.Tensor) error {
	if t == nil {
		return fmt.Errorf("transport: WriteTensor of a nil tensor")
	}
	c.writers.Add(1)
	defer c.writers.Add(-1)
	if c.closing.Load() {
		return net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return err
	}
	if err := c.awaitPeer(); err != nil {
		return err
	}
	if err := c.w.WriteTensor(t); err != nil {
		return c.writeErr(err)
	}
	return c.writeErr(c.w.Flush())
}

// writable reports, under wmu, why nothing more can be written.
func (c *Conn) writable() error {
	if c.shut {
		if c.closing.Load() {
			return net.ErrClosed
		}
		return ErrWriteClosed
	}
	return nil
}

// AwaitPeer waits for the peer's hello (Peer returns it then), or for the
// write deadline, and reports why nothing can be written where that is
// so.
func (c *Conn) AwaitPeer() error {
	if c.closing.Load() {
		return net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return err
	}
	return c.awaitPeer()
}

// WriteEncoded sends frame, one frame encoded elsewhere (a
// gradient.Sender's), flushed, and returns the count of data frames the
// stream holds with it: the count the peer's acknowledgement of it
// reaches (AckObserver.Acked). A frame with a stage the peer did not
// announce is not sent: the error wraps codec.ErrUnsupported and names the
// stage. The policy sees the frame as foreign (its bytes count for the
// link estimate).
func (c *Conn) WriteEncoded(frame []byte) (frames uint64, err error) {
	c.writers.Add(1)
	defer c.writers.Add(-1)
	if c.closing.Load() {
		return 0, net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return 0, err
	}
	if err := c.awaitPeer(); err != nil {
		return 0, err
	}
	if err := c.policy.decodable(frame); err != nil {
		return 0, fmt.Errorf("transport: %w", err)
	}
	if err = c.w.WriteEncoded(frame); err == nil {
		err = c.w.Flush()
	}
	return c.w.Frames(), c.writeErr(err)
}

// Decodable reports, once the peer's hello arrived (AwaitPeer), whether
// the peer decodes every stage of frame, an encoded frame: an error
// wrapping codec.ErrUnsupported that names the stage where it does not.
func (c *Conn) Decodable(frame []byte) error {
	if c.peer.Load() == nil {
		return fmt.Errorf("transport: no hello from the peer yet")
	}
	if err := c.policy.decodable(frame); err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	return nil
}

// Policy returns the policy the Conn was made with (WithPolicy), or nil.
func (c *Conn) Policy() codec.Policy { return c.o.policy }

// WriteExpired returns a channel that is closed when the write deadline
// has passed; a later SetWriteDeadline may give another (ask again after
// each wait).
func (c *Conn) WriteExpired() <-chan struct{} { return c.wdl.wait() }

// ackFrames tells the AckObserver, from the pump, that the peer received
// frames data frames.
func (c *Conn) ackFrames(frames uint64) {
	if c.o.acks != nil {
		c.o.acks.Acked(frames)
	}
}

// ended tells the AckObserver, once, that no acknowledgement can come any
// more.
func (c *Conn) ended(why error) {
	c.endOnce.Do(func() {
		if c.o.acks != nil {
			c.o.acks.Ended(why)
		}
	})
}

// ReadTensor returns the next tensor the peer sent, whole (chunks
// joined). It returns io.EOF after the peer's end frame, and ErrBytesNext,
// without consuming it, when byte data comes first.
func (c *Conn) ReadTensor() (*codec.Tensor, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closing.Load() {
		return nil, net.ErrClosed
	}
	if len(c.rest) > 0 {
		return nil, ErrBytesNext
	}
	for c.tnext == nil {
		select {
		case it, ok := <-c.data:
			if !ok {
				return nil, c.readErr()
			}
			if it.t == nil {
				c.rest, c.cur = it.b, it.b
				return nil, ErrBytesNext
			}
			c.tnext = it.t
		case <-c.closed:
			return nil, net.ErrClosed
		case <-c.rdl.wait():
			return nil, os.ErrDeadlineExceeded
		}
	}
	t := c.tnext
	c.tnext = nil
	c.consumed.Add(uint64(len(t.Data)))
	c.wantFeedback()
	return t, nil
}
