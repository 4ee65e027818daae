package main

import (
	"errors"
	"io"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/session"
	"github.com/tensorpress/tensorpress/transport"
)

// tensorBytes is the size of the whole workload tensors, in turn, that
// cover n bytes: the tensor workload sends whole tensors only.
func (wl *workload) tensorBytes(n int64) int64 {
	var s int64
	for i := 0; s < n; i++ {
		s += int64(len(wl.chunks[i%len(wl.chunks)]))
	}
	return s
}

// sendTensors writes whole workload tensors (n bytes: see tensorBytes, or
// fewer when stop, checked before each tensor, reports true) to c and
// returns their bytes. The session does the rest (session.WriteTensor
// with the profile): dense tensors go through its policy, and updates
// (tagged role=update here, as the workload's names say) whose rule lists
// gradient compressors go out as gradient updates with error feedback,
// each copy of an update the next round of that tensor, at the Tuner's
// density with --update-within.
func (b *linkBench) sendTensors(c *session.Session, n int64, stop func() bool) (int64, error) {
	var sent int64
	for i := 0; sent < n && !stop(); i++ {
		k := i % len(b.work.chunks)
		t := &codec.Tensor{Name: b.work.names[k], DType: codec.F32, Shape: b.work.shapes[k], Data: b.work.chunks[k]}
		if strings.HasSuffix(t.Name, ".update") {
			t.Tags.Extra = []codec.Tag{{Key: "role", Value: "update"}}
		}
		sent += int64(len(t.Data))
		if err := c.WriteTensor(t); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// receiveTensors reads tensors until the end of the stream and returns
// their decoded bytes (sparse updates count at their dense size), not
// hashed, and when the first tensor arrived.
func receiveTensors(c *transport.Conn) (received, error) {
	var got received
	for {
		t, err := c.ReadTensor()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		if got.n == 0 && len(t.Data) > 0 {
			got.first = time.Now()
		}
		got.n += int64(len(t.Data))
	}
}
