package gpu

import (
	"fmt"
	"sync"
	"unsafe"
)

// cuResult is CUresult, a C enum: 32 bits.
type cuResult = int32

// The driver API as bound from libcuda.so.1, by the real symbol names
// (the _v2 names are what cuda.h's macros make of the plain ones). C
// types: CUresult, CUdevice and int are int32; unsigned int is uint32;
// size_t is uintptr; CUdeviceptr is unsigned long long (uint64);
// CUcontext, CUmodule, CUfunction, CUstream and CUevent are pointers to
// opaque structs, held as uintptr; a pointer to memory the call reads or
// writes is unsafe.Pointer or a typed Go pointer.
//
// They are nil until the library is loaded; every call goes through a
// Device's worker goroutine, except cuInit, cuDriverGetVersion,
// cuDeviceGetCount (made once, in load) and cuGetErrorName.
var (
	cuInit                    func(flags uint32) cuResult
	cuDriverGetVersion        func(version *int32) cuResult
	cuDeviceGetCount          func(count *int32) cuResult
	cuDeviceGet               func(dev *int32, ordinal int32) cuResult
	cuDeviceGetName           func(name *byte, n int32, dev int32) cuResult
	cuDeviceTotalMem          func(bytes *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRelease func(dev int32) cuResult
	cuCtxSetCurrent           func(ctx uintptr) cuResult
	cuCtxSynchronize          func() cuResult
	cuMemAlloc                func(dptr *uint64, size uintptr) cuResult
	cuMemFree                 func(dptr uint64) cuResult
	cuMemAllocHost            func(pp *unsafe.Pointer, size uintptr) cuResult
	cuMemFreeHost             func(p unsafe.Pointer) cuResult
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uintptr) cuResult
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uintptr) cuResult
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uintptr, stream uintptr) cuResult
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, n uintptr, stream uintptr) cuResult
	cuMemcpyDtoD              func(dst, src uint64, n uintptr) cuResult
	cuMemsetD8                func(dst uint64, b uint8, n uintptr) cuResult
	cuMemGetInfo              func(free, total *uintptr) cuResult
	cuModuleLoadData          func(mod *uintptr, image unsafe.Pointer) cuResult
	cuModuleUnload            func(mod uintptr) cuResult
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name *byte) cuResult
	cuLaunchKernel            func(fn uintptr, gx, gy, gz, bx, by, bz, sharedBytes uint32, stream uintptr, params, extra unsafe.Pointer) cuResult
	cuStreamCreate            func(stream *uintptr, flags uint32) cuResult
	cuStreamDestroy           func(stream uintptr) cuResult
	cuStreamSynchronize       func(stream uintptr) cuResult
	cuEventCreate             func(event *uintptr, flags uint32) cuResult
	cuEventDestroy            func(event uintptr) cuResult
	cuEventRecord             func(event, stream uintptr) cuResult
	cuEventSynchronize        func(event uintptr) cuResult
	cuEventElapsedTime        func(ms *float32, start, end uintptr) cuResult
	cuGetErrorName            func(code cuResult, name **byte) cuResult
)

