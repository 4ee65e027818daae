package gradient

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// testBackend's devices take no compressor (the Outbox then sends on the
// CPU) and count their handles.
type testBackend struct {
	open   int
	refuse error
}

func (b *testBackend) Open() (Device, error) {
	if b.refuse != nil {
		return nil, b.refuse
	}
	b.open++
	return &testDevice{b: b}, nil
}

type testDevice struct{ b *testBackend }

func (d *testDevice) NewSender(Compressor, *codec.Recipe) (DeviceSender, error) {
	return nil, codec.ErrUnsupported
}

func (d *testDevice) Close() error { d.b.open--; return nil }

var (
	okBackend  = &testBackend{}
	badBackend = &testBackend{refuse: errors.New("no such thing here")}
)

func init() {
	RegisterDevice("test-ok", okBackend)
	RegisterDevice("test-bad", badBackend)
}

// TestUseDevice: names pick registered backends, auto the first that
// opens; an unknown name says so; the Outbox gives its device back when
// it closes, and sends on the CPU where the device takes nothing.
func TestUseDevice(t *testing.T) {
	if got := Devices(); !slices.Contains(got, "test-ok") || !slices.Contains(got, "test-bad") || !slices.IsSorted(got) {
		t.Fatalf("Devices() = %v", got)
	}
	ob := NewOutbox(nil)
	for _, dev := range []string{"", DeviceCPU} {
		if err := UseDevice(ob, dev); err != nil || ob.HasDevice() {
			t.Fatalf("%q: %v, on a device %t", dev, err, ob.HasDevice())
		}
	}
	if err := UseDevice(ob, "nope"); !errors.Is(err, ErrNoBackend) {
		t.Errorf("nope: %v, want ErrNoBackend", err)
	}
	if err := UseDevice(ob, "test-bad"); err == nil || errors.Is(err, ErrNoBackend) || ob.HasDevice() {
		t.Errorf("test-bad: %v, on a device %t", err, ob.HasDevice())
	}
	if err := UseDevice(ob, DeviceAuto); err != nil || !ob.HasDevice() || okBackend.open != 1 {
		t.Fatalf("auto: %v, on a device %t, %d handles open", err, ob.HasDevice(), okBackend.open)
	}
	spec, err := Parse("topk(0.5)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Append(nil, codec.FromFloat32("g", []float32{1, -2, 3, -4}, 4), spec, 0); err != nil {
		t.Fatal(err)
	}
	ob.Accept(1)
	if err := ob.Close(); err != nil || okBackend.open != 0 || ob.HasDevice() {
		t.Errorf("Close: %v, %d handles open, on a device %t", err, okBackend.open, ob.HasDevice())
	}
}

// TestPeersClose: Close gives back the devices of the peers' Outboxes,
// and names a peer a connection still holds.
func TestPeersClose(t *testing.T) {
	peers := NewPeers()
	a, err := peers.Acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := UseDevice(a, "test-ok"); err != nil || okBackend.open != 1 {
		t.Fatalf("UseDevice: %v, %d handles open", err, okBackend.open)
	}
	peers.Release("a", a)
	if _, err := peers.Acquire(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	if err := peers.Close(); err == nil || !strings.Contains(err.Error(), `peer "b" is still held`) || okBackend.open != 0 {
		t.Errorf("Close: %v, %d handles open", err, okBackend.open)
	}
}

func TestRegisterDeviceMisuse(t *testing.T) {
	for _, c := range []struct {
		name string
		b    DeviceBackend
	}{{"x", nil}, {"", okBackend}, {DeviceAuto, okBackend}, {DeviceCPU, okBackend}, {"test-ok", okBackend}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterDevice(%q, %v) did not panic", c.name, c.b)
				}
			}()
			RegisterDevice(c.name, c.b)
		}()
	}
}
