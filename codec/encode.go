package codec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// SegmentStat reports one stored segment of an encoded frame.
type SegmentStat struct {
	Tensor    string // tensor name ("" for byte streams)
	Name      string // slot name
	Coder     string // the coder that produced it; "" when stored as is
	RawLen    int    // bytes that went into the coder (StoredLen when none)
	StoredLen int
}

// Encoder builds frames in memory. It is safe for concurrent use.
type Encoder struct {
	cfg econfig
}

// NewEncoder returns an Encoder. It takes the options that concern frame
// encoding (WithPayloadCRC) and refuses the ones that only a Writer uses.
func NewEncoder(opts ...EOption) (*Encoder, error) {
	cfg, err := newEConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.streamOnly != "" {
		return nil, fmt.Errorf("codec: NewEncoder: %s applies to a Writer, not an Encoder", cfg.streamOnly)
	}
	return &Encoder{cfg: cfg}, nil
}

// AppendTensor appends one frame carrying t (a whole tensor or a chunk)
// coded by r and returns the extended buffer. A nil recipe stores the
// data raw. It refuses a lossy recipe for a tensor tagged lossless with
// ErrLossy. With a lossless recipe the frame is at most
// MaxTensorLen(t) bytes.
func (e *Encoder) AppendTensor(dst []byte, t *Tensor, r *Recipe) ([]byte, error) {
	dst, _, err := e.appendTensors(dst, nil, false, []*Tensor{t}, []*Recipe{r})
	return dst, err
}

// AppendTensors appends one frame carrying all of ts, tensor i coded by
// rs[i] (rs may be shorter: missing recipes store raw). One tensor gives a
// tensor frame, several a tensors frame.
func (e *Encoder) AppendTensors(dst []byte, ts []*Tensor, rs []*Recipe) ([]byte, error) {
	dst, _, err := e.appendTensors(dst, nil, false, ts, rs)
	return dst, err
}

// AppendTensorsStats is AppendTensors that also appends a SegmentStat per
// stored segment to stats and returns it.
func (e *Encoder) AppendTensorsStats(dst []byte, stats []SegmentStat, ts []*Tensor, rs []*Recipe) ([]byte, []SegmentStat, error) {
	return e.appendTensors(dst, stats, true, ts, rs)
}

func (e *Encoder) appendTensors(dst []byte, stats []SegmentStat, withStats bool, ts []*Tensor, rs []*Recipe) ([]byte, []SegmentStat, error) {
	if len(ts) == 0 {
		return dst, stats, fmt.Errorf("codec: AppendTensors: no tensors")
	}
	if limit := DefaultLimits().MaxTensors; len(ts) > limit {
		return dst, stats, fmt.Errorf("%w: %d tensors in one frame (readers accept %d by default)", ErrLimit, len(ts), limit)
	}
	a := getArena()
	defer putArena(a)
	var one [1]entry
	ents := one[:]
	if len(ts) > 1 {
		ents = make([]entry, len(ts))
	}
	for i, t := range ts {
		var r *Recipe
		if i < len(rs) {
			r = rs[i]
		}
		// What docs/FORMAT.md forbids: chunks in a tensors frame, and
		// chunks of no element.
		if !t.IsWhole() && (len(ts) > 1 || len(t.Data) == 0) {
			return dst, nil, fmt.Errorf("%w: tensor %q: a chunk of %d bytes at element %d; a chunk goes alone in its frame and holds an element or more",
				ErrRecipe, t.Name, len(t.Data), t.Offset)
		}
		if err := ents[i].encodeTensor(a, t, r); err != nil {
			return dst, stats, err
		}
	}
	typ := FrameTensor
	hdr := a.Alloc(0)
	if len(ts) > 1 {
		typ = FrameTensors
		hdr = binary.AppendUvarint(hdr, uint64(len(ts)))
	}
	for i := range ents {
		hdr = ents[i].appendHeader(hdr)
	}
	return e.assemble(dst, stats, withStats, typ, hdr, ents)
}

// AppendBytes appends one bytes frame carrying p coded by r (a nil recipe
// stores p raw). Byte streams are lossless: a lossy recipe is refused with
// ErrLossy. The frame is at most MaxEncodedLen(len(p)) bytes.
func (e *Encoder) AppendBytes(dst, p []byte, r *Recipe) ([]byte, error) {
	dst, _, err := e.appendBytes(dst, nil, false, p, r)
	return dst, err
}

