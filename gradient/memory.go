package gradient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"slices"

	"github.com/tensorpress/tensorpress/codec"
)

// Memory is a sender's error-feedback state for one peer: per tensor name
// a residual (what was compensated but not yet sent), independent of the
// compressor, so that it survives a change of compressor, and the private
// buffers of the compressors that keep some (DGC's momentum, PowerSGD's
// Q). Keep one Memory per peer.
//
// Changes made while encoding an update are staged: Sender.Commit makes
// them the state once the transport accepted the frames, Sender.Abort
// keeps everything that was not delivered as residual.
//
// A Memory is not safe for concurrent use. MarshalBinary and
// UnmarshalBinary save and restore the committed state (the layout is in
// docs/FORMAT.md), so a reconnecting peer keeps its residuals.
type Memory struct {
	states map[string]*State
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{states: map[string]*State{}} }

// State is one tensor's error-feedback state in a Memory.
type State struct {
	name  string
	shape []int64
	step  uint64               // committed updates
	res   []float32            // committed residual
	priv  map[string][]float32 // committed private buffers

	// Staged by an update in flight.
	busy  bool
	c     []float32                  // the compensated gradient that was coded
	next  []float32                  // the residual after the update
	npriv map[string][]float32       // private buffers touched by the update
	keep  map[string]func([]float32) // npriv keys that an Abort keeps, and their undo
	spare map[string][]float32       // buffers to reuse
}

// Name is the tensor's name; Shape its shape.
func (s *State) Name() string   { return s.name }
func (s *State) Shape() []int64 { return s.shape }

// Step is the number of updates of the tensor committed so far.
func (s *State) Step() uint64 { return s.step }

// Residual is the committed residual (read-only; nil before the first
// update).
func (s *State) Residual() []float32 { return s.res }

// Private returns the staged copy of the private buffer key (n elements,
// zeros when new): a compressor writes it during an update, and the
// writes become the state on Commit. Calling it again during the same
// update returns the same slice. Its length must not change between
// updates.
func (s *State) Private(key string, n int) []float32 {
	if b, ok := s.npriv[key]; ok {
		return b
	}
	if s.npriv == nil {
		s.npriv = map[string][]float32{}
	}
	b := grow(s.spare[key], n)
	delete(s.spare, key)
	if cur := s.priv[key]; len(cur) == n {
		copy(b, cur)
	} else {
		clear(b)
	}
	s.npriv[key] = b
	return b
}

// Committed returns the committed private buffer key, or nil.
func (s *State) Committed(key string) []float32 { return s.priv[key] }

func grow(b []float32, n int) []float32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]float32, n)
}

// keepOnAbort makes the staged private buffer key the state on Abort too,
// once undo(buffer) has reverted what only a delivered frame justifies
// (DGC's momentum masking): an aborted update still happened, only
// nothing of it reached the peer, just as its compensated gradient stays
// as the residual.
func (s *State) keepOnAbort(key string, undo func([]float32)) {
	if s.keep == nil {
		s.keep = map[string]func([]float32){}
	}
	s.keep[key] = undo
}

// install makes b the committed private buffer key.
func (s *State) install(k string, b []float32) {
	if s.priv == nil {
		s.priv = map[string][]float32{}
	}
	if old, ok := s.priv[k]; ok {
		s.keepSpare(k, old)
	}
	s.priv[k] = b
}

func (s *State) commit() {
	s.res, s.next = s.next, s.res
	for k, b := range s.npriv {
		s.install(k, b)
	}
	clear(s.npriv)
	clear(s.keep)
	s.step++
	s.busy = false
}

func (s *State) abort() {
	s.res, s.c = s.c, s.res
	dropNonFinite(s.res) // nothing of c reached the peer; what no frame may carry goes
	for k, b := range s.npriv {
		if undo, ok := s.keep[k]; ok {
			undo(b)
			s.install(k, b)
			continue
		}
		s.keepSpare(k, b)
	}
	clear(s.npriv)
	clear(s.keep)
	s.busy = false
}

func (s *State) keepSpare(k string, b []float32) {
	if s.spare == nil {
		s.spare = map[string][]float32{}
	}
	s.spare[k] = b
}

// state returns the State of a tensor, creating it; a known name with
// another shape is an error.
func (m *Memory) state(name string, shape []int64) (*State, error) {
	if s, ok := m.states[name]; ok {
		if !slices.Equal(s.shape, shape) {
			return nil, fmt.Errorf("gradient: tensor %q changed shape from %v to %v (Reset it first)", name, s.shape, shape)
		}
		return s, nil
	}
	s := &State{name: name, shape: slices.Clone(shape)}
	m.states[name] = s
	return s, nil
}

// Get returns the State of a tensor, or nil.
func (m *Memory) Get(name string) *State { return m.states[name] }

// Names lists the tensors with state, sorted.
func (m *Memory) Names() []string { return slices.Sorted(maps.Keys(m.states)) }

