package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Device is an open CUDA device: its primary context, made current on
// one OS thread that runs every driver call of the Device, and the
// resources allocated through it, which Close frees.
//
// A Device is safe for concurrent use; its calls run one at a time, in
// the order they reach its worker goroutine.
type Device struct {
	ordinal int
	dev     int32 // CUdevice
	name    string
	total   uint64
	ctx     uintptr // CUcontext: the primary context, retained once

	mu     sync.RWMutex // guards closed and the sends on work
	closed bool
	work   chan call
	done   chan struct{} // closed when the worker has ended
	err    error         // Close's result, set by the worker before done
	trips  atomic.Uint64 // calls handed to the worker (do): each a round trip of some microseconds

	// Touched only on the worker goroutine.
	allocs  map[Ptr]uintptr // device allocations and their sizes
	hosts   map[unsafe.Pointer]uintptr
	streams map[*Stream]struct{}
	events  map[*Event]struct{}
	modules map[*Module]struct{}

	kern ops // the embedded kernels, loaded on first use (ops.go)
}

// call is one closure for the worker and where its result goes.
type call struct {
	f    func() error
	done chan error
}

// Open opens the device of the given ordinal (0 for the first): it
// starts the Device's worker goroutine, locks it to its OS thread,
// retains the device's primary context and makes it current there.
// It returns an error wrapping ErrNoDevice when no device can be used
// (Available's error) or the ordinal is out of range, and a driver error
// (*Error) when the context cannot be set up. Every Device must be
// closed.
func Open(ordinal int) (*Device, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= drv.count {
		return nil, noDevice(fmt.Sprintf("ordinal %d out of range (%d devices)", ordinal, drv.count), nil)
	}
	d := &Device{
		ordinal: ordinal,
		work:    make(chan call),
		done:    make(chan struct{}),
		allocs:  map[Ptr]uintptr{},
		hosts:   map[unsafe.Pointer]uintptr{},
		streams: map[*Stream]struct{}{},
		events:  map[*Event]struct{}{},
		modules: map[*Module]struct{}{},
	}
	started := make(chan error, 1)
	go d.run(started)
	if err := <-started; err != nil {
		<-d.done
		return nil, err
	}
	return d, nil
}

// run is the worker goroutine: it owns the OS thread on which the
// context is current.
func (d *Device) run(started chan<- error) {
	defer close(d.done)
	runtime.LockOSThread()
	// A thread whose context could not be detached ends with the
	// goroutine (a locked goroutine that exits takes its thread along);
	// a clean one goes back to the scheduler.
	detached := false
	defer func() {
		if detached {
			runtime.UnlockOSThread()
		}
	}()
	if err := d.setup(); err != nil {
		detached = true // setup leaves no context current when it fails
		started <- err
		return
	}
	started <- nil
	for c := range d.work {
		c.done <- protect(c.f)
	}
	detached, d.err = d.teardown()
}

