package gradient

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/tensorpress/tensorpress/codec"
)

// A DeviceBackend opens a device on which an Outbox compresses its
// updates (error feedback and selection where the data already is). A
// backend registers itself under a name in its package's init, as a
// database/sql driver does: package gpu registers "cuda", so a program
// that wants the GPU imports it (import _ "github.com/tensorpress/tensorpress/gpu"),
// and one that does not links no device code.
type DeviceBackend interface {
	// Open returns a handle on the device, or why there is none. Each
	// handle is closed once; a backend may share one device among its
	// open handles (package gpu opens its device with the first and
	// closes it with the last).
	Open() (Device, error)
}

// Device is an open handle on a device (DeviceBackend.Open).
type Device interface {
	// NewSender returns a Sender on the device for compressor c and tail
	// (nil: DefaultTail); an error wrapping codec.ErrUnsupported where
	// the device does not run c.
	NewSender(c Compressor, tail *codec.Recipe) (DeviceSender, error)
	// Close gives the handle back.
	Close() error
}

// Devices a profile (or a caller) may name besides registered backends.
const (
	DeviceCPU  = "cpu"  // on the CPU: no device
	DeviceAuto = "auto" // the first registered backend (by name) that opens, else the CPU
)

var devices struct {
	mu sync.Mutex
	m  map[string]DeviceBackend
}

// RegisterDevice makes backend b available under name (UseDevice). It
// panics if b is nil, the name is empty, cpu or auto, or registered
// twice: programming errors of a backend package's init.
func RegisterDevice(name string, b DeviceBackend) {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	switch {
	case b == nil:
		panic("gradient: RegisterDevice of a nil backend")
	case name == "" || name == DeviceCPU || name == DeviceAuto:
		panic(fmt.Sprintf("gradient: RegisterDevice: %q is not a backend name", name))
	case devices.m[name] != nil:
		panic(fmt.Sprintf("gradient: RegisterDevice: %q registered twice", name))
	}
	if devices.m == nil {
		devices.m = map[string]DeviceBackend{}
	}
	devices.m[name] = b
}

// Devices returns the names of the registered device backends, sorted.
func Devices() []string {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	names := make([]string, 0, len(devices.m))
	for n := range devices.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func backend(name string) DeviceBackend {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	return devices.m[name]
}

// ErrNoBackend is wrapped by UseDevice's error for a device that no linked
// package registered.
var ErrNoBackend = errors.New("gradient: no such device backend")

// UseDevice lets ob compress its updates where device says (a profile's
// device): "" or DeviceCPU leaves it on the CPU; DeviceAuto puts it on the
// first registered backend (by name) whose device opens, and leaves it on
// the CPU where none does; a backend's name ("cuda") puts it there or
// returns why not (ErrNoBackend where no linked package registered the
// name; the backend's error, such as gpu.ErrNoDevice, where its device
// does not open). An Outbox that already has a device keeps it. The device
// is held until ob.Close. The Outbox logs (slog, level Info) what it sends
// on the CPU after all, and why.
func UseDevice(ob *Outbox, device string) error {
	if device == "" || device == DeviceCPU || ob.HasDevice() {
		return nil
	}
	logf := func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	if device == DeviceAuto {
		for _, name := range Devices() {
			if d, err := backend(name).Open(); err == nil {
				ob.useDevice(d, logf)
				return nil
			}
		}
		return nil
	}
	b := backend(device)
	if b == nil {
		known := strings.Join(Devices(), ", ")
		if known == "" {
			known = "none linked; package gpu registers cuda"
		}
		return fmt.Errorf("device: %s: %w (registered: %s)", device, ErrNoBackend, known)
	}
	d, err := b.Open()
	if err != nil {
		return fmt.Errorf("device: %s: %w", device, err)
	}
	ob.useDevice(d, logf)
	return nil
}
