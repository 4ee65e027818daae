package gpu

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// openFake opens device 0 of the fake driver for the test, closes it at
// the end and then checks that the fake holds nothing.
func openFake(t testing.TB, f *fakeDriver) *Device {
	t.Helper()
	t.Cleanup(func() { f.check(t, true) })
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// TestFakeDriver runs the device suite on the fake driver: the package's
// logic, without a GPU.
func TestFakeDriver(t *testing.T) {
	f := installFake(t, 1)
	for _, c := range suite {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, openFake(t, f))
			f.check(t, false)
		})
	}
}

func TestFakeOpen(t *testing.T) {
	f := installFake(t, 2)
	for _, o := range []int{-1, 2} {
		_, err := Open(o)
		if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "out of range (2 devices)") {
			t.Errorf("Open(%d): %v", o, err)
		}
	}
	d0, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := Open(1)
	if err != nil {
		t.Fatal(err)
	}
	if d0.Name() != "Fake GPU" || d1.Ordinal() != 1 || d0.TotalMem() != fakeTotal || d0.DriverVersion() != 12040 {
		t.Errorf("Name %q, Ordinal %d, TotalMem %d, DriverVersion %d", d0.Name(), d1.Ordinal(), d0.TotalMem(), d0.DriverVersion())
	}
	if err := errors.Join(d0.Close(), d1.Close()); err != nil {
		t.Fatal(err)
	}
	if n := f.count("cuDevicePrimaryCtxRetain"); n != 2 {
		t.Errorf("primary context retained %d times for two Devices", n)
	}
	f.check(t, true)
	goleak.VerifyNone(t)
}

// TestFakeOpenFails: a device that cannot be used is ErrNoDevice with the
// driver's code; a context that cannot be made current is released; the
// worker ends either way.
func TestFakeOpenFails(t *testing.T) {
	f := installFake(t, 1)
	f.failing("cuDevicePrimaryCtxRetain", 46)
	_, err := Open(0)
	var e *Error
	if !errors.Is(err, ErrNoDevice) || !errors.As(err, &e) || e.Code != 46 || e.Name != "CUDA_ERROR_DEVICE_UNAVAILABLE" {
		t.Errorf("Open with the device taken: %v", err)
	}
	f.failing("cuDevicePrimaryCtxRetain", 0)
	f.failing("cuCtxSetCurrent", 999)
	_, err = Open(0)
	if errors.Is(err, ErrNoDevice) || !errors.As(err, &e) || e.Call != "cuCtxSetCurrent" {
		t.Errorf("Open with cuCtxSetCurrent failing: %v", err)
	}
	if n := f.count("cuDevicePrimaryCtxRelease_v2"); n != 1 {
		t.Errorf("context released %d times after cuCtxSetCurrent failed", n)
	}
	f.check(t, true)
	goleak.VerifyNone(t)
}

// TestFakeCloseFrees: Close frees what was left, in one pass, and ends
// the worker.
func TestFakeCloseFrees(t *testing.T) {
	f := installFake(t, 1)
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := d.Alloc(1 + i*1000); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := d.AllocHost(4096); err != nil {
			t.Fatal(err)
		}
		if _, err := d.NewStream(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.NewEvent(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.LoadModule([]byte(testPTX)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for call, want := range map[string]int{
		"cuMemFree_v2": 100, "cuMemFreeHost": 3, "cuStreamDestroy_v2": 3, "cuEventDestroy_v2": 3,
		"cuModuleUnload": 3, "cuDevicePrimaryCtxRelease_v2": 1, "cuCtxSynchronize": 1,
	} {
		if n := f.count(call); n != want {
			t.Errorf("%s called %d times by Close, want %d", call, n, want)
		}
	}
	f.check(t, true)
	goleak.VerifyNone(t)
}

// TestFakeCloseErrors: a failing free is reported by Close, which still
// releases everything else and the context.
func TestFakeCloseErrors(t *testing.T) {
	f := installFake(t, 1)
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := d.Alloc(100); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.NewStream(); err != nil {
		t.Fatal(err)
	}
	f.failing("cuMemFree_v2", 700)
	err = d.Close()
	var e *Error
	if !errors.As(err, &e) || e.Call != "cuMemFree_v2" || !strings.Contains(err.Error(), "and 6 more errors") {
		t.Errorf("Close with failing frees: %v", err)
	}
	if n := f.count("cuDevicePrimaryCtxRelease_v2"); n != 1 {
		t.Errorf("context released %d times", n)
	}
	if n := f.count("cuStreamDestroy_v2"); n != 1 {
		t.Errorf("stream destroyed %d times", n)
	}
	f.mu.Lock()
	clear(f.mem) // what the failing frees left; the fake holds nothing else
	f.bad = slices.DeleteFunc(f.bad, func(s string) bool { return strings.HasPrefix(s, "context destroyed with resources") })
	f.mu.Unlock()
	f.check(t, true)
	goleak.VerifyNone(t)
}

// TestFakeCloseWhileBusy: calls racing with Close either complete or get
// ErrClosed; none is lost, none panics.
func TestFakeCloseWhileBusy(t *testing.T) {
	f := installFake(t, 1)
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 16 {
		wg.Go(func() {
			<-start
			for i := range 300 {
				p, err := d.Alloc(1 + g + i)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if err := d.CopyHtoD(p, []byte{1, 2}[:min(2, 1+g+i)]); err != nil && !errors.Is(err, ErrClosed) {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					if err := d.Free(p); err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	close(start)
	for range 200 {
		if _, _, err := d.MemInfo(); err != nil {
			t.Fatal(err)
		}
	}
	var closers sync.WaitGroup
	for range 3 {
		closers.Go(func() {
			if err := d.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	closers.Wait()
	wg.Wait()
	f.check(t, true)
	goleak.VerifyNone(t)
}

// TestFakeWrongThread: the fake driver refuses a call from a thread
// without the context, so the suite passing shows that every call ran on
// the worker's thread. Here, a direct call from the test's goroutine
// (after its Device is gone) is refused.
func TestFakeWrongThread(t *testing.T) {
	if threadID() == 0 {
		t.Skip("threads cannot be told apart on this platform")
	}
	f := installFake(t, 1)
	var p uint64
	if r := cuMemAlloc(&p, 16); r != 201 {
		t.Errorf("cuMemAlloc without a current context = %d, want 201", r)
	}
	f.mu.Lock()
	f.bad = nil
	f.mu.Unlock()
}

// BenchmarkFakeTrip is one trip to a Device's worker (Device.do) with
// nothing to do: the goroutine handoff to the worker's locked OS thread
// and back that every driver call pays, and the reason the selections
// batch their launches (batch). The driver is the fake; the handoff is
// the real one.
func BenchmarkFakeTrip(b *testing.B) {
	d := openFake(b, installFake(b, 1))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.do(func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
