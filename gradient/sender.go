package gradient

import (
	"errors"
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// Compressor chooses what to send of a compensated gradient. It returns
// the first op of the frame's recipe: a selection (idx and val segments),
// a quantizer or a low-rank factorisation; the Sender's tail recipe codes
// the segments it makes. Compressors are configurations: the per-tensor
// state they need lives in the Memory (Input.State), so one Compressor may
// serve many Senders.
type Compressor interface {
	// String is the compressor's text form, which New parses back.
	String() string
	// Compress returns the op that codes in.C, or nil to send in.C
	// dense (with the Sender's dense recipe). It may update private
	// buffers through in.State.Private.
	Compress(in *Input) (codec.Op, error)
}

// Compensator is implemented by compressors with their own
// error-feedback rule (DGC's momentum correction): Compensate fills in.C
// from in.G and the tensor's state. Without it in.C = residual + in.G.
type Compensator interface {
	Compensate(in *Input)
}

// Input is one tensor's update as a Compressor sees it.
type Input struct {
	Name  string
	Shape []int64
	G     []float32 // the new gradient or update (read-only)
	C     []float32 // the compensated gradient to compress
	Epoch float64   // the epoch the Sender was given (SetEpoch), for schedules
	State *State    // the tensor's error-feedback state
}

// Sender compresses gradients for one peer with error feedback: each
// update is compensated with the tensor's residual, compressed, framed
// (the compressor's op, then the tail recipe), and the residual becomes
// what the receiver will not see: the compensated gradient minus the
// frame's decoded value. Commit makes the staged residuals the state once
// the frames were delivered; Abort keeps the whole compensated gradients
// as residual when they were not, so nothing is lost. An update whose
// frame would carry a NaN or an infinity fails (codec.ErrNonFinite:
// receivers refuse it) and changes no state; a NaN or an infinity left
// unsent is not kept in the residual (dropNonFinite).
//
// Frames of tensors above 256 MiB need a Receiver with raised
// codec.Limits (MaxDecodedSize, MaxFrameSize).
//
// A Sender is not safe for concurrent use.
type Sender struct {
	comp    Compressor
	tail    *codec.Recipe
	dense   *codec.Recipe
	ef      bool
	dense1d bool
	mem     *Memory
	enc     *codec.Encoder
	dec     *codec.Decoder
	epoch   float64
	pending []*State
	steps   []codec.Step
}

// Option configures a Sender.
type Option func(*Sender) error

// WithTail sets the recipe applied after the compressor's op (default:
// DefaultTail for the compressor).
func WithTail(r *codec.Recipe) Option { return func(s *Sender) error { s.tail = r; return nil } }

// WithDense sets the recipe for tensors the compressor sends dense
// (default: stored raw, so they arrive exactly).
func WithDense(r *codec.Recipe) Option { return func(s *Sender) error { s.dense = r; return nil } }

// WithMemory uses m (for example one restored with UnmarshalBinary).
func WithMemory(m *Memory) Option { return func(s *Sender) error { s.mem = m; return nil } }

// WithoutFeedback turns error feedback off: what a frame does not carry
// is dropped (GRACE's "none" memory). Compensators still apply their own
// rule.
func WithoutFeedback() Option { return func(s *Sender) error { s.ef = false; return nil } }

// WithDenseVectors sends tensors of rank 0 and 1 (biases, norms) with the
// dense recipe instead of the compressor: they are small and matter more
// per element (DGC's reference compresses only tensors of rank 2 and up).
func WithDenseVectors() Option { return func(s *Sender) error { s.dense1d = true; return nil } }

// NewSender returns a Sender for compressor c.
func NewSender(c Compressor, opts ...Option) (*Sender, error) {
	enc, err := codec.NewEncoder()
	if err != nil {
		return nil, err
	}
	dec, err := codec.NewDecoder(codec.WithLimits(selfLimits()), codec.WithFiniteAdd(true))
	if err != nil {
		return nil, err
	}
	s := &Sender{comp: c, ef: true, enc: enc, dec: dec}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.mem == nil {
		s.mem = NewMemory()
	}
	if s.tail == nil {
		s.tail = DefaultTail(c)
	}
	return s, nil
}

// selfLimits are the limits of the decoder a Sender reads its own frames
// with: whatever the encoder writes (tensors up to the default
// MaxTensorSize) must decode, where a default decoder stops at 256 MiB per
// frame. A receiver of such frames needs the same raised limits.
func selfLimits() codec.Limits {
	lim := codec.DefaultLimits()
	lim.MaxDecodedSize = max(lim.MaxDecodedSize, lim.MaxTensorSize)
	lim.MaxFrameSize = max(lim.MaxFrameSize, 2*lim.MaxTensorSize)
	return lim
}

// Memory is the Sender's error-feedback state.
func (s *Sender) Memory() *Memory { return s.mem }

// Compressor is the Sender's compressor.
func (s *Sender) Compressor() Compressor { return s.comp }

// SetCompressor makes c the compressor of the next updates (a density
// chosen per update: AtDensity). The residuals stay.
func (s *Sender) SetCompressor(c Compressor) { s.comp = c }

// SetEpoch tells schedules (DGC's warm-up) where training is; fractions
// are fine.
func (s *Sender) SetEpoch(e float64) { s.epoch = e }

// Append compresses t, the gradient or update of the tensor t.Name
// (float32, whole), and appends its frame to dst. The tensor's state
// change is staged until Commit or Abort; a tensor may be appended once
// between them.
func (s *Sender) Append(dst []byte, t *codec.Tensor) ([]byte, error) {
	if err := checkUpdate(t); err != nil {
		return dst, err
	}
	g, ok := view.As[float32](t.Data)
	if !ok {
		g = make([]float32, len(t.Data)/4)
		copy(view.Of(g), t.Data)
	}
	st, err := s.mem.state(t.Name, t.Shape)
	if err != nil {
		return dst, err
	}
	if st.busy {
		return dst, fmt.Errorf("gradient: tensor %q appended twice before Commit or Abort", t.Name)
	}
	n := len(g)
	st.c, st.next = grow(st.c, n), grow(st.next, n)
	in := &Input{Name: t.Name, Shape: st.shape, G: g, C: st.c, Epoch: s.epoch, State: st}
	if cp, ok := s.comp.(Compensator); ok {
		cp.Compensate(in)
	} else if len(st.res) == n {
		for i, r := range st.res {
			in.C[i] = r + g[i]
		}
	} else {
		copy(in.C, g)
	}
	fail := func(err error) ([]byte, error) {
		st.abortPrivate()
		return dst, fmt.Errorf("gradient: %s on %q: %w", s.comp, t.Name, err)
	}
	var op codec.Op
	if !s.dense1d || len(in.Shape) >= 2 {
		if op, err = s.comp.Compress(in); err != nil {
			return fail(err)
		}
	}
	r := s.dense
	if op != nil {
		s.steps = append(append(s.steps[:0], codec.Step{Ops: []codec.Op{op}}), s.tail.Steps...)
		r = &codec.Recipe{Steps: s.steps}
	}
	ct := &codec.Tensor{Name: t.Name, DType: codec.F32, Shape: t.Shape, Tags: t.Tags, Version: t.Version, Base: t.Base, Data: view.Of(in.C)}
	out, err := s.enc.AppendTensor(dst, ct, r)
	if err != nil {
		return fail(err)
	}
	// The residual: what the receiver will not see.
	if s.ef {
		copy(st.next, in.C)
		if _, err := s.dec.DecodeAdd(out[len(dst):], -1, func(*codec.Tensor) ([]float32, error) { return st.next, nil }); errors.Is(err, codec.ErrNonFinite) {
			return fail(fmt.Errorf("its frame would carry a NaN or an infinity, which receivers refuse: %w", err))
		} else if err != nil {
			return fail(fmt.Errorf("decoding its own frame: %w", err))
		}
		dropNonFinite(st.next)
	} else {
		clear(st.next)
	}
	st.busy = true
	s.pending = append(s.pending, st)
	return out, nil
}

// dropNonFinite sets the NaNs and infinities of a residual to 0. A frame
// carries none (receivers refuse them: Append fails instead), so they are
// elements of the compensated gradient left unsent; kept, they would stay
// forever, and be refused whenever a frame took them.
func dropNonFinite(res []float32) {
	for i, r := range res {
		if r-r != 0 {
			res[i] = 0
		}
	}
}

func (st *State) abortPrivate() {
	for k, b := range st.npriv {
		st.keepSpare(k, b)
	}
	clear(st.npriv)
	clear(st.keep)
}

// Commit makes the staged updates the state: the frames appended since
// the last Commit or Abort reached the peer.
func (s *Sender) Commit() {
	for _, st := range s.pending {
		st.commit()
	}
	s.pending = s.pending[:0]
}

// Abort drops the staged updates: the frames appended since the last
// Commit or Abort did not reach the peer, so each tensor's whole
// compensated gradient stays as its residual (without error feedback too)
// and the next update carries it. Compressor state that the compensation
// advanced stays advanced, as if a frame carrying nothing had been
// delivered: DGC keeps the momentum of the aborted step, unmasked.
func (s *Sender) Abort() {
	for _, st := range s.pending {
		st.abort()
	}
	s.pending = s.pending[:0]
}

// Receiver decodes gradient frames into accumulators: an aggregator sums
// the updates of many peers without a dense copy of each sparse one.
type Receiver struct {
	dec *codec.Decoder
}

// DefaultSlowDecoded is a Receiver's MaxSlowDecoded by default
// (ReceiverLimits): the bytes of an update decoded through the stages
// that decode at some MB/s (floatcm, floatrank), 0.1-0.2 s of a core. A
// frame of 64 MiB of zeros through floatcm is under 200 KB and takes
// 4-10 s of a core to decode; the gradient compressors' tails use none of those
// stages.
const DefaultSlowDecoded = 1 << 20

// ReceiverLimits returns a Receiver's limits by default: codec's
// DefaultLimits with MaxSlowDecoded at DefaultSlowDecoded, for updates
// from peers.
func ReceiverLimits() codec.Limits {
	l := codec.DefaultLimits()
	l.MaxSlowDecoded = DefaultSlowDecoded
	return l
}

// NewReceiver returns a Receiver whose decoder takes opts. Its limits are
// ReceiverLimits, where a codec.WithLimits in opts does not set them (its
// zero fields keep these). It refuses an update that would add a NaN or
// an infinity (codec.WithFiniteAdd, codec.ErrNonFinite) unless opts turn
// that off.
func NewReceiver(opts ...codec.DOption) (*Receiver, error) {
	dec, err := codec.NewDecoder(append([]codec.DOption{codec.WithLimits(ReceiverLimits()), codec.WithFiniteAdd(true)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Receiver{dec: dec}, nil
}

// Add decodes the frame at the start of src and adds weight times its
// tensor into acc(name), which must return a buffer of exactly the
// tensor's element count. It returns the bytes the frame took. A tensor
// unknown to acc (acc's error), of the wrong shape, with damaged segments,
// or that would add a NaN or an infinity is an error and adds nothing; in
// a frame of several tensors, those before it stay added.
func (r *Receiver) Add(src []byte, weight float32, acc func(name string, shape []int64) ([]float32, error)) (int, error) {
	return r.dec.DecodeAdd(src, weight, func(t *codec.Tensor) ([]float32, error) { return acc(t.Name, t.Shape) })
}

// checkUpdate refuses what a gradient update cannot be: a tensor other
// than float32, malformed, or a chunk of one.
func checkUpdate(t *codec.Tensor) error {
	if t.DType != codec.F32 {
		return fmt.Errorf("%w: gradient: tensor %q is %v, want f32", codec.ErrUnsupported, t.Name, t.DType)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if !t.IsWhole() {
		return fmt.Errorf("gradient: tensor %q is a chunk; updates are whole tensors", t.Name)
	}
	return nil
}
