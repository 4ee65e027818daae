package gpu

import (
	"sync"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// The package registers itself as gradient's device backend "cuda": a
// program that imports it lets gradient.UseDevice (a profile's device:
// auto or cuda) put an Outbox's updates on device 0.
func init() { gradient.RegisterDevice("cuda", backend{}) }

// backend opens device 0 for the first handle and closes it with the
// last: the device lives exactly as long as some Outbox uses it.
type backend struct{}

var shared struct {
	mu   sync.Mutex
	d    *Device
	refs int
}

// Open implements gradient.DeviceBackend: a handle on device 0 (Open's
// error, wrapping ErrNoDevice, where there is none).
func (backend) Open() (gradient.Device, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.refs == 0 {
		d, err := Open(0)
		if err != nil {
			return nil, err
		}
		shared.d = d
	}
	shared.refs++
	return &handle{d: shared.d}, nil
}

// handle is one user's hold on the shared device.
type handle struct {
	d      *Device
	closed sync.Once
}

func (h *handle) NewSender(c gradient.Compressor, tail *codec.Recipe) (gradient.DeviceSender, error) {
	return h.d.OutboxSender(c, tail)
}

// Close gives the handle back; the last one closes the device.
func (h *handle) Close() error {
	var err error
	h.closed.Do(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.refs--; shared.refs == 0 {
			err = shared.d.Close()
			shared.d = nil
		}
	})
	return err
}
