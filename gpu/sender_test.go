package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// testSender runs gradient.Sender and the device's Sender side by side on
// the same gradients, commits and aborts: their frames must be the same
// bytes, step after step.
func testSender(t *testing.T, d *Device) {
	nesterov := gradient.NewDGC(0.01)
	nesterov.Nesterov = true
	noMomentum := gradient.NewDGC(0.01)
	noMomentum.Momentum = 0
	clipped := gradient.NewDGC(0.01)
	clipped.Clip = 1 // the gradients' norms are about 50 to 220: clipped
	for _, c := range []gradient.Compressor{gradient.TopK{Ratio: 0.01}, gradient.TopK{Ratio: 0.3}, gradient.NewDGC(0.01), nesterov, noMomentum, clipped} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			cpu, err := gradient.NewSender(c)
			if err != nil {
				t.Fatal(err)
			}
			dev, err := d.NewSender(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := dev.Close(); err != nil {
					t.Error(err)
				}
			}()
			rng := rand.New(rand.NewPCG(31, 31))
			shapes := map[string][]int64{"a.weight": {250, 200}, "b.weight": {1000}}
			for step, commit := range []bool{true, false, true, true, true} {
				for _, name := range []string{"a.weight", "b.weight"} {
					n := 1
					for _, d := range shapes[name] {
						n *= int(d)
					}
					g := codec.FromFloat32(name, f32s(finite(rng, n)), shapes[name]...)
					want, err := cpu.Append(nil, g)
					if err != nil {
						t.Fatal(err)
					}
					got, err := dev.Append(nil, g)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("step %d, %s: the frames differ (%d and %d bytes)", step, name, len(got), len(want))
					}
				}
				if commit {
					cpu.Commit()
					err = dev.Commit()
				} else {
					cpu.Abort()
					err = dev.Abort()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// What stays on the CPU is refused with a reason.
	clip := gradient.NewDGC(0.01)
	clip.Clip, clip.Momentum = 1, 0
	for _, c := range []struct {
		c    gradient.Compressor
		tail *codec.Recipe
	}{{clip, nil}, {gradient.TopK{Ratio: 0.1}, codec.MustParseRecipe("val:fp16 | *:zstd(1)")}, {gradient.Threshold{T: 0.1}, nil}} {
		if _, err := d.NewSender(c.c, c.tail); !errors.Is(err, codec.ErrUnsupported) {
			t.Errorf("%v, tail %v: %v", c.c, c.tail, err)
		}
	}
}

func TestGPUSender(t *testing.T) { testSender(t, needDevice(t)) }

func TestFakeSender(t *testing.T) {
	f := installFake(t, 1)
	testSender(t, openFake(t, f))
	f.check(t, false)
}

// testOutbox sends the same updates through an Outbox on the CPU and one
// on the device: the same frames, with updates accepted one by one, the
// last aborted and everything aborted, at changing densities.
func testOutbox(t *testing.T, d *Device) {
	for _, text := range []string{"topk(0.01)", "dgc(0.01)", "topk(0.05,ef=off)", "randk(0.01)"} {
		t.Run(text, func(t *testing.T) {
			spec, err := gradient.Parse(text)
			if err != nil {
				t.Fatal(err)
			}
			cpu, dev := gradient.NewOutbox(nil), gradient.NewOutbox(nil)
			var logs []string
			dev.SetDevice(d.OutboxSender, func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
			defer func() {
				if err := dev.Close(); err != nil {
					t.Error(err)
				}
			}()
			rng := rand.New(rand.NewPCG(41, 41))
			names := []string{"a.weight", "b.weight", "c.weight"}
			for step := range 6 {
				density := []float64{0, 0.02, 0}[step%3]
				for _, name := range names {
					g := codec.FromFloat32(name, f32s(finite(rng, 40000)), 200, 200)
					want, err := cpu.Append(nil, g, spec, density)
					if err != nil {
						t.Fatal(err)
					}
					got, err := dev.Append(nil, g, spec, density)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("step %d, %s: the frames differ", step, name)
					}
					if !dev.IsPending(name) {
						t.Fatalf("%s not pending", name)
					}
				}
				switch step % 3 {
				case 0:
					cpu.Accept(1)
					dev.Accept(1)
					cpu.Accept(2)
					dev.Accept(2)
				case 1:
					cpu.AbortLast()
					dev.AbortLast()
					cpu.Accept(2)
					dev.Accept(2)
				case 2:
					cpu.Abort()
					dev.Abort()
				}
			}
			device := text == "topk(0.01)" || text == "dgc(0.01)"
			if device != (len(logs) == 0) {
				t.Fatalf("on the device %t, but the log says %q", device, logs)
			}
		})
	}
}

func TestGPUOutbox(t *testing.T) { testOutbox(t, needDevice(t)) }

func TestFakeOutbox(t *testing.T) {
	f := installFake(t, 1)
	testOutbox(t, openFake(t, f))
	f.check(t, false)
}

// TestFakeOutboxOutOfMemory: a device out of memory makes the Outbox send
// on the CPU, with a log line, and the same frames.
func TestFakeOutboxOutOfMemory(t *testing.T) {
	f := installFake(t, 1)
	d := openFake(t, f)
	spec, _ := gradient.Parse("topk(0.01)")
	cpu, dev := gradient.NewOutbox(nil), gradient.NewOutbox(nil)
	var logs []string
	dev.SetDevice(d.OutboxSender, func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) })
	defer dev.Close()
	f.failing("cuMemAlloc_v2", 2) // CUDA_ERROR_OUT_OF_MEMORY
	rng := rand.New(rand.NewPCG(42, 42))
	for range 3 {
		g := codec.FromFloat32("w", f32s(finite(rng, 5000)), 5000)
		want, _ := cpu.Append(nil, g, spec, 0)
		got, err := dev.Append(nil, g, spec, 0)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v, the frames differ: %t", err, !bytes.Equal(got, want))
		}
		cpu.Accept(1)
		dev.Accept(1)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "runs on the CPU") || !strings.Contains(logs[0], "OUT_OF_MEMORY") {
		t.Fatalf("log: %q", logs)
	}
}