// AppendBytesStats is AppendBytes that also appends a SegmentStat per
// stored segment to stats and returns it.
func (e *Encoder) AppendBytesStats(dst []byte, stats []SegmentStat, p []byte, r *Recipe) ([]byte, []SegmentStat, error) {
	return e.appendBytes(dst, stats, true, p, r)
}

func (e *Encoder) appendBytes(dst []byte, stats []SegmentStat, withStats bool, p []byte, r *Recipe) ([]byte, []SegmentStat, error) {
	if r.Lossy() {
		return dst, stats, fmt.Errorf("%w: byte streams are always lossless (recipe %q)", ErrLossy, r)
	}
	a := getArena()
	defer putArena(a)
	var one [1]entry
	ents := one[:]
	en := &ents[0]
	ctx := &Ctx{Arena: a}
	if err := en.encode(ctx, Segment{SegInfo{Name: "data", Elem: Byte, Len: len(p)}, p}, r); err != nil {
		return dst, stats, err
	}
	hdr := a.Alloc(0)
	var flags byte
	if len(en.steps) > 0 {
		flags |= tflagCoded
	}
	hdr = append(hdr, flags)
	hdr = binary.AppendUvarint(hdr, uint64(len(p)))
	hdr = en.appendBody(hdr)
	return e.assemble(dst, stats, withStats, FrameBytes, hdr, ents)
}

// MaxEncodedLen returns the largest bytes frame AppendBytes (or a Writer)
// makes of n bytes, whatever the recipe: a coded frame is kept only when
// its steps, segment table and segments take fewer bytes than the data,
// so the bound is the frame that stores the data as it is, with its
// payload CRC.
func MaxEncodedLen(n int) int {
	hdr := 1 + uvarintLen(uint64(n)) // flags, length
	return frameOverhead(hdr+n) + hdr + n
}

// MaxTensorLen returns the largest tensor frame AppendTensor makes of t
// with a lossless recipe (or none): as MaxEncodedLen, the frame that
// stores t's data as it is. Lossy and gradient stages have no such
// bound in general (a TopK keeping every element writes an index per
// value); their frames are usually far smaller.
func MaxTensorLen(t *Tensor) int {
	var en entry
	en.t = t
	hdr := len(en.appendHeader(nil))
	return frameOverhead(hdr+len(t.Data)) + hdr + len(t.Data)
}

// frameOverhead is what a frame adds to its header and payload when the
// header and the coded body (step list, segment table and segments)
// together take at most body bytes: lead, header length, header CRC and
// payload CRC.
func frameOverhead(body int) int {
	return 1 + uvarintLen(uint64(body)) + 4 + 4
}

// AppendHello appends a hello frame.
func AppendHello(dst []byte, h *Hello) []byte {
	hdr := append([]byte(nil), helloMagic[:]...)
	minV, maxV := h.MinVersion, h.MaxVersion
	if minV == 0 && maxV == 0 {
		minV, maxV = Version, Version
	}
	hdr = append(hdr, minV, maxV)
	hdr = append(hdr, h.Session[:]...)
	hdr = appendString(hdr, h.Peer)
	hdr = binary.AppendUvarint(hdr, uint64(len(h.Stages)))
	for _, id := range h.Stages {
		hdr = binary.AppendUvarint(hdr, uint64(id))
	}
	hdr = binary.AppendUvarint(hdr, h.MaxFrame)
	return appendFrame(dst, FrameHello, hdr, nil, false)
}

// AppendEnd appends an end-of-stream frame.
func AppendEnd(dst []byte, end End) []byte {
	hdr := binary.AppendUvarint(nil, end.Frames)
	hdr = binary.AppendUvarint(hdr, end.Bytes)
	return appendFrame(dst, FrameEnd, hdr, nil, false)
}

// AppendControl appends a control frame of the given kind. Kinds below
// 1024 are reserved for tensorpress; applications use 1024 and up.
func AppendControl(dst []byte, kind uint64, payload []byte) []byte {
	hdr := binary.AppendUvarint(nil, kind)
	hdr = binary.AppendUvarint(hdr, uint64(len(payload)))
	return appendFrame(dst, FrameControl, hdr, [][]byte{payload}, true)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendFrame writes lead, header length, header, header CRC, the payload
// parts and, when withCRC, the payload CRC.
func appendFrame(dst []byte, typ FrameType, hdr []byte, payload [][]byte, withCRC bool) []byte {
	dst = appendFrameHead(dst, typ, hdr, withCRC)
	pstart := len(dst)
	for _, p := range payload {
		dst = append(dst, p...)
	}
	if withCRC {
		dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[pstart:], castagnoli))
	}
	return dst
}