// Reset forgets the state of the named tensors, or of every tensor when
// none is named.
func (m *Memory) Reset(names ...string) {
	if len(names) == 0 {
		clear(m.states)
		return
	}
	for _, n := range names {
		delete(m.states, n)
	}
}

// The serialised form: "TPEF", a version byte (1), uvarint(count), then
// per tensor in name order: uvarint(len) name, uvarint(rank) and
// uvarint dims, uvarint(step), uvarint(n) and n float32 residual values
// (n is 0 or the element count), uvarint(count) private buffers each as
// uvarint(len) key, uvarint(n), n float32; then the CRC-32C (Castagnoli)
// of everything before it, little-endian.
const memMagic = "TPEF"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrMemory reports a serialised Memory that cannot be restored.
var ErrMemory = errors.New("gradient: bad memory image")

// MarshalBinary returns the committed state (staged updates excluded).
func (m *Memory) MarshalBinary() ([]byte, error) {
	b := append([]byte(memMagic), 1)
	b = binary.AppendUvarint(b, uint64(len(m.states)))
	for _, name := range m.Names() {
		s := m.states[name]
		b = appendStr(b, name)
		b = binary.AppendUvarint(b, uint64(len(s.shape)))
		for _, d := range s.shape {
			b = binary.AppendUvarint(b, uint64(d))
		}
		b = binary.AppendUvarint(b, s.step)
		b = appendFloats(b, s.res)
		keys := slices.Sorted(maps.Keys(s.priv))
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendStr(b, k)
			b = appendFloats(b, s.priv[k])
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendFloats(b []byte, v []float32) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// UnmarshalBinary replaces m's state by the image data. A damaged or
// inconsistent image is an error wrapping ErrMemory, and m is unchanged.
// Allocation is bounded by len(data).
func (m *Memory) UnmarshalBinary(data []byte) error {
	if len(data) < len(memMagic)+1+4 || string(data[:4]) != memMagic {
		return fmt.Errorf("%w: not a memory image", ErrMemory)
	}
	body := data[:len(data)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(data[len(data)-4:]); got != want {
		return fmt.Errorf("%w: CRC %08x, computed %08x", ErrMemory, want, got)
	}
	if body[4] != 1 {
		return fmt.Errorf("%w: version %d (this build reads 1)", ErrMemory, body[4])
	}
	r := memReader{b: body[5:]}
	lim := codec.DefaultLimits()
	count := r.uvarint(uint64(len(r.b)))
	states := make(map[string]*State, min(count, 1024))
	for i := uint64(0); i < count && r.err == nil; i++ {
		s := &State{name: r.str(lim.MaxNameLen)}
		rank := r.uvarint(uint64(lim.MaxDims))
		s.shape = make([]int64, 0, min(rank, uint64(lim.MaxDims)))
		nel := int64(1)
		for j := uint64(0); j < rank && r.err == nil; j++ {
			d := int64(r.uvarint(math.MaxInt32))
			s.shape = append(s.shape, d)
			if nel = nel * d; nel > math.MaxInt32 {
				r.fail("tensor %q: shape %v too large", s.name, s.shape)
			}
		}
		s.step = r.uvarint(math.MaxUint64)
		s.res = r.floats()
		if n := len(s.res); n != 0 && int64(n) != nel && r.err == nil {
			r.fail("tensor %q: residual of %d elements for shape %v", s.name, n, s.shape)
		}
		np := r.uvarint(uint64(len(r.b)))
		for j := uint64(0); j < np && r.err == nil; j++ {
			k := r.str(lim.MaxNameLen)
			if s.priv == nil {
				s.priv = map[string][]float32{}
			}
			if _, dup := s.priv[k]; dup {
				r.fail("tensor %q: private buffer %q twice", s.name, k)
			}
			s.priv[k] = r.floats()
		}
		if _, dup := states[s.name]; dup && r.err == nil {
			r.fail("tensor %q twice", s.name)
		}
		states[s.name] = s
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the last tensor", len(r.b))
	}
	if r.err != nil {
		return r.err
	}
	m.states = states
	return nil
}

type memReader struct {
	b   []byte
	err error
}

func (r *memReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMemory}, args...)...)
	}
}

func (r *memReader) uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	if v > max {
		r.fail("value %d exceeds %d", v, max)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *memReader) str(max int) string {
	n := r.uvarint(uint64(min(max, len(r.b))))
	if r.err == nil && n > uint64(len(r.b)) { // the varint's own bytes are gone
		r.fail("string of %d bytes, %d left", n, len(r.b))
	}
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *memReader) floats() []float32 {
	n := r.uvarint(uint64(len(r.b) / 4))
	if r.err == nil && n > uint64(len(r.b)/4) { // the varint's own bytes are gone
		r.fail("%d floats, %d bytes left", n, len(r.b))
	}
	if r.err != nil || n == 0 {
		return nil
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[4*i:]))
	}
	r.b = r.b[4*n:]
	return v
}
