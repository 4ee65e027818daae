package fl

import (
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// Compressed is an Uplink that sends each client's update through a
// gradient compressor as real frames, on the library's path for updates
// (transport.Conn uses the same): one gradient.Outbox per client (its
// error-feedback memory persists across rounds), one gradient.Receiver on
// the server adding every frame into the sum; each update is accepted
// once the server added it, aborted when it could not. The bytes counted
// are the frames' bytes, headers and indices included.
type Compressed struct {
	spec   *gradient.Spec
	params []Param
	boxes  []*gradient.Outbox
	recv   *gradient.Receiver
	epoch  float64
	frame  []byte
	ts     []*codec.Tensor
}

// NewCompressed returns an Uplink for spec over the model's parameters
// (names and shapes as in MLP.Params).
func NewCompressed(spec *gradient.Spec, params []Param) *Compressed {
	recv, err := gradient.NewReceiver()
	if err != nil {
		panic(err) // no options: cannot fail
	}
	return &Compressed{spec: spec, params: params, recv: recv}
}

// SetEpoch tells the compressors' schedules (DGC's warm-up) the epoch.
func (c *Compressed) SetEpoch(e float64) { c.epoch = e }

// CorrectsMomentum reports whether the compressor applies momentum on the
// workers (DGC with momentum).
func (c *Compressed) CorrectsMomentum() bool {
	mc, ok := c.spec.Compressor.(interface{ CorrectsMomentum() bool })
	return ok && mc.CorrectsMomentum()
}

// Send implements Uplink.
func (c *Compressed) Send(client, step int, update [][]float32, weight float32, sum [][]float32) (int64, error) {
	if len(update) != len(c.params) || len(sum) != len(c.params) {
		return 0, fmt.Errorf("fl: compressed uplink: %d update and %d sum tensors for %d parameters", len(update), len(sum), len(c.params))
	}
	for len(c.boxes) <= client {
		c.boxes = append(c.boxes, gradient.NewOutbox(nil))
	}
	s := c.boxes[client]
	s.SetEpoch(c.epoch)
	c.ts = c.ts[:0]
	for i, p := range c.params {
		c.ts = append(c.ts, codec.FromFloat32(p.Name, update[i], p.Shape...))
	}
	if err := s.Plan(c.ts, c.spec); err != nil { // topk(r,model=on)
		return 0, err
	}
	var total int64
	for i, p := range c.params {
		var err error
		c.frame, err = s.Append(c.frame[:0], c.ts[i], c.spec, 0)
		if err != nil {
			return 0, err
		}
		total += int64(len(c.frame))
		_, err = c.recv.Add(c.frame, weight, func(name string, shape []int64) ([]float32, error) {
			if name != p.Name {
				return nil, fmt.Errorf("fl: frame for %q where %q was sent", name, p.Name)
			}
			return sum[i], nil
		})
		if err != nil {
			s.Abort()
			return 0, err
		}
		s.Accept(1) // the server has it
	}
	return total, nil
}