// TestFakeSenderPieces: a pageable gradient larger than a staging piece
// arrives whole (the frames equal the CPU's).
func TestFakeSenderPieces(t *testing.T) {
	f := installFake(t, 1)
	d := openFake(t, f)
	c := gradient.TopK{Ratio: 0.001}
	cpu, _ := gradient.NewSender(c)
	dev, err := d.NewSender(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(43, 43))
	n := stagePiece/4*2 + 12345
	for range 2 {
		g := codec.FromFloat32("big", f32s(finite(rng, n)), int64(n))
		want, _ := cpu.Append(nil, g)
		got, err := dev.Append(nil, g)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v; the frames differ: %t", err, !bytes.Equal(got, want))
		}
		cpu.Commit()
		dev.Commit()
	}
}

// TestUseDeviceWithoutGPU: device cpu and auto leave an Outbox on the
// CPU where there is no GPU; cuda (the backend this package registers)
// says why it cannot.
func TestUseDeviceWithoutGPU(t *testing.T) {
	if Available() == nil {
		t.Skip("a GPU is here")
	}
	for _, dev := range []string{"", gradient.DeviceCPU, gradient.DeviceAuto} {
		ob := gradient.NewOutbox(nil)
		if err := gradient.UseDevice(ob, dev); err != nil || ob.HasDevice() {
			t.Errorf("%q: %v, on a device %t", dev, err, ob.HasDevice())
		}
	}
	ob := gradient.NewOutbox(nil)
	if err := gradient.UseDevice(ob, "cuda"); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "device: cuda") {
		t.Errorf("cuda: %v", err)
	}
}

// TestBackendLifetime: the device the backend opens for gradient.UseDevice
// is shared by the Outboxes that use it and closed with the last of them;
// the next UseDevice opens it again.
func TestBackendLifetime(t *testing.T) {
	f := installFake(t, 1)
	t.Cleanup(func() { f.check(t, true) })
	if !slices.Contains(gradient.Devices(), "cuda") {
		t.Fatalf("registered devices %v, want cuda", gradient.Devices())
	}
	a, b := gradient.NewOutbox(nil), gradient.NewOutbox(nil)
	for _, ob := range []*gradient.Outbox{a, b} {
		if err := gradient.UseDevice(ob, gradient.DeviceAuto); err != nil || !ob.HasDevice() {
			t.Fatalf("auto: %v, on a device %t", err, ob.HasDevice())
		}
	}
	spec, err := gradient.Parse("topk(0.1)")
	if err != nil {
		t.Fatal(err)
	}
	g := codec.FromFloat32("g", f32s(finite(rand.New(rand.NewPCG(5, 5)), 1000)), 1000)
	if _, err := a.Append(nil, g, spec, 0); err != nil {
		t.Fatal(err)
	}
	a.Accept(1)
	d := shared.d
	if d == nil || shared.refs != 2 {
		t.Fatalf("device %v with %d users, want one with 2", d, shared.refs)
	}
	if err := a.Close(); err != nil || shared.d != d || a.HasDevice() {
		t.Fatalf("first Close: %v; device %v (was %v), a on a device %t", err, shared.d, d, a.HasDevice())
	}
	if err := b.Close(); err != nil || shared.d != nil || shared.refs != 0 {
		t.Fatalf("last Close: %v; device %v, %d users", err, shared.d, shared.refs)
	}
	if err := d.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Errorf("the device after the last Close: %v, want ErrClosed", err)
	}
	if err := gradient.UseDevice(b, "cuda"); err != nil || !b.HasDevice() || shared.d == nil {
		t.Fatalf("cuda again: %v", err)
	}
	if err := b.Close(); err != nil || shared.d != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestFakeSenderTails: tails that do not start with idx:delta,bitpack take
