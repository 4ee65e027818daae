package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// FuzzPeerStream feeds arbitrary bytes to a Conn as its peer's stream:
// Read ends with data or an error, never a panic or a hang, and Close
// releases everything.
func FuzzPeerStream(f *testing.F) {
	var buf bytes.Buffer
	w, _ := codec.NewWriter(&buf, codec.WithRecipe(zstd1), codec.WithChunkSize(64))
	w.Write(bytes.Repeat([]byte("tensorpress "), 40))
	w.WriteControl(ControlFeedback, Feedback{Frames: 1}.AppendBinary(nil))
	w.WriteControl(ControlEndAck, nil)
	w.Close()
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()/2])
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	// Tensors: a chunked one with a control frame between its chunks, then
	// bytes.
	buf.Reset()
	w, _ = codec.NewWriter(&buf, codec.WithRecipe(zstd1), codec.WithChunkSize(64))
	w.WriteTensor(codec.FromFloat32("w", make([]float32, 40), 40))
	w.Write([]byte("after"))
	w.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		c, err := Wrap(b, WithCloseTimeout(0), WithFeedbackHandler(func(Feedback) {}))
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, a)
		go func() {
			a.Write(stream)
			a.Close()
		}()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			_, err := io.Copy(io.Discard, c)
			if errors.Is(err, ErrTensorNext) {
				if _, err = c.ReadTensor(); err == nil || errors.Is(err, ErrBytesNext) {
					continue
				}
			}
			break
		}
		c.Close()
	})
}
