package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/internal/view"
)

// Sender is a gradient.Sender whose error feedback and selection run on a
// GPU: the residuals (and DGC's momentum) stay on the device across steps,
// and only the selected indices and values cross to the host, where the
// frame is built. Its frames are byte for byte those of a gradient.Sender
// with the same compressor and tail, given the same gradients, commits
// and aborts, so receivers need no GPU.
//
// It takes gradient.TopK and *gradient.DGC (clipping with momentum), and a tail
// that keeps the values exactly (no lossy stage); NewSender refuses the
// rest, for the CPU's Sender to take. Gradients come from host memory
// (Append: copied in straight from a buffer of the device's AllocHost, or
// else through a pinned buffer of the Sender's) or from device memory the
// caller owns (AppendDevice). A Sender is not safe for concurrent use.
type Sender struct {
	d     *Device
	comp  gradient.Compressor
	dgc   *gradient.DGC // comp, when DGC
	tail  *codec.Recipe
	enc   *codec.Encoder
	sel   *Selector
	epoch float64

	states  map[string]*devState
	pending []*devState

	packs bool // the tail starts with idx:delta,bitpack: done on the device

	// Scratch, grown to the largest tensor.
	capN     int
	g, smp   Ptr    // the gradient copied in; DGC's sample
	pack     Ptr    // the coded positions (5 bytes an element)
	packSize Ptr    // PackIndices's block sizes and offsets
	in, out  []byte // pinned: the gradient on its way in; values and positions back
	total    []byte // pinned: the coded positions' length read back
	phantom  []byte // the frame encoder's input: never read (gradient.Preselected)
	val      Ptr    // the selected values
}

// devState is one tensor's error-feedback state on the device.
type devState struct {
	name   string
	shape  []int64
	n      int
	res, c Ptr // the residual (valid once hasRes) and the compensated gradient
	hasRes bool
	u      Ptr // DGC's momentum (0 for TopK)
	idx    Ptr // the positions staged for Commit (capacity n)
	k      int
	saved  Ptr // u at the masked positions, for Abort (DGC)
	step   uint64
	busy   bool
}

// NewSender returns a Sender on d for compressor c. The tail is the
// gradient.DefaultTail of c unless tail is not nil.
func (d *Device) NewSender(c gradient.Compressor, tail *codec.Recipe) (*Sender, error) {
	s := &Sender{d: d, comp: c, tail: tail, states: map[string]*devState{}}
	switch c := c.(type) {
	case gradient.TopK:
	case *gradient.DGC:
		if c.Clip != 0 && c.Momentum == 0 {
			return nil, fmt.Errorf("%w: gpu: %v: clipping without momentum is not done on the GPU", codec.ErrUnsupported, c)
		}
		s.dgc = c
	default:
		return nil, fmt.Errorf("%w: gpu: %v runs on the CPU only (the GPU takes topk and dgc)", codec.ErrUnsupported, c)
	}
	if s.tail == nil {
		s.tail = gradient.DefaultTail(c)
	}
	if s.tail.Lossy() {
		return nil, fmt.Errorf("%w: gpu: tail %q is lossy: the GPU keeps the residual of exact values only", codec.ErrUnsupported, s.tail)
	}
	if st := s.tail.Steps; len(st) > 0 {
		sel, ops := st[0].Sel, st[0].Ops
		s.packs = !sel.Star && len(sel.Slots) == 1 && !sel.Slots[0].Ranged && sel.Slots[0].Name == "idx" &&
			len(ops) == 2 && ops[0].Stage().Name == "delta" && ops[1].Stage().Name == "bitpack"
	}
	var err error
	if s.enc, err = codec.NewEncoder(); err != nil {
		return nil, err
	}
	if s.sel, err = d.NewSelector(); err != nil {
		return nil, err
	}
	return s, nil
}

// SetEpoch sets the epoch for DGC's warm-up (gradient.Sender.SetEpoch).
func (s *Sender) SetEpoch(e float64) { s.epoch = e }