// appendFrameHead writes what comes before a frame's payload: lead,
// header length, header and header CRC.
func appendFrameHead(dst []byte, typ FrameType, hdr []byte, withCRC bool) []byte {
	lead := byte(Version<<leadVersionShift) | byte(typ)
	if withCRC {
		lead |= leadPayloadCRC
	}
	start := len(dst)
	dst = append(dst, lead)
	dst = binary.AppendUvarint(dst, uint64(len(hdr)))
	dst = append(dst, hdr...)
	return binary.LittleEndian.AppendUint32(dst, crc(dst[start:]))
}

// AppendRawBytesHead appends the head of a bytes frame that stores p as
// it is: the frame is the head, then p, then the returned tail (the
// payload CRC, or nothing when the Encoder omits it on raw frames). A
// writer sends the three with one vectored write, without copying p
// (AppendBytes with a nil recipe makes the same bytes in one buffer).
func (e *Encoder) AppendRawBytesHead(dst, p []byte) (head, tail []byte) {
	var hb [1 + binary.MaxVarintLen64]byte
	hdr := binary.AppendUvarint(hb[:1], uint64(len(p))) // flags 0: stored as is
	withCRC := e.cfg.payloadCRC == CRCAlways
	head = appendFrameHead(dst, FrameBytes, hdr, withCRC)
	if withCRC {
		tail = binary.LittleEndian.AppendUint32(nil, crc32.Checksum(p, castagnoli))
	}
	return head, tail
}

// AppendRawTensorHead is AppendRawBytesHead for a tensor frame that stores
// t's data as it is: the frame is the head, then t.Data, then the tail
// (AppendTensor with a nil recipe makes the same bytes in one buffer). It
// refuses what AppendTensor refuses.
func (e *Encoder) AppendRawTensorHead(dst []byte, t *Tensor) (head, tail []byte, err error) {
	var en entry
	if err := en.encodeTensor(nil, t, nil); err != nil {
		return dst, nil, err
	}
	withCRC := e.cfg.payloadCRC == CRCAlways
	head = appendFrameHead(dst, FrameTensor, en.appendHeader(nil), withCRC)
	if withCRC {
		tail = binary.LittleEndian.AppendUint32(nil, crc32.Checksum(t.Data, castagnoli))
	}
	return head, tail, nil
}

func (e *Encoder) assemble(dst []byte, stats []SegmentStat, withStats bool, typ FrameType, hdr []byte, ents []entry) ([]byte, []SegmentStat, error) {
	coded := false
	size := 0
	nstats := len(stats)
	var slow int64 // what readers with default limits refuse of the frame as a whole
	for i := range ents {
		coded = coded || len(ents[i].steps) > 0
		for _, st := range ents[i].steps {
			if st.op.Stage().SlowDecode {
				slow += int64(st.RawLen)
			}
		}
		for _, l := range ents[i].leaves {
			size += len(l.Data)
			if withStats {
				stats = append(stats, SegmentStat{Tensor: ents[i].t.Name, Name: l.Name, Coder: l.coder, RawLen: l.raw, StoredLen: len(l.Data)})
			}
		}
	}
	if limit := DefaultLimits().MaxSlowDecoded; slow > limit {
		return dst, stats[:nstats], fmt.Errorf("%w: the frame decodes %d bytes through stages that decode at some MB/s (readers accept %d by default): code it in smaller chunks",
			ErrLimit, slow, limit)
	}
	withCRC := e.cfg.payloadCRC == CRCAlways || coded
	dst = slices.Grow(dst, frameOverhead(len(hdr))+len(hdr)+size)
	dst = appendFrameHead(dst, typ, hdr, withCRC)
	pstart := len(dst)
	for i := range ents {
		for _, l := range ents[i].leaves {
			dst = append(dst, l.Data...)
		}
	}
	if withCRC {
		dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[pstart:], castagnoli))
	}
	return dst, stats, nil
}

// entry is one tensor (or byte chunk) being encoded.
type entry struct {
	t      *Tensor
	steps  []StepRecord
	leaves []leaf
}

type leaf struct {
	Segment
	sealed bool
	coder  string
	raw    int
}

