package cabi

import (
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// sender is a gradient.Outbox over its own Memory, with the spec it was
// made with; its mutex serializes the calls on one handle.
type sender struct {
	mu    sync.Mutex
	ob    *gradient.Outbox
	spec  *gradient.Spec
	specs map[string]*gradient.Spec // other specs passed to compress, by text
}

// SpecCheck parses a gradient compressor spec.
func SpecCheck(p *byte, n int64) (code int32, msg string) {
	defer guard(&code, &msg)
	if _, err := gradient.Parse(str(p, n)); err != nil {
		return ERECIPE, err.Error()
	}
	return OK, ""
}

// SenderNew makes a Sender for the spec at p.
func SenderNew(p *byte, n int64) (h uint64, code int32, msg string) {
	defer guard(&code, &msg)
	spec, err := gradient.Parse(strings.Clone(str(p, n)))
	if err != nil {
		return 0, ERECIPE, err.Error()
	}
	return newHandle(&sender{ob: gradient.NewOutbox(gradient.NewMemory()), spec: spec, specs: map[string]*gradient.Spec{}}), OK, ""
}

// withSender runs f on sender h, holding its lock.
func withSender(h uint64, f func(s *sender) error) (code int32, msg string) {
	defer guard(&code, &msg)
	s, err := lookup[*sender](h, "sender")
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := f(s); err != nil {
		return fail(err)
	}
	return OK, ""
}

// SenderCompress compresses tensor t (float32, whole) with the sender's
// spec, or the spec at sp when given, at density (0: the spec's own), and
// writes the frame into out. The update is pending until SenderCommit or
// SenderAbort.
func SenderCompress(h uint64, t *Tensor, sp *byte, sn int64, density float64, out unsafe.Pointer, cap int64) (n int64, spill uint64, code int32, msg string) {
	code, msg = withSender(h, func(s *sender) error {
		ct, err := t.view()
		if err != nil {
			return err
		}
		if ct.DType != codec.F32 {
			return argErrorf("tensor %q is %v; gradient compressors take float32 (convert it)", ct.Name, ct.DType)
		}
		if density < 0 || density > 1 || math.IsNaN(density) {
			return argErrorf("tensor %q: density %v not in (0, 1]", ct.Name, density)
		}
		spec, err := s.specOf(str(sp, sn))
		if err != nil {
			return err
		}
		if s.ob.IsPending(ct.Name) {
			return codeErrorf(ESTATE, "tensorpress: tensor %q has an update pending: commit or abort it first", ct.Name)
		}
		b, err := s.ob.Append(outSlice(out, cap), ct, spec, density)
		if err != nil {
			return named(ct.Name, err)
		}
		n, spill = finish(b, out)
		return nil
	})
	return n, spill, code, msg
}

// specOf is the sender's spec, or the one text names (parsed once).
func (s *sender) specOf(text string) (*gradient.Spec, error) {
	if text == "" {
		return s.spec, nil
	}
	spec := s.specs[text]
	if spec == nil {
		text = strings.Clone(text) // the Spec keeps substrings of it
		var err error
		if spec, err = gradient.Parse(text); err != nil {
			return nil, codeErrorf(ERECIPE, "%v", err)
		}
		if len(s.specs) >= recipeCacheSize {
			clear(s.specs)
		}
		s.specs[text] = spec
	}
	return spec, nil
}

// SenderPlan ranks the nup updates at ups (float32, whole: every tensor
// of one update) together for a spec that selects over the whole update,
// topk(r,model=on): the sender's spec, or the one at sp when given. Each
// tensor's next SenderCompress with that spec takes its share
// (gradient.Outbox.Plan); for other specs it does nothing.
func SenderPlan(h uint64, ups *Tensor, nup int32, sp *byte, sn int64) (code int32, msg string) {
	return withSender(h, func(s *sender) error {
		if nup < 0 || (nup > 0 && ups == nil) {
			return argErrorf("bad updates (%d)", nup)
		}
		ts := make([]*codec.Tensor, nup)
		for i, u := range unsafe.Slice(ups, int(nup)) {
			t, err := u.view()
			if err != nil {
				return err
			}
			if t.DType != codec.F32 {
				return argErrorf("tensor %q is %v; gradient compressors take float32 (convert it)", t.Name, t.DType)
			}
			ts[i] = t
		}
		spec, err := s.specOf(str(sp, sn))
		if err != nil {
			return err
		}
		return s.ob.Plan(ts, spec)
	})
}

// SenderCommit commits the n oldest pending updates (n < 0: all).
func SenderCommit(h uint64, n int32) (code int32, msg string) {
	return withSender(h, func(s *sender) error {
		p := s.ob.Pending()
		if n < 0 {
			n = int32(p)
		}
		if int(n) > p {
			return codeErrorf(ESTATE, "tensorpress: commit %d updates, %d pending", n, p)
		}
		s.ob.Accept(int(n))
		return nil
	})
}

// SenderAbort returns the pending updates (or the last one) to the
// residuals.
func SenderAbort(h uint64, lastOnly bool) (code int32, msg string) {
	return withSender(h, func(s *sender) error {
		if lastOnly {
			s.ob.AbortLast()
		} else {
			s.ob.Abort()
		}
		return nil
	})
}

// SenderPending is the number of pending updates.
func SenderPending(h uint64) (n int32, code int32, msg string) {
	code, msg = withSender(h, func(s *sender) error { n = int32(s.ob.Pending()); return nil })
	return n, code, msg
}

// SenderSetEpoch sets the epoch that compressors with warm-up read.
func SenderSetEpoch(h uint64, e float64) (code int32, msg string) {
	return withSender(h, func(s *sender) error { s.ob.SetEpoch(e); return nil })
}

// SenderState writes the sender's committed state (its Memory image) into
// out, spilling when it does not fit. It is refused while updates are
// pending: their state would be lost.
func SenderState(h uint64, out unsafe.Pointer, cap int64) (n int64, spill uint64, code int32, msg string) {
	code, msg = withSender(h, func(s *sender) error {
		if p := s.ob.Pending(); p > 0 {
			return codeErrorf(ESTATE, "tensorpress: %d updates pending: commit or abort them before saving the state", p)
		}
		img, err := s.ob.Memory().MarshalBinary()
		if err != nil {
			return err
		}
		b := append(outSlice(out, cap), img...)
		n, spill = finish(b, out)
		return nil
	})
	return n, spill, code, msg
}

// SenderLoadState replaces the sender's state by an image SenderState
// made. Refused while updates are pending; a bad image changes nothing.
func SenderLoadState(h uint64, p unsafe.Pointer, n int64) (code int32, msg string) {
	return withSender(h, func(s *sender) error {
		if k := s.ob.Pending(); k > 0 {
			return codeErrorf(ESTATE, "tensorpress: %d updates pending: commit or abort them before loading a state", k)
		}
		return s.ob.Memory().UnmarshalBinary(mem(p, n))
	})
}

// receiver is a gradient.Receiver; its mutex serializes the calls on one
// handle.
type receiver struct {
	mu sync.Mutex
	r  *gradient.Receiver
}

// ReceiverNew makes a Receiver with the limits lim (nil or zero fields:
// gradient.ReceiverLimits).
func ReceiverNew(lim *Limits) (h uint64, code int32, msg string) {
	defer guard(&code, &msg)
	r, err := gradient.NewReceiver(codec.WithLimits(lim.limits(gradient.ReceiverLimits())))
	if err != nil {
		return 0, EARG, err.Error()
	}
	return newHandle(&receiver{r: r}), OK, ""
}

// ReceiverAdd adds weight times every frame of the n bytes at src into the
// caller's accumulators: the one named as the tensor, else the one with no
// name; its shape must be the tensor's. consumed is the bytes of the
// frames added (a failing frame adds nothing; those before it stay added).
func ReceiverAdd(h uint64, src unsafe.Pointer, n int64, weight float32, accs *Acc, nacc int32) (consumed int64, code int32, msg string) {
	defer guard(&code, &msg)
	rc, err := lookup[*receiver](h, "receiver")
	if err != nil {
		code, msg = fail(err)
		return 0, code, msg
	}
	if nacc < 0 || (nacc > 0 && accs == nil) {
		return 0, EARG, argErrorf("bad accumulators (%d)", nacc).Error()
	}
	as := unsafe.Slice(accs, int(nacc))
	rc.mu.Lock()
	defer rc.mu.Unlock()
	b := mem(src, n)
	for len(b) > 0 {
		k, err := rc.r.Add(b, weight, func(name string, shape []int64) ([]float32, error) { return accFor(as, name, shape) })
		if err != nil {
			code, msg = fail(err)
			return consumed, code, msg
		}
		b, consumed = b[k:], consumed+int64(k)
	}
	return consumed, OK, ""
}

// accFor finds the accumulator of tensor name and checks its shape.
func accFor(as []Acc, name string, shape []int64) ([]float32, error) {
	var a *Acc
	for i := range as {
		if as[i].Name == nil {
			if a == nil {
				a = &as[i]
			}
		} else if str(as[i].Name, as[i].NameLen) == name {
			a = &as[i]
			break
		}
	}
	if a == nil {
		return nil, argErrorf("no accumulator for tensor %q", name)
	}
	got := shapeOf(a.Shape, a.NDim)
	ok := len(got) == len(shape)
	n := int64(1)
	for i, d := range shape {
		n *= d
		ok = ok && got[i] == d
	}
	if !ok || a.NElem != n || (n > 0 && a.Data == nil) {
		return nil, argErrorf("accumulator for tensor %q has shape %v, the frame's is %v", name, got, shape)
	}
	return unsafe.Slice(a.Data, int(n)), nil
}
