package gpu

import (
	"fmt"
	"unsafe"
)

// A batch is driver calls on one stream made in one trip to the Device's
// worker: kernel launches, copies of device memory into pinned host
// memory, a wait for the stream. Each trip (Device.do) hands the call to
// the worker's OS thread and back, 15-18 µs on a two-core machine: more
// than a small kernel runs, and a selection makes dozens of calls. A
// launch's arguments are taken when it is added, so the memory they name
// must stay allocated until the batch runs. The first failing call ends
// the batch; run reports it.
type batch struct {
	d   *Device
	s   *Stream
	ops []func(h uintptr) error
	err error // from adding: a kernel not found, an argument of the wrong type
}

// launch adds kernel name on blocks blocks of threads threads.
func (b *batch) launch(name string, blocks uint32, args ...any) {
	if b.err != nil {
		return
	}
	f, err := b.d.kernel(name)
	if err == nil && f == nil {
		err = fmt.Errorf("gpu: no kernel %s", name)
	}
	var vals []uint64
	if err == nil {
		vals, err = packArgs(args)
	}
	if err != nil {
		b.err = err
		return
	}
	b.ops = append(b.ops, func(h uintptr) error {
		if f.m.h == 0 {
			return fmt.Errorf("gpu: Launch %s: %w (module unloaded)", f.name, ErrClosed)
		}
		return launch(f.h, [3]uint32{blocks, 1, 1}, [3]uint32{threads, 1, 1}, 0, h, vals)
	})
}

// copyDtoH adds an asynchronous copy of len(dst) bytes at src into dst,
// which AllocHost returned.
func (b *batch) copyDtoH(dst []byte, src Ptr) {
	if len(dst) == 0 {
		return
	}
	b.ops = append(b.ops, func(h uintptr) error {
		if !b.d.pinned(dst) {
			return errNotPinned("CopyDtoHAsync")
		}
		return check("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), uint64(src), uintptr(len(dst)), h))
	})
}

// wait adds a wait for the stream's work (the context's, for the nil
// stream, as Device.Synchronize).
func (b *batch) wait() {
	b.ops = append(b.ops, func(h uintptr) error {
		if b.s == nil {
			return check("cuCtxSynchronize", cuCtxSynchronize())
		}
		return check("cuStreamSynchronize", cuStreamSynchronize(h))
	})
}

// run makes the calls added since the last run, in order, in one trip.
func (b *batch) run() error {
	ops, err := b.ops, b.err
	b.ops, b.err = b.ops[:0], nil
	defer clear(ops) // the calls' arguments and buffers: not kept
	if err != nil || len(ops) == 0 {
		return err
	}
	if err := b.d.owns(b.s); err != nil {
		return err
	}
	return b.d.do(func() error {
		h, err := b.s.handle()
		if err != nil {
			return err
		}
		for _, op := range ops {
			if err := op(h); err != nil {
				return err
			}
		}
		return nil
	})
}

// take adds Device.Take: dst[j] = src[idx[j]] for j < k.
func (b *batch) take(dst, src, idx Ptr, k int) {
	if k > 0 {
		b.launch("tp_take", grid(k), src, idx, uint64(k), dst)
	}
}

// put adds Device.Put: dst[idx[j]] = src[j] for j < k.
func (b *batch) put(dst, idx, src Ptr, k int) {
	if k > 0 {
		b.launch("tp_put", grid(k), dst, idx, uint64(k), src)
	}
}

// scatterZero adds Device.ScatterZero: res[idx[j]] = 0 for j < k.
func (b *batch) scatterZero(res, idx Ptr, k int) {
	if k > 0 {
		b.launch("tp_scatter_zero", grid(k), res, idx, uint64(k))
	}
}

// zeroNonFinite adds Device.ZeroNonFinite: the NaNs and infinities of c
// (n float32) zeroed.
func (b *batch) zeroNonFinite(c Ptr, n int) {
	b.launch("tp_nonfinite_zero", grid(n), c, uint64(n))
}