// Append is gradient.Sender.Append with the gradient in host memory.
func (s *Sender) Append(dst []byte, t *codec.Tensor) ([]byte, error) {
	if t.DType != codec.F32 {
		return dst, fmt.Errorf("%w: gpu: tensor %q is %v, want f32", codec.ErrUnsupported, t.Name, t.DType)
	}
	if err := t.Validate(); err != nil {
		return dst, err
	}
	if !t.IsWhole() {
		return dst, fmt.Errorf("gpu: tensor %q is a chunk; append whole tensors", t.Name)
	}
	n := len(t.Data) / 4
	if err := s.grow(n); err != nil {
		return dst, err
	}
	// Straight from the caller's buffer when it is pinned (AllocHost),
	// else through the Sender's, piece by piece: the copy of a piece to
	// the device overlaps the host's copy of the next into pinned memory.
	err := s.d.CopyHtoDAsync(s.g, t.Data, nil)
	if errors.Is(err, ErrNotPinned) {
		err = nil
		for off := 0; off < len(t.Data) && err == nil; off += stagePiece {
			end := min(off+stagePiece, len(t.Data))
			copy(s.in[off:end], t.Data[off:end])
			err = s.d.CopyHtoDAsync(s.g+Ptr(off), s.in[off:end], nil)
		}
	}
	if err != nil {
		return dst, err
	}
	return s.append(dst, t, n, s.g)
}

// stagePiece is the piece of a pageable gradient staged at a time.
const stagePiece = 8 << 20

// AppendDevice is Append of a gradient the caller holds on the device: n
// float32 at g (n the product of t.Shape; t.Data is not read and may be
// nil).
func (s *Sender) AppendDevice(dst []byte, t *codec.Tensor, g Ptr) ([]byte, error) {
	n := 1
	for _, d := range t.Shape {
		n *= int(d)
	}
	if t.DType != codec.F32 || n <= 0 {
		return dst, fmt.Errorf("gpu: AppendDevice: tensor %q: %v of shape %v", t.Name, t.DType, t.Shape)
	}
	if err := s.grow(n); err != nil {
		return dst, err
	}
	return s.append(dst, t, n, g)
}

// append codes the update of tensor t (n float32 at g on the device) in
// named steps: compensate, select, copy the selection to the host (with
// DGC's momentum masked), and frame it.
func (s *Sender) append(dst []byte, t *codec.Tensor, n int, g Ptr) ([]byte, error) {
	st, err := s.state(t.Name, t.Shape, n)
	if err != nil {
		return dst, err
	}
	if st.busy {
		return dst, fmt.Errorf("gpu: tensor %q appended twice before Commit or Abort", t.Name)
	}
	if err := s.compensate(st, g, n); err != nil {
		return dst, err
	}
	k, err := s.selectTop(st, t.Name, n)
	if err != nil {
		return dst, err
	}
	if 9*k+1024 > len(s.out) {
		return dst, fmt.Errorf("gpu: %d selected of %d elements", k, n)
	}
	packed, err := s.fetchSelection(st, k)
	if err != nil {
		return dst, err
	}
	val, _ := view.As[float32](s.out[:4*k])
	var out []byte
	nonFinite := codec.CheckFinite(1, val)
	if nonFinite != nil {
		err = fmt.Errorf("its frame would carry a NaN or an infinity, which receivers refuse: %w", nonFinite)
	} else {
		out, err = s.frame(dst, t, n, k, packed)
	}
	if err != nil {
		// The residual stays, as gradient.Sender's.
		if s.momentum() {
			q := &batch{d: s.d}
			q.put(st.u, st.idx, st.saved, k) // the step failed: u unmasked
			if nonFinite != nil {
				// DGC's momentum took the gradient in place: its NaNs and
				// infinities go, or every later update would carry them
				// (gradient.Sender keeps the momentum of before).
				q.zeroNonFinite(st.u, n)
			}
			q.run()
		}
		return dst, fmt.Errorf("gpu: %v on %q: %w", s.comp, t.Name, err)
	}
	st.k, st.busy = k, true
	s.pending = append(s.pending, st)
	return out, nil
}

