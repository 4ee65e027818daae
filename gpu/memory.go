package gpu

import (
	"errors"
	"fmt"
	"unsafe"
)

// Ptr is a device address (CUdeviceptr). Address arithmetic is allowed
// (p + Ptr(offset)), but only the addresses Alloc returned may be freed.
// The zero Ptr is what Alloc(0) returns; Free(0) does nothing.
type Ptr uintptr

// Alloc allocates n bytes of device memory (cuMemAlloc_v2), aligned to at
// least 256 bytes, not initialised. Alloc(0) returns 0 and no error. The
// allocation is the Device's until Free or Close. When the device is
// full the error matches ErrOutOfMemory.
func (d *Device) Alloc(n int) (Ptr, error) {
	if n < 0 {
		return 0, fmt.Errorf("gpu: Alloc: negative size %d", n)
	}
	if n == 0 {
		return 0, d.open()
	}
	var p uint64
	err := d.do(func() error {
		if err := check("cuMemAlloc_v2", cuMemAlloc(&p, uintptr(n))); err != nil {
			return err
		}
		d.allocs[Ptr(p)] = uintptr(n)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return Ptr(p), nil
}

// Free frees an allocation that Alloc returned (cuMemFree_v2). Free(0)
// does nothing. An address that is not an allocation of this Device, or
// is freed already, is refused without calling the driver (see Error).
func (d *Device) Free(p Ptr) error {
	if p == 0 {
		return d.open()
	}
	return d.do(func() error {
		if _, ok := d.allocs[p]; !ok {
			return newError("cuMemFree_v2", codeInvalidValue)
		}
		if err := check("cuMemFree_v2", cuMemFree(uint64(p))); err != nil {
			return err
		}
		delete(d.allocs, p)
		return nil
	})
}

// CopyHtoD copies src to device memory at dst (cuMemcpyHtoD_v2) and
// returns when src may be reused. An empty src does nothing.
func (d *Device) CopyHtoD(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return d.open()
	}
	return d.do(func() error {
		return check("cuMemcpyHtoD_v2", cuMemcpyHtoD(uint64(dst), unsafe.Pointer(unsafe.SliceData(src)), uintptr(len(src))))
	})
}

// CopyDtoH copies len(dst) bytes of device memory at src to dst
// (cuMemcpyDtoH_v2) and returns when they are there. An empty dst does
// nothing.
func (d *Device) CopyDtoH(dst []byte, src Ptr) error {
	if len(dst) == 0 {
		return d.open()
	}
	return d.do(func() error {
		return check("cuMemcpyDtoH_v2", cuMemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), uint64(src), uintptr(len(dst))))
	})
}

// CopyDtoD copies n bytes of device memory from src to dst
// (cuMemcpyDtoD_v2); the copy is ordered after the work submitted before
// it and may still run when CopyDtoD returns (Synchronize waits for it).
// n == 0 does nothing.
func (d *Device) CopyDtoD(dst, src Ptr, n int) error {
	if n < 0 {
		return fmt.Errorf("gpu: CopyDtoD: negative size %d", n)
	}
	if n == 0 {
		return d.open()
	}
	return d.do(func() error {
		return check("cuMemcpyDtoD_v2", cuMemcpyDtoD(uint64(dst), uint64(src), uintptr(n)))
	})
}

// Memset sets n bytes of device memory at p to b (cuMemsetD8_v2),
// ordered like CopyDtoD. n == 0 does nothing.
func (d *Device) Memset(p Ptr, b byte, n int) error {
	if n < 0 {
		return fmt.Errorf("gpu: Memset: negative size %d", n)
	}
	if n == 0 {
		return d.open()
	}
	return d.do(func() error {
		return check("cuMemsetD8_v2", cuMemsetD8(uint64(p), b, uintptr(n)))
	})
}

// MemInfo returns the device memory free and in total, in bytes, as the
// driver sees it (cuMemGetInfo_v2): other processes' use counts.
func (d *Device) MemInfo() (free, total uint64, err error) {
	err = d.do(func() error {
		var f, t uintptr
		if err := check("cuMemGetInfo_v2", cuMemGetInfo(&f, &t)); err != nil {
			return err
		}
		free, total = uint64(f), uint64(t)
		return nil
	})
	return free, total, err
}

