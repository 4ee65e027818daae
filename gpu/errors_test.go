package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestErrorText(t *testing.T) {
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{&Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}, "gpu: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"},
		{&Error{Call: "cuLaunchKernel", Code: 719, Name: "CUDA_ERROR_LAUNCH_FAILED"}, "gpu: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (719)"},
		{&Error{Call: "cuInit", Code: 12345}, "gpu: cuInit: CUDA error (12345)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestErrorIs(t *testing.T) {
	oom := &Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	wrapped := fmt.Errorf("encoding layer 3: %w", oom)
	if !errors.Is(oom, ErrOutOfMemory) || !errors.Is(wrapped, ErrOutOfMemory) {
		t.Error("CUDA_ERROR_OUT_OF_MEMORY is not ErrOutOfMemory")
	}
	var e *Error
	if !errors.As(wrapped, &e) || e.Code != 2 {
		t.Error("errors.As does not find the *Error")
	}
	for _, other := range []*Error{{Call: "cuMemAlloc_v2", Code: 1}, {Call: "cuLaunchKernel", Code: 701}} {
		if errors.Is(other, ErrOutOfMemory) {
			t.Errorf("%v is ErrOutOfMemory", other)
		}
	}
	if errors.Is(oom, ErrNoDevice) || errors.Is(oom, ErrClosed) {
		t.Error("an out-of-memory error is another sentinel too")
	}
}

func TestNoDeviceError(t *testing.T) {
	cause := &Error{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}
	err := noDevice("", cause)
	if got, want := err.Error(), "gpu: no CUDA device: gpu: cuInit: CUDA_ERROR_NO_DEVICE (100)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var e *Error
	if !errors.Is(err, ErrNoDevice) || !errors.As(err, &e) || e != cause {
		t.Error("the error does not wrap ErrNoDevice and its cause")
	}
	err = noDevice("ordinal 3 out of range (1 devices)", nil)
	if !errors.Is(err, ErrNoDevice) || errors.As(err, &e) {
		t.Errorf("%v: wraps the wrong errors", err)
	}
	err = missingSymbols([]string{"cuDevicePrimaryCtxRelease_v2"})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "libcuda.so.1 lacks [cuDevicePrimaryCtxRelease_v2]") {
		t.Errorf("missing symbols: %v", err)
	}
}

func TestErrorName(t *testing.T) {
	// Without a driver the names come from the package's table.
	if Available() == nil {
		t.Skip("a driver is loaded: its cuGetErrorName answers")
	}
	if e := newError("cuMemAlloc_v2", 2); e.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("name of code 2: %q", e.Name)
	}
	if e := newError("cuX", 424242); e.Name != "" || e.Error() != "gpu: cuX: CUDA error (424242)" {
		t.Errorf("unknown code: %v", e)
	}
}

func TestErrorList(t *testing.T) {
	var l errorList
	l.add(nil)
	if l.err() != nil {
		t.Error("an empty list is an error")
	}
	for i := range 7 {
		l.add(&Error{Call: "cuMemFree_v2", Code: i + 1})
	}
	err := l.err()
	var e *Error
	if !errors.As(err, &e) || e.Code != 1 || !strings.Contains(err.Error(), "and 3 more errors") {
		t.Errorf("list of 7: %v", err)
	}
}

// TestNoDevice is the path of every machine without an NVIDIA driver:
// no panic, an error that wraps ErrNoDevice and says why, at no cost
// after the first call.
func TestNoDevice(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("a CUDA device is present")
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Available() = %v, not ErrNoDevice", err)
	}
	msg := err.Error()
	reason, ok := strings.CutPrefix(msg, "gpu: no CUDA device: ")
	if !ok || reason == "" {
		t.Errorf("Available() = %q: no reason", msg)
	}
	// This machine's reason: the library, cuInit, or the platform.
	if !strings.Contains(reason, "libcuda.so.1") && !strings.Contains(reason, "cuInit") &&
		!strings.Contains(reason, "no CUDA binding") && !strings.Contains(reason, "no device") {
		t.Errorf("Available() = %q: an unexpected reason", msg)
	}
	t.Log(msg)
	for _, o := range []int{0, 1, -1} {
		d, err := Open(o)
		if d != nil || !errors.Is(err, ErrNoDevice) || err.Error() != msg {
			t.Errorf("Open(%d) = %v, %v; want Available's error", o, d, err)
		}
	}
	if n, err := Count(); n != 0 || err.Error() != msg {
		t.Errorf("Count() = %d, %v", n, err)
	}
	if allocs := testing.AllocsPerRun(1000, func() { _ = Available() }); allocs != 0 {
		t.Errorf("Available allocates %v times a call after the first", allocs)
	}
	for range 10000 {
		if Available() != err {
			t.Fatal("Available's answer changed")
		}
	}
}