// momentum reports whether the compressor is DGC with momentum
// correction.
func (s *Sender) momentum() bool { return s.dgc != nil && s.dgc.Momentum != 0 }

// compensate puts the compensated gradient in st.c: the residual plus g,
// or DGC's momentum correction of g (clipped first where it says).
func (s *Sender) compensate(st *devState, g Ptr, n int) error {
	var res Ptr
	if st.hasRes {
		res = st.res
	}
	switch {
	case s.momentum():
		scale := float32(1)
		if s.dgc.Clip > 0 {
			ss, err := s.d.SumSquares(g, n, gradient.ClipBlock, s.smp, nil)
			if err != nil {
				return err
			}
			if norm := math.Sqrt(ss); norm > float64(s.dgc.Clip) {
				scale = float32(float64(s.dgc.Clip) / norm)
			}
		}
		return s.d.DGCCompensate(st.c, st.u, g, res, n, s.dgc.Momentum, s.dgc.Nesterov, scale, nil)
	case st.hasRes:
		return s.d.AddF32(st.c, g, st.res, n, nil)
	}
	return s.d.CopyDtoD(st.c, g, 4*n)
}

// selectTop selects the largest magnitudes of st.c into st.idx and
// s.val: DGC's sampled threshold or the exact top k. It returns how many.
func (s *Sender) selectTop(st *devState, name string, n int) (int, error) {
	if s.dgc != nil {
		k := gradient.K(s.dgc.Density(s.epoch), n)
		return s.sel.Sampled(st.idx, s.val, st.c, n, k, s.dgc.SampleOptions(name, st.step), s.smp, nil)
	}
	k := gradient.K(s.comp.(gradient.TopK).Density(s.epoch), n)
	return k, s.sel.Exact(st.idx, s.val, st.c, n, k, nil)
}

// fetchSelection copies the k values, and the positions, to s.out: the
// positions coded on the device where the tail codes them with delta and
// bitpack first (about half the bytes to copy, and the host's coding of
// them done; packed is their length), else as they are (packed -1). DGC's
// momentum is masked at the positions meanwhile (undone on Abort). It
// returns when the copies are done.
func (s *Sender) fetchSelection(st *devState, k int) (packed int, err error) {
	// Two trips to the device's worker (batch): the positions coded and
	// their length read back, then the copies, the masking and the wait.
	q := &batch{d: s.d}
	packed = -1
	if s.packs {
		if packed, err = s.d.packIndices(q, s.pack, st.idx, k, s.packSize, s.total); err != nil {
			return 0, err
		}
	}
	q.copyDtoH(s.out[:4*k], s.val)
	if packed >= 0 {
		q.copyDtoH(s.out[4*k:4*k+packed], s.pack)
	} else {
		q.copyDtoH(s.out[4*k:8*k], st.idx)
	}
	if s.momentum() {
		q.take(st.saved, st.u, st.idx, k) // saved = u at the positions
		q.scatterZero(st.u, st.idx, k)
	}
	q.wait()
	return packed, q.run()
}