// setup gets the device, its name and memory, and makes its primary
// context current on this thread.
func (d *Device) setup() error {
	wrap := func(err error) error {
		var e *Error
		if errors.As(err, &e) && unusableCodes[e.Code] {
			return noDevice(fmt.Sprintf("device %d: %v", d.ordinal, err), err)
		}
		return err
	}
	if err := check("cuDeviceGet", cuDeviceGet(&d.dev, int32(d.ordinal))); err != nil {
		return wrap(err)
	}
	var name [256]byte
	if err := check("cuDeviceGetName", cuDeviceGetName(&name[0], int32(len(name)), d.dev)); err != nil {
		return wrap(err)
	}
	d.name = cString(name[:])
	var total uintptr
	if err := check("cuDeviceTotalMem_v2", cuDeviceTotalMem(&total, d.dev)); err != nil {
		return wrap(err)
	}
	d.total = uint64(total)
	if err := check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return wrap(err)
	}
	if err := check("cuCtxSetCurrent", cuCtxSetCurrent(d.ctx)); err != nil {
		err = wrap(err)
		if rerr := check("cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease(d.dev)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

// teardown runs when the work channel is closed: it waits for the
// device, frees what is still tracked, detaches the context from this
// thread and releases it. It reports whether the context was detached.
func (d *Device) teardown() (detached bool, err error) {
	var errs errorList
	errs.add(check("cuCtxSynchronize", cuCtxSynchronize()))
	for e := range d.events {
		errs.add(check("cuEventDestroy_v2", cuEventDestroy(e.h)))
		e.h = 0
	}
	for s := range d.streams {
		errs.add(check("cuStreamDestroy_v2", cuStreamDestroy(s.h)))
		s.h = 0
	}
	for m := range d.modules {
		errs.add(check("cuModuleUnload", cuModuleUnload(m.h)))
		m.h = 0
	}
	for p := range d.allocs {
		errs.add(check("cuMemFree_v2", cuMemFree(uint64(p))))
	}
	for p := range d.hosts {
		errs.add(check("cuMemFreeHost", cuMemFreeHost(p)))
	}
	clear(d.events)
	clear(d.streams)
	clear(d.modules)
	clear(d.allocs)
	clear(d.hosts)
	detached = true
	if err := check("cuCtxSetCurrent", cuCtxSetCurrent(0)); err != nil {
		errs.add(err)
		detached = false
	}
	errs.add(check("cuDevicePrimaryCtxRelease_v2", cuDevicePrimaryCtxRelease(d.dev)))
	return detached, errs.err()
}

// protect runs f, turning a panic into an error so that the worker
// survives it.
func protect(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gpu: panic in a driver call: %v", r)
		}
	}()
	return f()
}

// do runs f on the worker goroutine, where the context is current, and
// returns its result; ErrClosed once Close has begun. f must not call do.
func (d *Device) do(f func() error) error {
	if d == nil || d.work == nil {
		return errNotOpened
	}
	d.trips.Add(1)
	c := call{f: f, done: make(chan error, 1)}
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return ErrClosed
	}
	d.work <- c
	d.mu.RUnlock()
	return <-c.done
}

// errNotOpened is what a Device that Open did not return answers (a zero
// Device, or a Stream, Event or Module not made by a Device).
var errNotOpened = errors.New("gpu: Device not opened with Open")

// open returns ErrClosed after Close, nil before: what a call that has
// nothing to do returns.
func (d *Device) open() error {
	if d == nil || d.work == nil {
		return errNotOpened
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	return nil
}

// Close waits for the calls under way, then synchronises the device,
// destroys the events and streams, unloads the modules, frees the device
// and pinned host memory that the Device still tracks, and releases the
// primary context; its worker goroutine ends. It returns the first
// errors met on the way (everything is released regardless). Calls made
// after Close return ErrClosed; a second Close returns nil.
func (d *Device) Close() error {
	if d == nil || d.work == nil {
		return errNotOpened
	}
	d.mu.Lock()
	first := !d.closed
	if first {
		d.closed = true
		close(d.work)
	}
	d.mu.Unlock()
	<-d.done
	if !first {
		return nil
	}
	return d.err
}

// Synchronize waits until the device has completed all work submitted
// through its context (cuCtxSynchronize). Errors of kernels launched
// earlier surface here.
func (d *Device) Synchronize() error {
	return d.do(func() error { return check("cuCtxSynchronize", cuCtxSynchronize()) })
}

// Name returns the device's name, e.g. "NVIDIA H100 80GB HBM3".
func (d *Device) Name() string { return d.name }

// Ordinal returns the ordinal the Device was opened with.
func (d *Device) Ordinal() int { return d.ordinal }

// TotalMem returns the device's memory in bytes.
func (d *Device) TotalMem() uint64 { return d.total }

// DriverVersion returns the CUDA version of the driver, 1000×major +
// 10×minor (12020 for 12.2); 0 if the driver did not say.
func (d *Device) DriverVersion() int { return drv.version }

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// errorList keeps the first few errors of a sequence of calls and counts
// the rest.
type errorList struct {
	errs []error
	more int
}

const maxListed = 4

func (l *errorList) add(err error) {
	switch {
	case err == nil:
	case len(l.errs) < maxListed:
		l.errs = append(l.errs, err)
	default:
		l.more++
	}
}

func (l *errorList) err() error {
	if l.more > 0 {
		return errors.Join(append(l.errs, fmt.Errorf("gpu: and %d more errors", l.more))...)
	}
	return errors.Join(l.errs...)
}