// AllocHost allocates n bytes of page-locked host memory
// (cuMemAllocHost_v2), which the device reaches by DMA: the only host
// memory CopyHtoDAsync and CopyDtoHAsync take; the synchronous copies are
// faster from it too. The slice is C memory, not
// Go memory: it is the Device's until FreeHost or Close, and must not be
// used after either. AllocHost(0) returns nil and no error.
func (d *Device) AllocHost(n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("gpu: AllocHost: negative size %d", n)
	}
	if n == 0 {
		return nil, d.open()
	}
	var b []byte
	err := d.do(func() error {
		var p unsafe.Pointer
		if err := check("cuMemAllocHost_v2", cuMemAllocHost(&p, uintptr(n))); err != nil {
			return err
		}
		d.hosts[p] = uintptr(n)
		b = unsafe.Slice((*byte)(p), n)
		return nil
	})
	return b, err
}

// FreeHost frees a buffer that AllocHost returned (cuMemFreeHost): the
// slice as returned or any slice of it that starts at its first byte.
// An empty slice does nothing; any other is refused without calling the
// driver (see Error).
func (d *Device) FreeHost(b []byte) error {
	if cap(b) == 0 {
		return d.open()
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	return d.do(func() error {
		if _, ok := d.hosts[p]; !ok {
			return newError("cuMemFreeHost", codeInvalidValue)
		}
		if err := check("cuMemFreeHost", cuMemFreeHost(p)); err != nil {
			return err
		}
		delete(d.hosts, p)
		return nil
	})
}

// CopyHtoDAsync queues a copy of src to device memory at dst on stream s
// (nil: the default stream) (cuMemcpyHtoDAsync_v2) and returns without
// waiting for it: src must stay unchanged until the stream is
// synchronised. src must lie in a buffer from this Device's AllocHost
// (the driver gives no lasting guarantee for asynchronous copies from
// pageable memory, and the Go collector may reuse it); other memory is
// refused. An empty src does nothing.
func (d *Device) CopyHtoDAsync(dst Ptr, src []byte, s *Stream) error {
	if err := d.owns(s); err != nil {
		return err
	}
	if len(src) == 0 {
		return d.open()
	}
	return d.do(func() error {
		h, err := s.handle()
		if err != nil {
			return err
		}
		if !d.pinned(src) {
			return errNotPinned("CopyHtoDAsync")
		}
		return check("cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync(uint64(dst), unsafe.Pointer(unsafe.SliceData(src)), uintptr(len(src)), h))
	})
}

// CopyDtoHAsync queues a copy of len(dst) bytes of device memory at src
// to dst on stream s (nil: the default stream) (cuMemcpyDtoHAsync_v2) and
// returns without waiting for it: dst holds the bytes once the stream is
// synchronised. dst must lie in a buffer from this Device's AllocHost;
// other memory is refused. An empty dst does nothing.
func (d *Device) CopyDtoHAsync(dst []byte, src Ptr, s *Stream) error {
	if err := d.owns(s); err != nil {
		return err
	}
	if len(dst) == 0 {
		return d.open()
	}
	return d.do(func() error {
		h, err := s.handle()
		if err != nil {
			return err
		}
		if !d.pinned(dst) {
			return errNotPinned("CopyDtoHAsync")
		}
		return check("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), uint64(src), uintptr(len(dst)), h))
	})
}

// pinned reports whether b lies within one buffer that AllocHost
// returned and FreeHost has not freed. On the worker only.
func (d *Device) pinned(b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	for p, n := range d.hosts {
		base := uintptr(p)
		if base <= lo && hi <= base+n {
			return true
		}
	}
	return false
}

// ErrNotPinned is returned by the asynchronous copies for a host buffer
// that is not from the device's AllocHost (or was freed).
var ErrNotPinned = errors.New("the host buffer is not from this device's AllocHost (or was freed)")

func errNotPinned(call string) error {
	return fmt.Errorf("gpu: %s: %w", call, ErrNotPinned)
}