// frame appends the frame of the k values and positions in s.out (see
// fetchSelection) to dst, through the encoder with the ops already done.
func (s *Sender) frame(dst []byte, t *codec.Tensor, n, k, packed int) ([]byte, error) {
	val, _ := view.As[float32](s.out[:4*k])
	var r *codec.Recipe
	if packed >= 0 {
		// The ops of the frame with their outputs made here: the
		// positions are not needed on the host (their segment before
		// packing is never read).
		op, err := gradient.Preselected(s.comp, n, s.epoch, nil, nil)
		if err != nil {
			return dst, err
		}
		unread := s.phantom[:4*k]
		first := s.tail.Steps[0]
		r = &codec.Recipe{Steps: append([]codec.Step{
			{Ops: []codec.Op{done{Op: op, outs: [][]byte{unread, s.out[:4*k]}}}},
			{Sel: first.Sel, Ops: []codec.Op{done{Op: first.Ops[0], outs: [][]byte{unread}}, done{Op: first.Ops[1], outs: [][]byte{s.out[4*k : 4*k+packed]}}}},
		}, s.tail.Steps[1:]...)}
	} else {
		pos, _ := view.As[uint32](s.out[4*k : 8*k])
		op, err := gradient.Preselected(s.comp, n, s.epoch, pos, val)
		if err != nil {
			return dst, err
		}
		r = &codec.Recipe{Steps: append([]codec.Step{{Ops: []codec.Op{op}}}, s.tail.Steps...)}
	}
	ct := &codec.Tensor{Name: t.Name, DType: codec.F32, Shape: t.Shape, Tags: t.Tags, Version: t.Version, Base: t.Base, Data: s.phantom[:4*n]}
	return s.enc.AppendTensor(dst, ct, r)
}

// Commit makes the staged updates the state: the residual becomes the
// compensated gradient less what the frames carried (their values exactly;
// NaNs and infinities, which no frame may carry, 0), as
// gradient.Sender.Commit.
func (s *Sender) Commit() error {
	var errs []error
	for _, st := range s.pending {
		errs = append(errs, s.commit(st))
	}
	s.pending = s.pending[:0]
	return errors.Join(errs...)
}

// Abort drops the staged updates: each tensor's whole compensated
// gradient becomes its residual, and DGC's momentum is unmasked, as
// gradient.Sender.Abort.
func (s *Sender) Abort() error {
	var errs []error
	for _, st := range s.pending {
		errs = append(errs, s.abort(st))
	}
	s.pending = s.pending[:0]
	return errors.Join(errs...)
}

// CommitTensor commits the staged update of tensor name alone (an Outbox
// commits updates one by one as their frames arrive).
func (s *Sender) CommitTensor(name string) error { return s.one(name, s.commit) }

// AbortTensor aborts the staged update of tensor name alone.
func (s *Sender) AbortTensor(name string) error { return s.one(name, s.abort) }

func (s *Sender) one(name string, f func(*devState) error) error {
	for i, st := range s.pending {
		if st.name == name {
			s.pending = slices.Delete(s.pending, i, i+1)
			return f(st)
		}
	}
	return fmt.Errorf("gpu: tensor %q has no update pending", name)
}

func (s *Sender) commit(st *devState) error {
	// The residual: the compensated gradient with NaNs and the sent
	// positions zeroed (ZeroNonFinite, ScatterZero), in one trip.
	q := &batch{d: s.d}
	q.zeroNonFinite(st.c, st.n)
	q.scatterZero(st.c, st.idx, st.k)
	err := q.run()
	st.res, st.c = st.c, st.res
	st.hasRes, st.busy = true, false
	st.step++
	return err
}

func (s *Sender) abort(st *devState) error {
	var err error
	if s.dgc != nil && s.dgc.Momentum != 0 {
		err = s.d.Put(st.u, st.idx, st.saved, st.k, nil)
	}
	// The whole compensated gradient is the residual, less what no frame
	// may carry (gradient.Sender's abort).
	err = errors.Join(err, s.d.ZeroNonFinite(st.c, st.n, nil))
	st.res, st.c = st.c, st.res
	st.hasRes, st.busy = true, false
	return err
}

// Pending reports whether tensor name has an update staged.
func (s *Sender) Pending(name string) bool {
	st, ok := s.states[name]
	return ok && st.busy
}

// SetCompressor changes the compressor for the next updates (an Outbox
// sets the density of each): it must be of the kind the Sender was made
// for (TopK; DGC with the same momentum, without clipping).
func (s *Sender) SetCompressor(c gradient.Compressor) error {
	switch c := c.(type) {
	case gradient.TopK:
		if s.dgc == nil {
			s.comp = c
			return nil
		}
	case *gradient.DGC:
		// Another density of the same DGC (gradient.AtDensity copies it).
		if s.dgc != nil && c.Clip == s.dgc.Clip && c.Momentum == s.dgc.Momentum && c.Nesterov == s.dgc.Nesterov {
			s.dgc, s.comp = c, c
			return nil
		}
	}
	return fmt.Errorf("%w: gpu: a Sender of %v cannot take %v", codec.ErrUnsupported, s.comp, c)
}