// encodable refuses tensors that a reader with default Limits would refuse,
// so that the encoder never writes a frame nobody can read by default.
func encodable(t *Tensor) error {
	lim := DefaultLimits()
	switch {
	case len(t.Name) > lim.MaxNameLen:
		return fmt.Errorf("%w: tensor name of %d bytes (readers accept %d by default)", ErrLimit, len(t.Name), lim.MaxNameLen)
	case len(t.Shape) > lim.MaxDims:
		return fmt.Errorf("%w: tensor %q has rank %d (readers accept %d by default)", ErrLimit, t.Name, len(t.Shape), lim.MaxDims)
	case len(t.Tags.Extra) > lim.MaxTags:
		return fmt.Errorf("%w: tensor %q has %d tags (readers accept %d by default)", ErrLimit, t.Name, len(t.Tags.Extra), lim.MaxTags)
	case t.NumBytes() > lim.MaxTensorSize:
		return fmt.Errorf("%w: tensor %q of %d bytes (readers accept %d by default)", ErrLimit, t.Name, t.NumBytes(), lim.MaxTensorSize)
	}
	for _, tg := range t.Tags.Extra {
		if len(tg.Key) > lim.MaxNameLen || len(tg.Value) > lim.MaxNameLen {
			return fmt.Errorf("%w: tensor %q: tag of more than %d bytes", ErrLimit, t.Name, lim.MaxNameLen)
		}
	}
	return nil
}

func (en *entry) encodeTensor(a *Arena, t *Tensor, r *Recipe) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := encodable(t); err != nil {
		return err
	}
	if t.Tags.Lossless && r.Lossy() {
		return fmt.Errorf("%w: tensor %q, recipe %q", ErrLossy, t.Name, r)
	}
	en.t = t
	ctx := &Ctx{Tensor: t, Arena: a}
	return en.encode(ctx, Segment{SegInfo{Name: "data", Elem: t.DType, Len: len(t.Data)}, t.Data}, r)
}

// encode runs the recipe over root and records the steps that took effect.
func (en *entry) encode(ctx *Ctx, root Segment, r *Recipe) error {
	if en.t == nil {
		en.t = &Tensor{DType: Byte}
	}
	en.leaves = append(en.leaves[:0], leaf{Segment: root, raw: root.Len})
	if r == nil {
		return nil
	}
	for _, st := range r.Steps {
		for i := 0; i < len(en.leaves); {
			l := &en.leaves[i]
			if l.sealed || !st.Sel.Matches(l.Name) {
				i++
				continue
			}
			n, err := en.apply(ctx, i, st.Ops)
			if err != nil {
				return err
			}
			i += n
		}
	}
	// Never worse than raw: when the steps and their table cost at least as
	// much as the data they replace, store the data as it is. (Lossy steps
	// are kept: what they dropped is gone, and their callers account for it.)
	if len(en.steps) > 0 && (root.Len == 0 || !r.Lossy()) {
		cost := len(en.appendBody(ctx.Arena.Alloc(0)))
		for _, l := range en.leaves {
			cost += len(l.Data)
		}
		if cost >= root.Len {
			en.steps = en.steps[:0]
			en.leaves = append(en.leaves[:0], leaf{Segment: root, raw: root.Len})
		}
	}
	// Refuse what a reader with default limits would refuse.
	if len(en.steps) > 0 {
		lim := DefaultLimits()
		work := int64(0)
		for _, st := range en.steps {
			work += int64(st.RawLen)
		}
		if work > maxDecodeWork(int64(root.Len)) || len(en.steps)+len(en.leaves) > lim.MaxSegments {
			return fmt.Errorf("%w: recipe %q makes %d steps and %d segments decoding %d bytes for %d: more than readers accept",
				ErrRecipe, r, len(en.steps), len(en.leaves), work, root.Len)
		}
	}
	return nil
}

