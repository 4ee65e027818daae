package gpu

import (
	"errors"
	"strconv"
)

var (
	// ErrNoDevice means that no CUDA device can be used: libcuda.so.1
	// cannot be loaded or lacks a symbol this package binds, cuInit
	// failed, the machine has no device, or an ordinal is out of range.
	// The error returned wraps it and says which (errors.Is finds it; a
	// driver code, where there is one, is found as an *Error too).
	ErrNoDevice = errors.New("gpu: no CUDA device")

	// ErrClosed is returned by calls on a Device (or on its streams,
	// events and modules) after Device.Close, and by calls on a Stream,
	// Event or Module after its own Close.
	ErrClosed = errors.New("gpu: use of closed device or resource")

	// ErrOutOfMemory matches, with errors.Is, an *Error whose code is
	// CUDA_ERROR_OUT_OF_MEMORY (2).
	ErrOutOfMemory = errors.New("gpu: out of device memory")
)

// CUresult codes this package tests for.
const (
	codeInvalidValue = 1   // CUDA_ERROR_INVALID_VALUE
	codeOutOfMemory  = 2   // CUDA_ERROR_OUT_OF_MEMORY
	codeNoDevice     = 100 // CUDA_ERROR_NO_DEVICE
)

// Error is a CUDA driver call that returned a code other than
// CUDA_SUCCESS. Name is the code's name as cuGetErrorName gives it
// (empty when the driver does not know the code). Its text is
//
//	gpu: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)
//
// Free and FreeHost refuse an address that the Device did not allocate
// (or already freed) without calling the driver, with the code the
// driver gives for one: an *Error of Call cuMemFree_v2 or cuMemFreeHost
// and Code CUDA_ERROR_INVALID_VALUE (1). This keeps a second Free of an
// address that the driver has since handed out again from freeing the
// new allocation.
type Error struct {
	Call string // the driver function, by its symbol name
	Code int    // the CUresult
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = "CUDA error"
	}
	return "gpu: " + e.Call + ": " + name + " (" + strconv.Itoa(e.Code) + ")"
}

// Is reports whether target is ErrOutOfMemory and e is
// CUDA_ERROR_OUT_OF_MEMORY.
func (e *Error) Is(target error) bool {
	return target == ErrOutOfMemory && e.Code == codeOutOfMemory
}

// noDeviceError is ErrNoDevice with its reason, and the driver's error
// where there is one.
type noDeviceError struct {
	reason string
	cause  error
}

func (e *noDeviceError) Error() string { return ErrNoDevice.Error() + ": " + e.reason }

func (e *noDeviceError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrNoDevice}
	}
	return []error{ErrNoDevice, e.cause}
}

// noDevice returns an error wrapping ErrNoDevice; cause (may be nil) is
// the error behind it, and its text is the reason unless reason is set.
func noDevice(reason string, cause error) error {
	if reason == "" && cause != nil {
		reason = cause.Error()
	}
	return &noDeviceError{reason: reason, cause: cause}
}

// unusableCodes are the codes that, from cuDeviceGet or
// cuDevicePrimaryCtxRetain, mean the device cannot be used at all
// rather than that a call went wrong: Open wraps them in ErrNoDevice.
var unusableCodes = map[int]bool{
	3:   true, // CUDA_ERROR_NOT_INITIALIZED
	4:   true, // CUDA_ERROR_DEINITIALIZED
	34:  true, // CUDA_ERROR_STUB_LIBRARY
	46:  true, // CUDA_ERROR_DEVICE_UNAVAILABLE (exclusive mode, taken)
	100: true, // CUDA_ERROR_NO_DEVICE
	101: true, // CUDA_ERROR_INVALID_DEVICE
	102: true, // CUDA_ERROR_DEVICE_NOT_LICENSED
	802: true, // CUDA_ERROR_SYSTEM_NOT_READY
	803: true, // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
	804: true, // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
}

// knownNames names the common codes for when cuGetErrorName is not
// bound or does not know a code (values from cuda.h's cudaError_enum).
var knownNames = map[int]string{
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	999: "CUDA_ERROR_UNKNOWN",
}

// check turns a CUresult into nil or an *Error.
func check(call string, r cuResult) error {
	if r == 0 {
		return nil
	}
	return newError(call, int(r))
}

func newError(call string, code int) *Error {
	return &Error{Call: call, Code: code, Name: errorName(code)}
}

// errorName asks cuGetErrorName for a code's name; it needs no context
// and may be called from any thread.
func errorName(code int) string {
	if cuGetErrorName != nil {
		var p *byte
		if cuGetErrorName(cuResult(code), &p) == 0 && p != nil {
			if s := goString(p, 128); s != "" {
				return s
			}
		}
	}
	return knownNames[code]
}
