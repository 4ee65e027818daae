package gpu

import (
	"errors"
	"time"
)

// Stream is a CUDA stream of a Device: work queued on it runs in order,
// and may overlap work on other streams. Where a method takes a *Stream,
// nil means the default stream, which a Stream (made with
// CU_STREAM_DEFAULT) synchronises with.
type Stream struct {
	d *Device
	h uintptr // CUstream; 0 once destroyed. On the worker only.
}

// NewStream creates a stream (cuStreamCreate, flags CU_STREAM_DEFAULT).
// It is the Device's until its Close or the Device's.
func (d *Device) NewStream() (*Stream, error) {
	s := &Stream{d: d}
	err := d.do(func() error {
		if err := check("cuStreamCreate", cuStreamCreate(&s.h, 0)); err != nil {
			return err
		}
		d.streams[s] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Synchronize waits until the work queued on s has completed
// (cuStreamSynchronize).
func (s *Stream) Synchronize() error {
	return s.d.do(func() error {
		if s.h == 0 {
			return ErrClosed
		}
		return check("cuStreamSynchronize", cuStreamSynchronize(s.h))
	})
}

// Close destroys the stream (cuStreamDestroy_v2); work queued on it still
// completes. Closing it again, or after the Device's Close (which
// destroyed it), returns nil.
func (s *Stream) Close() error {
	err := s.d.do(func() error {
		if s.h == 0 {
			return nil
		}
		err := check("cuStreamDestroy_v2", cuStreamDestroy(s.h))
		delete(s.d.streams, s)
		s.h = 0
		return err
	})
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// handle returns the CUstream of s, 0 for nil. On the worker only.
func (s *Stream) handle() (uintptr, error) {
	if s == nil {
		return 0, nil
	}
	if s.h == 0 {
		return 0, ErrClosed
	}
	return s.h, nil
}

// owns checks that s is nil or a stream of d.
func (d *Device) owns(s *Stream) error {
	if s != nil && s.d != d {
		return errors.New("gpu: a stream of another Device")
	}
	return nil
}

// Event is a CUDA event of a Device (made with CU_EVENT_DEFAULT, so it
// records time): a point in a stream's work that the host can wait for
// and time.
type Event struct {
	d *Device
	h uintptr // CUevent; 0 once destroyed. On the worker only.
}

// NewEvent creates an event (cuEventCreate). It is the Device's until
// its Close or the Device's.
func (d *Device) NewEvent() (*Event, error) {
	e := &Event{d: d}
	err := d.do(func() error {
		if err := check("cuEventCreate", cuEventCreate(&e.h, 0)); err != nil {
			return err
		}
		d.events[e] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Record queues the event on stream s (nil: the default stream)
// (cuEventRecord): it completes when the work queued before it has.
func (e *Event) Record(s *Stream) error {
	if err := e.d.owns(s); err != nil {
		return err
	}
	return e.d.do(func() error {
		if e.h == 0 {
			return ErrClosed
		}
		h, err := s.handle()
		if err != nil {
			return err
		}
		return check("cuEventRecord", cuEventRecord(e.h, h))
	})
}

// Synchronize waits until the event has completed (cuEventSynchronize).
func (e *Event) Synchronize() error {
	return e.d.do(func() error {
		if e.h == 0 {
			return ErrClosed
		}
		return check("cuEventSynchronize", cuEventSynchronize(e.h))
	})
}

// Close destroys the event (cuEventDestroy_v2). Closing it again, or
// after the Device's Close, returns nil.
func (e *Event) Close() error {
	err := e.d.do(func() error {
		if e.h == 0 {
			return nil
		}
		err := check("cuEventDestroy_v2", cuEventDestroy(e.h))
		delete(e.d.events, e)
		e.h = 0
		return err
	})
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Elapsed returns the time between two recorded, completed events of the
// same Device (cuEventElapsedTime: milliseconds as a float32, resolution
// about half a microsecond). An event not yet completed gives
// CUDA_ERROR_NOT_READY (600); synchronise end first.
func Elapsed(start, end *Event) (time.Duration, error) {
	if start == nil || end == nil {
		return 0, errors.New("gpu: Elapsed: nil event")
	}
	if start.d != end.d {
		return 0, errors.New("gpu: Elapsed: events of two Devices")
	}
	var ms float32
	err := start.d.do(func() error {
		if start.h == 0 || end.h == 0 {
			return ErrClosed
		}
		return check("cuEventElapsedTime", cuEventElapsedTime(&ms, start.h, end.h))
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