// symbols lists every function bound, by symbol name. Loading fails,
// before any is bound, when one is missing.
var symbols = []struct {
	name string
	fn   any // pointer to one of the variables above
}{
	{"cuInit", &cuInit},
	{"cuDriverGetVersion", &cuDriverGetVersion},
	{"cuDeviceGetCount", &cuDeviceGetCount},
	{"cuDeviceGet", &cuDeviceGet},
	{"cuDeviceGetName", &cuDeviceGetName},
	{"cuDeviceTotalMem_v2", &cuDeviceTotalMem},
	{"cuDevicePrimaryCtxRetain", &cuDevicePrimaryCtxRetain},
	{"cuDevicePrimaryCtxRelease_v2", &cuDevicePrimaryCtxRelease},
	{"cuCtxSetCurrent", &cuCtxSetCurrent},
	{"cuCtxSynchronize", &cuCtxSynchronize},
	{"cuMemAlloc_v2", &cuMemAlloc},
	{"cuMemFree_v2", &cuMemFree},
	{"cuMemAllocHost_v2", &cuMemAllocHost},
	{"cuMemFreeHost", &cuMemFreeHost},
	{"cuMemcpyHtoD_v2", &cuMemcpyHtoD},
	{"cuMemcpyDtoH_v2", &cuMemcpyDtoH},
	{"cuMemcpyHtoDAsync_v2", &cuMemcpyHtoDAsync},
	{"cuMemcpyDtoHAsync_v2", &cuMemcpyDtoHAsync},
	{"cuMemcpyDtoD_v2", &cuMemcpyDtoD},
	{"cuMemsetD8_v2", &cuMemsetD8},
	{"cuMemGetInfo_v2", &cuMemGetInfo},
	{"cuModuleLoadData", &cuModuleLoadData},
	{"cuModuleUnload", &cuModuleUnload},
	{"cuModuleGetFunction", &cuModuleGetFunction},
	{"cuLaunchKernel", &cuLaunchKernel},
	{"cuStreamCreate", &cuStreamCreate},
	{"cuStreamDestroy_v2", &cuStreamDestroy},
	{"cuStreamSynchronize", &cuStreamSynchronize},
	{"cuEventCreate", &cuEventCreate},
	{"cuEventDestroy_v2", &cuEventDestroy},
	{"cuEventRecord", &cuEventRecord},
	{"cuEventSynchronize", &cuEventSynchronize},
	{"cuEventElapsedTime", &cuEventElapsedTime},
	{"cuGetErrorName", &cuGetErrorName},
}

// libraryName is the driver library loaded: the one the NVIDIA driver
// installs (libcuda.so, without a version, comes only with the
// development files).
const libraryName = "libcuda.so.1"

// drv is the state of the driver, set once by load.
var drv struct {
	once    sync.Once
	err     error // nil when at least one device can be opened
	count   int   // devices, from cuDeviceGetCount
	version int   // from cuDriverGetVersion, e.g. 12020 for 12.2
}

// load opens the library, binds the symbols and initialises the driver.
func load() {
	if err := bind(); err != nil {
		drv.err = err
		return
	}
	var v int32
	if r := cuDriverGetVersion(&v); r == 0 {
		drv.version = int(v)
	}
	if err := check("cuInit", cuInit(0)); err != nil {
		drv.err = noDevice("", err)
		return
	}
	var n int32
	if err := check("cuDeviceGetCount", cuDeviceGetCount(&n)); err != nil {
		drv.err = noDevice("", err)
		return
	}
	if n <= 0 {
		drv.err = noDevice("the driver reports no device", nil)
		return
	}
	drv.count = int(n)
}

// Available reports whether a CUDA device can be opened: nil if so, and
// otherwise an error wrapping ErrNoDevice that says why, e.g.
//
//	gpu: no CUDA device: libcuda.so.1: cannot open shared object file: No such file or directory
//	gpu: no CUDA device: gpu: cuInit: CUDA_ERROR_NO_DEVICE (100)
//
// The library is loaded and cuInit called on the first call only; later
// calls return the same answer at once. It is safe for concurrent use.
func Available() error {
	drv.once.Do(load)
	return drv.err
}

// Count returns the number of CUDA devices, or Available's error.
func Count() (int, error) {
	if err := Available(); err != nil {
		return 0, err
	}
	return drv.count, nil
}

// missingSymbols is the error for a library that lacks some symbols.
func missingSymbols(names []string) error {
	return noDevice(fmt.Sprintf("%s lacks %v (a driver too old for this package)", libraryName, names), nil)
}

// goString copies a NUL-terminated C string of at most max bytes.
func goString(p *byte, max int) string {
	if p == nil {
		return ""
	}
	b := make([]byte, 0, 32)
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