// apply runs ops on segment i and, in turn, on each of its outputs. It
// returns how many segments now stand where segment i stood.
func (en *entry) apply(ctx *Ctx, i int, ops []Op) (int, error) {
	if len(ops) == 0 || en.leaves[i].sealed {
		return 1, nil
	}
	op := ops[0]
	in := en.leaves[i]
	if b, ok := op.(Binder); ok {
		bound, err := b.Bind(in.SegInfo)
		if err != nil {
			return 0, fmt.Errorf("%w: %s on segment %q of %s: %v", ErrRecipe, op, in.Name, en.what(), err)
		}
		op = bound
	}
	want, err := op.Outputs(in.SegInfo)
	if err != nil {
		return 0, fmt.Errorf("%w: %s on segment %q of %s: %v", ErrRecipe, op, in.Name, en.what(), err)
	}
	if limit := DefaultLimits().MaxSlowDecoded; op.Stage().SlowDecode && int64(in.Len) > limit {
		// Refused before it is coded, at some MB/s; assemble checks the
		// frame's sum.
		return 0, fmt.Errorf("%w: %s on segment %q of %s: %d bytes, more than readers decode through it by default (%d): code it in smaller chunks",
			ErrLimit, op, in.Name, en.what(), in.Len, limit)
	}
	outs, err := op.Encode(ctx, in.Segment)
	if err != nil {
		return 0, fmt.Errorf("codec: %s on segment %q of %s: %w", op, in.Name, en.what(), err)
	}
	if len(outs) != len(want) {
		return 0, fmt.Errorf("codec: stage %s made %d segments, declared %d", op, len(outs), len(want))
	}
	for j := range outs {
		outs[j].Len = len(outs[j].Data)
		if want[j].Len >= 0 && want[j].Len != outs[j].Len || want[j].Name != outs[j].Name {
			return 0, fmt.Errorf("codec: stage %s made segment %q of %d bytes, declared %q of %d", op, outs[j].Name, outs[j].Len, want[j].Name, want[j].Len)
		}
	}
	s := op.Stage()
	if s.Kind == Coder {
		if len(outs[0].Data) >= len(in.Data) {
			en.leaves[i].sealed = true // stored as is: recorded by the absence of a step
			return 1, nil
		}
		en.record(op, i, in.Len)
		en.leaves[i] = leaf{Segment: outs[0], sealed: true, coder: s.Name, raw: in.Len}
		return 1, nil
	}
	en.record(op, i, in.Len)
	repl := make([]leaf, len(outs))
	for j, o := range outs {
		repl[j] = leaf{Segment: o, raw: o.Len}
	}
	en.leaves = append(en.leaves[:i], append(repl, en.leaves[i+1:]...)...)
	total := 0
	for j := 0; j < len(outs); j++ {
		n, err := en.apply(ctx, i+total, ops[1:])
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// what names the entry in errors.
func (en *entry) what() string {
	if en.t.DType == Byte {
		return "a byte stream"
	}
	return fmt.Sprintf("tensor %q", en.t.Name)
}

func (en *entry) record(op Op, input, rawLen int) {
	en.steps = append(en.steps, StepRecord{Stage: op.Stage().ID, Input: input, RawLen: rawLen, Params: op.AppendParams(nil), op: op})
}

// appendHeader appends the tensor entry header.
func (en *entry) appendHeader(hdr []byte) []byte {
	t := en.t
	var flags byte
	if t.Tags.Lossless {
		flags |= tflagLossless
	}
	if len(t.Tags.Extra) > 0 {
		flags |= tflagTags
	}
	whole := t.IsWhole()
	if !whole {
		flags |= tflagChunk
	}
	if t.Version != 0 || t.Base != 0 {
		flags |= tflagVersion
	}
	if len(en.steps) > 0 {
		flags |= tflagCoded
	}
	hdr = append(hdr, flags)
	hdr = appendString(hdr, t.Name)
	hdr = append(hdr, byte(t.DType))
	hdr = binary.AppendUvarint(hdr, uint64(len(t.Shape)))
	for _, d := range t.Shape {
		hdr = binary.AppendUvarint(hdr, uint64(d))
	}
	if flags&tflagTags != 0 {
		hdr = binary.AppendUvarint(hdr, uint64(len(t.Tags.Extra)))
		for _, tg := range t.Tags.Extra {
			hdr = appendString(hdr, tg.Key)
			hdr = appendString(hdr, tg.Value)
		}
	}
	if !whole {
		hdr = binary.AppendUvarint(hdr, uint64(t.Offset))
		hdr = binary.AppendUvarint(hdr, uint64(len(t.Data)/t.DType.Size()))
	}
	if flags&tflagVersion != 0 {
		hdr = binary.AppendUvarint(hdr, t.Version)
		hdr = binary.AppendUvarint(hdr, t.Base)
	}
	return en.appendBody(hdr)
}

// appendBody appends the step list and stored-segment table (coded only).
func (en *entry) appendBody(hdr []byte) []byte {
	if len(en.steps) == 0 {
		return hdr
	}
	hdr = binary.AppendUvarint(hdr, uint64(len(en.steps)))
	for _, s := range en.steps {
		hdr = binary.AppendUvarint(hdr, uint64(s.Stage))
		hdr = binary.AppendUvarint(hdr, uint64(s.Input))
		hdr = binary.AppendUvarint(hdr, uint64(s.RawLen))
		hdr = binary.AppendUvarint(hdr, uint64(len(s.Params)))
		hdr = append(hdr, s.Params...)
	}
	hdr = binary.AppendUvarint(hdr, uint64(len(en.leaves)))
	for _, l := range en.leaves {
		hdr = binary.AppendUvarint(hdr, uint64(len(l.Data)))
	}
	return hdr
}
