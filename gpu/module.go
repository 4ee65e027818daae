package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Module is a loaded PTX (or cubin, or fatbin) image of a Device.
type Module struct {
	d *Device
	h uintptr // CUmodule; 0 once unloaded. On the worker only.
}

// Function is a kernel of a Module, found by name.
type Function struct {
	m    *Module
	h    uintptr // CUfunction
	name string
}

// LoadModule loads an image into the Device's context
// (cuModuleLoadData): PTX text, which the driver compiles for the device
// at this point, or a cubin or fatbin. The image is copied and a NUL byte
// appended, as the driver reads PTX as a C string; ptx is not retained.
// A PTX error gives CUDA_ERROR_INVALID_PTX (218), a PTX version newer
// than the driver's CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222). The module
// is the Device's until its Close or the Device's.
func (d *Device) LoadModule(ptx []byte) (*Module, error) {
	if len(ptx) == 0 {
		return nil, errors.New("gpu: LoadModule: empty image")
	}
	img := make([]byte, len(ptx)+1)
	copy(img, ptx)
	m := &Module{d: d}
	err := d.do(func() error {
		if err := check("cuModuleLoadData", cuModuleLoadData(&m.h, unsafe.Pointer(&img[0]))); err != nil {
			return err
		}
		d.modules[m] = struct{}{}
		return nil
	})
	runtime.KeepAlive(img)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Function finds the kernel named name (its mangled name for C++; the
// .entry name in PTX) (cuModuleGetFunction). A name that is not there
// gives CUDA_ERROR_NOT_FOUND (500).
func (m *Module) Function(name string) (*Function, error) {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("gpu: Function: bad kernel name %q", name)
	}
	cname := append([]byte(name), 0)
	f := &Function{m: m, name: name}
	err := m.d.do(func() error {
		if m.h == 0 {
			return ErrClosed
		}
		return check("cuModuleGetFunction", cuModuleGetFunction(&f.h, m.h, &cname[0]))
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Close unloads the module (cuModuleUnload); its Functions cannot be
// launched afterwards. Closing it again, or after the Device's Close,
// returns nil.
func (m *Module) Close() error {
	err := m.d.do(func() error {
		if m.h == 0 {
			return nil
		}
		err := check("cuModuleUnload", cuModuleUnload(m.h))
		delete(m.d.modules, m)
		m.h = 0
		return err
	})
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// Launch queues kernel f on stream s (nil: the default stream) with a
// grid of grid[0]×grid[1]×grid[2] blocks of block[0]×block[1]×block[2]
// threads and sharedBytes of dynamic shared memory per block
// (cuLaunchKernel). It returns once the launch is queued; errors of the
// kernel itself surface at the next synchronisation.
//
// args are the kernel's parameters, in order, each of one of the types
// Ptr, uintptr, int32, uint32, int64, uint64, float32 or float64, which
// must match the kernel's parameter types (the driver does not check:
// a Ptr or uintptr is a 64-bit parameter, a pointer in the kernel).
// Another type (int among them: say int32 or int64) is an error, and
// nothing is launched.
func (d *Device) Launch(f *Function, grid, block [3]uint32, sharedBytes uint32, s *Stream, args ...any) error {
	if f == nil || f.m == nil {
		return errors.New("gpu: Launch: nil function")
	}
	if f.m.d != d {
		return errors.New("gpu: Launch: a function of another Device")
	}
	if err := d.owns(s); err != nil {
		return err
	}
	vals, err := packArgs(args)
	if err != nil {
		return err
	}
	return d.do(func() error {
		if f.m.h == 0 {
			return fmt.Errorf("gpu: Launch %s: %w (module unloaded)", f.name, ErrClosed)
		}
		h, err := s.handle()
		if err != nil {
			return err
		}
		return launch(f.h, grid, block, sharedBytes, h, vals)
	})
}

// launch calls cuLaunchKernel with kernelParams pointing at vals: an
// array of pointers, one per parameter, to the parameter's value. vals
// is pinned (the collector neither moves nor frees it, and it is on the
// heap) until the call returns, by which time the driver has copied the
// values.
func launch(fn uintptr, grid, block [3]uint32, sharedBytes uint32, stream uintptr, vals []uint64) error {
	var params unsafe.Pointer
	var ptrs []uintptr
	if len(vals) > 0 {
		var pin runtime.Pinner
		pin.Pin(&vals[0])
		defer pin.Unpin()
		ptrs = make([]uintptr, len(vals))
		for i := range vals {
			ptrs[i] = uintptr(unsafe.Pointer(&vals[i]))
		}
		params = unsafe.Pointer(&ptrs[0])
	}
	r := cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], sharedBytes, stream, params, nil)
	runtime.KeepAlive(vals)
	runtime.KeepAlive(ptrs)
	return check("cuLaunchKernel", r)
}

// packArgs stores each argument in an 8-byte slot of its own, at the
// slot's start, in its kernel representation (what the parameter's C
// type holds): the driver copies as many bytes from the slot as the
// kernel's parameter has.
func packArgs(args []any) ([]uint64, error) {
	vals := make([]uint64, len(args))
	for i, a := range args {
		p := unsafe.Pointer(&vals[i])
		switch v := a.(type) {
		case Ptr:
			*(*uint64)(p) = uint64(v)
		case uintptr:
			*(*uint64)(p) = uint64(v)
		case int32:
			*(*int32)(p) = v
		case uint32:
			*(*uint32)(p) = v
		case int64:
			*(*int64)(p) = v
		case uint64:
			*(*uint64)(p) = v
		case float32:
			*(*float32)(p) = v
		case float64:
			*(*float64)(p) = v
		case int:
			return nil, fmt.Errorf("gpu: Launch: argument %d is an int: convert it to int32 or int64, the kernel parameter's width", i)
		default:
			return nil, fmt.Errorf("gpu: Launch: argument %d has unsupported type %T (want Ptr, uintptr, int32, uint32, int64, uint64, float32 or float64)", i, a)
		}
	}
	return vals, nil
}