// state returns the tensor's state, made on first use.
func (s *Sender) state(name string, shape []int64, n int) (*devState, error) {
	if st, ok := s.states[name]; ok {
		if st.n != n || !slices.Equal(st.shape, shape) {
			return nil, fmt.Errorf("gpu: tensor %q changed shape from %v to %v", name, st.shape, shape)
		}
		return st, nil
	}
	st := &devState{name: name, shape: slices.Clone(shape), n: n}
	ptrs := []*Ptr{&st.res, &st.c, &st.idx}
	if s.dgc != nil && s.dgc.Momentum != 0 {
		ptrs = append(ptrs, &st.u, &st.saved)
	}
	for _, p := range ptrs {
		var err error
		if *p, err = s.d.Alloc(4 * n); err != nil {
			s.freeState(st)
			return nil, err
		}
	}
	if st.u != 0 {
		if err := s.d.Memset(st.u, 0, 4*n); err != nil {
			s.freeState(st)
			return nil, err
		}
	}
	s.states[name] = st
	return st, nil
}

func (s *Sender) freeState(st *devState) error {
	var errs []error
	for _, p := range []*Ptr{&st.res, &st.c, &st.idx, &st.u, &st.saved} {
		if *p != 0 {
			errs = append(errs, s.d.Free(*p))
			*p = 0
		}
	}
	return errors.Join(errs...)
}

// grow makes the scratch hold tensors of n elements.
func (s *Sender) grow(n int) error {
	if n <= s.capN {
		return nil
	}
	if err := s.freeScratch(); err != nil {
		return err
	}
	var err error
	if s.g, err = s.d.Alloc(4 * n); err != nil {
		return err
	}
	if s.smp, err = s.d.Alloc(4 * n); err != nil {
		return err
	}
	if s.val, err = s.d.Alloc(4 * n); err != nil {
		return err
	}
	if s.pack, err = s.d.Alloc(5*n + 1024); err != nil {
		return err
	}
	if s.packSize, err = s.d.Alloc(8*(n/128+1) + 4); err != nil {
		return err
	}
	if s.in, err = s.d.AllocHost(4 * n); err != nil {
		return err
	}
	if s.out, err = s.d.AllocHost(9*n + 1024); err != nil {
		return err
	}
	if s.total, err = s.d.AllocHost(4); err != nil {
		return err
	}
	s.phantom = make([]byte, 4*n) // the encoder's input: its length counts, its bytes are not read
	s.capN = n
	return nil
}

func (s *Sender) freeScratch() error {
	var errs []error
	for _, p := range []*Ptr{&s.g, &s.smp, &s.val, &s.pack, &s.packSize} {
		if *p != 0 {
			errs = append(errs, s.d.Free(*p))
			*p = 0
		}
	}
	for _, b := range []*[]byte{&s.in, &s.out, &s.total} {
		if *b != nil {
			errs = append(errs, s.d.FreeHost(*b))
			*b = nil
		}
	}
	s.capN = 0
	return errors.Join(errs...)
}

// Close frees the Sender's device and pinned memory (its residuals among
// them).
func (s *Sender) Close() error {
	errs := []error{s.freeScratch(), s.sel.Close()}
	for _, st := range s.states {
		errs = append(errs, s.freeState(st))
	}
	clear(s.states)
	return errors.Join(errs...)
}

// OutboxSender is NewSender for gradient.Outbox.SetDevice.
func (d *Device) OutboxSender(c gradient.Compressor, tail *codec.Recipe) (gradient.DeviceSender, error) {
	s, err := d.NewSender(c, tail)
	if err != nil {
		return nil, err
	}
	return s, nil
}