// the positions to the host as they are; the frames are the CPU's.
func TestFakeSenderTails(t *testing.T) {
	f := installFake(t, 1)
	d := openFake(t, f)
	rng := rand.New(rand.NewPCG(44, 44))
	for _, text := range []string{"idx:varint | val:shuffle | *:zstd(1)", "*:zstd(1)", "idx:delta,bitpack | *:raw"} {
		tail := codec.MustParseRecipe(text)
		c := gradient.TopK{Ratio: 0.02}
		cpu, _ := gradient.NewSender(c, gradient.WithTail(tail))
		dev, err := d.NewSender(c, tail)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			g := codec.FromFloat32("w", f32s(finite(rng, 30000)), 300, 100)
			want, _ := cpu.Append(nil, g)
			got, err := dev.Append(nil, g)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %v; the frames differ: %t", text, err, !bytes.Equal(got, want))
			}
			cpu.Commit()
			dev.Commit()
		}
		dev.Close()
	}
}

// A step of the device's Sender (a tensor in pageable memory to its frame,
// committed) takes a dozen trips to the device's worker or fewer once
// warm: each costs BenchmarkFakeTrip's microseconds, and a model has a
// step per tensor.
func TestFakeSenderTrips(t *testing.T) {
	f := installFake(t, 1)
	d := openFake(t, f)
	rng := rand.New(rand.NewPCG(19, 19))
	n := 1 << 18
	g := &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{int64(n)}, Data: u32bytes(finite(rng, n))}
	for _, c := range []gradient.Compressor{gradient.TopK{Ratio: 0.01}, &gradient.DGC{Ratio: 0.01, Momentum: 0.9}} {
		s, err := d.NewSender(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		var frame []byte
		for i := range 3 {
			t0 := d.trips.Load()
			if frame, err = s.Append(frame[:0], g); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(); err != nil {
				t.Fatal(err)
			}
			if trips := d.trips.Load() - t0; i > 0 && trips > 12 {
				t.Errorf("%T, step %d: %d trips to the worker, want at most 12", c, i, trips)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFakeSenderNonFinite: a gradient holding a NaN and an infinity fails
// on the device as on the CPU (codec.ErrNonFinite: receivers refuse such
// frames) and leaves no lock-out: the finite steps after it go through,
// with the CPU's frames for TopK (whose state the refusal leaves as it
// was); DGC's momentum, which took the gradient in place on the device,
// drops them and goes on.
func TestFakeSenderNonFinite(t *testing.T) {
	f := installFake(t, 1)
	d := openFake(t, f)
	for _, c := range []gradient.Compressor{gradient.TopK{Ratio: 0.01}, gradient.NewDGC(0.01)} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			cpu, _ := gradient.NewSender(c)
			dev, err := d.NewSender(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			rng := rand.New(rand.NewPCG(5, 5))
			step := func(g *codec.Tensor, same bool) {
				t.Helper()
				want, err := cpu.Append(nil, g)
				if err != nil {
					t.Fatal(err)
				}
				got, err := dev.Append(nil, g)
				if err != nil {
					t.Fatal(err)
				}
				if same && !bytes.Equal(got, want) {
					t.Fatal("the frames differ")
				}
				recv, _ := gradient.NewReceiver()
				if _, err := recv.Add(got, 1, func(string, []int64) ([]float32, error) { return make([]float32, 10000), nil }); err != nil {
					t.Fatalf("the device's frame: %v", err)
				}
			}
			grad := func() *codec.Tensor { return codec.FromFloat32("w", f32s(finite(rng, 10000)), 100, 100) }
			step(grad(), true)
			cpu.Commit()
			dev.Commit()
			bad := grad()
			v, _ := codec.View[float32](bad)
			v[7], v[900] = float32(math.NaN()), float32(math.Inf(-1))
			if _, err := cpu.Append(nil, bad); !errors.Is(err, codec.ErrNonFinite) {
				t.Fatalf("CPU: %v", err)
			}
			if _, err := dev.Append(nil, bad); !errors.Is(err, codec.ErrNonFinite) {
				t.Fatalf("device: %v", err)
			}
			_, topk := c.(gradient.TopK)
			for range 3 {
				step(grad(), topk)
				cpu.Commit()
				dev.Commit()
			}
		})
	}
	f.check(t, false)
}
