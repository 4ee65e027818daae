package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// Format version and frame layout. docs/FORMAT.md is the specification;
// the constants below follow it.
//
//	frame  = lead hlen header hcrc payload [pcrc]
//	lead   = 1 byte: bits 7-5 version, bit 4 payload CRC present,
//	         bit 3 extensions present, bits 2-0 frame type
//	hlen   = uvarint: length of header
//	hcrc   = CRC-32C of lead, hlen and header (uint32 little-endian)
//	pcrc   = CRC-32C of payload (uint32 little-endian)
const (
	// Version is the format version this package writes.
	Version = 1

	leadVersionShift = 5
	leadPayloadCRC   = 1 << 4
	leadExtensions   = 1 << 3
	leadTypeMask     = 7
)

// FrameType is the kind of a frame (the low 3 bits of its lead byte).
type FrameType uint8

const (
	FrameHello   FrameType = 0 // stream hello: session, peer, capabilities
	FrameTensor  FrameType = 1 // one tensor or tensor chunk
	FrameTensors FrameType = 2 // several tensors (batching small ones)
	FrameBytes   FrameType = 3 // a chunk of an opaque byte stream
	FrameControl FrameType = 4 // a control message (back channel)
	FrameEnd     FrameType = 5 // end of stream
)

func (t FrameType) String() string {
	switch t {
	case FrameHello:
		return "hello"
	case FrameTensor:
		return "tensor"
	case FrameTensors:
		return "tensors"
	case FrameBytes:
		return "bytes"
	case FrameControl:
		return "control"
	case FrameEnd:
		return "end"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Tensor entry flags (first byte of each tensor entry; bit 4 also in the
// flags byte of a bytes frame).
const (
	tflagLossless = 1 << 0
	tflagTags     = 1 << 1
	tflagChunk    = 1 << 2
	tflagVersion  = 1 << 3
	tflagCoded    = 1 << 4
	tflagKnown    = tflagLossless | tflagTags | tflagChunk | tflagVersion | tflagCoded
	bflagKnown    = tflagCoded
)

// helloMagic opens every hello header.
var helloMagic = [4]byte{'T', 'P', 'R', 'S'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Hello is the first frame of a stream: who is speaking and what it can
// decode. Readers accept streams without one.
type Hello struct {
	MinVersion, MaxVersion uint8 // format versions the sender reads
	Session                [16]byte
	Peer                   string
	Stages                 []StageID // stages the sender can decode
	MaxFrame               uint64    // largest payload the sender accepts; 0: unstated
}

// End closes a stream. Frames and Bytes count the data frames and the
// decoded data bytes the writer sent since its hello (or since the start).
type End struct {
	Frames uint64
	Bytes  uint64
}

// Extension is one entry of a frame's extension area. Readers skip
// entries they do not know unless the key is odd (critical), which they
// refuse with ErrUnsupported. Format v1 defines no keys yet.
type Extension struct {
	Key   uint64
	Value []byte
}

// Step records one applied stage in a frame: which stage with which
// parameters, which segment it read and how long that segment was.
type StepRecord struct {
	Stage  StageID
	Input  int // index in the segment list at the time the step ran
	RawLen int // length of the input segment in bytes
	Params []byte
	op     Op
	nout   int // number of outputs (from the plan)
	in     SegInfo
}

// Op returns the step's configured stage, as its parameters make it: set
// in the headers ReadFrameHeader and the decoders return (and in frames
// being encoded), nil in a StepRecord made by hand.
func (s StepRecord) Op() Op { return s.op }

// EntryHeader is the parsed, validated header of one tensor entry (or of
// a bytes frame, with Tensor.DType == Byte and no name).
type EntryHeader struct {
	Tensor  Tensor // metadata; Data is nil
	Count   int64  // elements (bytes, for a byte stream) carried
	RawLen  int64  // decoded bytes
	Coded   bool
	Steps   []StepRecord
	Stored  []SegInfo // final segments: name, elem, stored length
	Payload int64     // sum of stored lengths
}

// FrameHeader is a parsed frame header. It holds no payload.
type FrameHeader struct {
	Type       FrameType
	Version    int
	PayloadCRC bool
	HeaderLen  int // bytes before the payload: lead, hlen, header, hcrc
	Payload    int64
	Entries    []EntryHeader // tensor, tensors and bytes frames
	Hello      *Hello
	End        *End
	Control    uint64 // control kind
	Ext        []Extension
}

// FrameLen is the whole frame's length in bytes.
func (h *FrameHeader) FrameLen() int64 {
	n := int64(h.HeaderLen) + h.Payload
	if h.PayloadCRC {
		n += 4
	}
	return n
}

// headerReader decodes header fields with bounds checks. The first error
// sticks; later reads return zero values.
type headerReader struct {
	b     []byte
	pos   int
	err   error
	lim   *Limits
	steps int   // steps parsed so far in the frame
	slow  int64 // bytes the frame's steps decode through SlowDecode stages
	batch bool  // entries of a tensors frame: whole tensors only

	params []byte // scratch: the parameters of a step as its stage writes them
}

func (r *headerReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *headerReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.fail(corruptf("header ends early at byte %d", r.pos))
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *headerReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		r.fail(corruptf("bad varint at header byte %d", r.pos))
		return 0
	}
	if n > 1 && r.b[r.pos+n-1] == 0 {
		// One value, one encoding: writers use binary.AppendUvarint.
		r.fail(corruptf("varint at header byte %d is not in its shortest form", r.pos))
		return 0
	}
	r.pos += n
	return v
}

// int reads a uvarint that must not exceed max; what names it in errors.
func (r *headerReader) int(max int64, what string) int64 {
	v := r.uvarint()
	if r.err == nil && v > uint64(max) {
		r.fail(limitf("%s %d exceeds %d", what, v, max))
		return 0
	}
	return int64(v)
}

func (r *headerReader) bytes(n int64) []byte {
	if r.err != nil {
		return nil
	}
	if n > int64(len(r.b)-r.pos) {
		r.fail(corruptf("field of %d bytes overruns header at byte %d", n, r.pos))
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

func (r *headerReader) str(what string) string {
	n := r.int(int64(r.lim.MaxNameLen), what+" length")
	return string(r.bytes(n))
}

// ErrNotFrame reports input that is not tensorpress data at all (a zstd
// or gzip file, text): its first bytes are not the start of a frame of any
// format version. It wraps ErrCorrupt. docs/FORMAT.md ("Telling a frame
// from other data") says how a reader tells.
var ErrNotFrame error = notFrameError{}

type notFrameError struct{}

func (notFrameError) Error() string { return "codec: not a tensorpress stream" }
func (notFrameError) Unwrap() error { return ErrCorrupt }

func notFrame(lead byte, why string) error {
	return fmt.Errorf("%w: lead byte %#02x: %s", ErrNotFrame, lead, why)
}

// ReadFrameHeader reads and checks the lead, header length, header and
// header CRC of the next frame from br, and parses the header. buf is
// reused for the header bytes when large enough. Nothing that depends on
// the input is allocated before the CRC matches. Input that is not
// tensorpress data gives an error wrapping ErrNotFrame.
func ReadFrameHeader(br io.ByteReader, rd io.Reader, lim Limits, buf []byte) (*FrameHeader, []byte, error) {
	lim = lim.withDefaults()
	lead, err := br.ReadByte()
	if err != nil {
		return nil, buf, err // io.EOF at a frame boundary is a clean end
	}
	if lead>>leadVersionShift == 0 {
		return nil, buf, notFrame(lead, "format version 0 does not exist")
	}
	hlen, err := readUvarint(br)
	if err != nil {
		return nil, buf, envelopeErr(lead, err)
	}
	if hlen > uint64(lim.MaxHeaderSize) {
		return nil, buf, envelopeErr(lead, limitf("header of %d bytes exceeds %d", hlen, lim.MaxHeaderSize))
	}
	need := int(hlen) + 4
	if cap(buf) < need {
		buf = make([]byte, need, max(need, 512))
	}
	buf = buf[:need]
	n, err := io.ReadFull(rd, buf)
	if err := checkMagic(lead, hlen, buf[:n]); err != nil {
		return nil, buf, err
	}
	if err != nil {
		return nil, buf, envelopeErr(lead, unexpected(err))
	}
	var pre [5]byte
	pre[0] = lead
	npre := 1 + binary.PutUvarint(pre[1:], hlen)
	h, err := checkHeader(pre[:npre], buf[:hlen], buf[hlen:], &lim)
	return h, buf, err
}

// parseFrameHeader is ReadFrameHeader for a frame held in memory: the
// header is checked and parsed in place. lim must have its defaults.
func parseFrameHeader(src []byte, lim *Limits) (*FrameHeader, error) {
	if len(src) == 0 {
		return nil, io.ErrUnexpectedEOF
	}
	lead := src[0]
	if lead>>leadVersionShift == 0 {
		return nil, notFrame(lead, "format version 0 does not exist")
	}
	hlen, err := readUvarint(&sliceReader{b: src[1:min(len(src), 5)]})
	if err != nil {
		return nil, envelopeErr(lead, err)
	}
	if hlen > uint64(lim.MaxHeaderSize) {
		return nil, envelopeErr(lead, limitf("header of %d bytes exceeds %d", hlen, lim.MaxHeaderSize))
	}
	npre := 1 + uvarintLen(hlen)
	end := npre + int(hlen) + 4
	if err := checkMagic(lead, hlen, src[npre:min(end, len(src))]); err != nil {
		return nil, err
	}
	if end > len(src) {
		return nil, envelopeErr(lead, io.ErrUnexpectedEOF)
	}
	return checkHeader(src[:npre], src[npre:end-4], src[end-4:end], lim)
}

// sliceReader is an io.ByteReader over a slice that does not escape.
type sliceReader struct {
	b []byte
	i int
}

func (r *sliceReader) ReadByte() (byte, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	r.i++
	return r.b[r.i-1], nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// envelopeErr is err, found while reading the header length, header and
// header CRC of a frame with this lead byte. A lead byte of another format
// version whose envelope cannot be read whole is not a frame: only a
// matching header CRC shows a frame of a later version.
func envelopeErr(lead byte, err error) error {
	if lead>>leadVersionShift != Version {
		return notFrame(lead, fmt.Sprintf("no frame of format version %d follows (%v)", lead>>leadVersionShift, err))
	}
	return err
}

// checkMagic refuses a hello lead byte whose header (of which b holds the
// first bytes read) does not open with the hello magic. It runs before the
// header CRC: other data whose first byte reads as a hello lead (a zstd
// frame's magic does) is not a frame, not a damaged one.
func checkMagic(lead byte, hlen uint64, b []byte) error {
	if lead>>leadVersionShift != Version || FrameType(lead&leadTypeMask) != FrameHello {
		return nil
	}
	if hlen < uint64(len(helloMagic)) {
		return notFrame(lead, fmt.Sprintf("a hello header of %d bytes has no room for its magic", hlen))
	}
	b = b[:min(len(b), len(helloMagic))]
	if string(b) != string(helloMagic[:len(b)]) {
		return notFrame(lead, fmt.Sprintf("hello header opens with %q, not %q", b, helloMagic[:]))
	}
	return nil
}

// checkHeader verifies the header CRC over prefix (lead and header length)
// and hdr, then parses hdr. A frame of another format version is refused
// as unsupported once its CRC matches, and as not a frame otherwise.
func checkHeader(prefix, hdr, hcrc []byte, lim *Limits) (*FrameHeader, error) {
	lead := prefix[0]
	sum := crc32.Update(crc(prefix), castagnoli, hdr)
	if got := binary.LittleEndian.Uint32(hcrc); got != sum {
		return nil, envelopeErr(lead, fmt.Errorf("%w: header CRC %08x, computed %08x", ErrChecksum, got, sum))
	}
	if v := lead >> leadVersionShift; v != Version {
		return nil, fmt.Errorf("%w: format version %d (this reader knows %d)", ErrUnsupported, v, Version)
	}
	h, err := parseHeader(lead, hdr, lim)
	if err != nil {
		return nil, err
	}
	h.HeaderLen = len(prefix) + len(hdr) + 4
	return h, nil
}

// readUvarint reads the header length: at most 4 bytes (headers are far
// below 2^28 bytes), so a longer varint is corrupt.
func readUvarint(br io.ByteReader) (uint64, error) {
	var x uint64
	for i := 0; i < 4; i++ {
		c, err := br.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, corruptf("header length varint is not in its shortest form")
			}
			return x, nil
		}
	}
	return 0, corruptf("header length varint longer than 4 bytes")
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseHeader parses a CRC-checked header.
func parseHeader(lead byte, hdr []byte, lim *Limits) (*FrameHeader, error) {
	h := &FrameHeader{
		Type:       FrameType(lead & leadTypeMask),
		Version:    int(lead >> leadVersionShift),
		PayloadCRC: lead&leadPayloadCRC != 0,
	}
	r := &headerReader{b: hdr, lim: lim}
	switch h.Type {
	case FrameTensor:
		h.Entries = []EntryHeader{{}}
		r.tensorEntry(&h.Entries[0])
	case FrameTensors:
		n := r.int(int64(lim.MaxTensors), "tensor count")
		if r.err == nil && n == 0 {
			r.fail(corruptf("tensors frame with no tensors"))
		}
		// Each entry takes at least 5 header bytes: bound before allocating.
		if r.err == nil && n > int64(len(hdr)) {
			r.fail(corruptf("%d tensors in a %d-byte header", n, len(hdr)))
		}
		if r.err == nil {
			h.Entries = make([]EntryHeader, n)
		}
		r.batch = true
		for i := range h.Entries {
			r.tensorEntry(&h.Entries[i])
		}
	case FrameBytes:
		h.Entries = []EntryHeader{{}}
		r.bytesEntry(&h.Entries[0])
	case FrameHello:
		h.Hello = r.hello()
	case FrameEnd:
		h.End = &End{Frames: r.uvarint(), Bytes: r.uvarint()}
	case FrameControl:
		h.Control = r.uvarint()
		h.Payload = r.int(lim.MaxFrameSize, "control payload")
	default:
		return nil, fmt.Errorf("%w: frame type %d", ErrUnsupported, h.Type)
	}
	if lead&leadExtensions != 0 {
		h.Ext = r.extensions()
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.pos != len(hdr) {
		return nil, corruptf("%d unparsed bytes at the end of a %v header", len(hdr)-r.pos, h.Type)
	}
	var decoded int64
	for _, e := range h.Entries {
		h.Payload += e.Payload
		decoded += e.RawLen
	}
	if decoded > lim.MaxDecodedSize {
		return nil, limitf("frame decodes to %d bytes, more than %d", decoded, lim.MaxDecodedSize)
	}
	if h.Payload > lim.MaxFrameSize {
		return nil, limitf("payload of %d bytes exceeds %d", h.Payload, lim.MaxFrameSize)
	}
	switch {
	case (h.Type == FrameHello || h.Type == FrameEnd) && h.PayloadCRC:
		return nil, corruptf("%v frame with a payload CRC (lead bit 4 set)", h.Type)
	case h.Type == FrameControl && !h.PayloadCRC:
		return nil, corruptf("control frame without a payload CRC (lead bit 4 clear)")
	}
	return h, nil
}

func (r *headerReader) tensorEntry(e *EntryHeader) {
	lim := r.lim
	flags := r.byte()
	if flags&^tflagKnown != 0 {
		r.fail(fmt.Errorf("%w: tensor flags %#02x", ErrUnsupported, flags))
	}
	t := &e.Tensor
	t.Name = r.str("name")
	t.DType = DType(r.byte())
	if r.err == nil && (!t.DType.Valid() || t.DType == Byte) {
		r.fail(fmt.Errorf("%w: dtype %d in tensor %q", ErrUnsupported, t.DType, t.Name))
	}
	ndim := r.int(int64(lim.MaxDims), "rank")
	if r.err == nil && ndim > int64(len(r.b)-r.pos) {
		r.fail(corruptf("rank %d overruns header", ndim))
	}
	if r.err == nil {
		t.Shape = make([]int64, ndim)
	}
	for i := range t.Shape {
		t.Shape[i] = r.int(1<<62, "dimension")
	}
	t.Tags.Lossless = flags&tflagLossless != 0
	if flags&tflagTags != 0 {
		n := r.int(int64(lim.MaxTags), "tag count")
		if r.err == nil && n > int64(len(r.b)-r.pos) {
			r.fail(corruptf("%d tags overrun header", n))
		}
		for i := int64(0); i < n && r.err == nil; i++ {
			k := r.str("tag key")
			v := r.str("tag value")
			t.Tags.Extra = append(t.Tags.Extra, Tag{Key: k, Value: v})
		}
	}
	if r.err != nil {
		return
	}
	total := t.NumElements()
	if total < 0 || total > lim.MaxTensorSize/int64(t.DType.Size()) {
		r.fail(limitf("tensor %q of shape %v exceeds %d bytes", t.Name, t.Shape, lim.MaxTensorSize))
		return
	}
	e.Count = total
	if flags&tflagChunk != 0 {
		if r.batch {
			r.fail(corruptf("tensor %q: a chunk in a tensors frame (only tensor frames carry chunks)", t.Name))
			return
		}
		off, n := r.uvarint(), r.uvarint()
		if r.err == nil && (off > uint64(total) || n > uint64(total)-off) {
			r.fail(corruptf("tensor %q: chunk [%d, +%d) outside its %d elements", t.Name, off, n, total))
			return
		}
		// The field is there exactly when the entry carries part of the
		// tensor, some of it: one meaning, one encoding.
		if r.err == nil && (n == 0 || n == uint64(total)) {
			r.fail(corruptf("tensor %q: chunk [%d, +%d) of %d elements: a chunk holds at least one element and not all of them", t.Name, off, n, total))
			return
		}
		t.Offset, e.Count = int64(off), int64(n)
	}
	if flags&tflagVersion != 0 {
		t.Version = r.uvarint()
		t.Base = r.uvarint()
	}
	if r.err != nil {
		return
	}
	if e.Count > lim.MaxDecodedSize/int64(t.DType.Size()) {
		r.fail(limitf("tensor %q: %d elements of %v in one frame exceed %d bytes", t.Name, e.Count, t.DType, lim.MaxDecodedSize))
		return
	}
	e.RawLen = e.Count * int64(t.DType.Size())
	e.Coded = flags&tflagCoded != 0
	r.body(e, SegInfo{Name: "data", Elem: t.DType, Len: int(e.RawLen)})
}

func (r *headerReader) bytesEntry(e *EntryHeader) {
	flags := r.byte()
	if flags&^bflagKnown != 0 {
		r.fail(fmt.Errorf("%w: bytes frame flags %#02x", ErrUnsupported, flags))
	}
	e.Tensor.DType = Byte
	e.Count = r.int(r.lim.MaxDecodedSize, "bytes frame length")
	e.RawLen = e.Count
	e.Tensor.Shape = []int64{e.Count}
	e.Coded = flags&tflagCoded != 0
	if r.err == nil {
		r.body(e, SegInfo{Name: "data", Elem: Byte, Len: int(e.RawLen)})
	}
}

// body parses the step list and the stored-segment table, and checks them
// against each other by planning the steps forward from root.
func (r *headerReader) body(e *EntryHeader, root SegInfo) {
	lim := r.lim
	if !e.Coded {
		e.Stored = []SegInfo{root}
		e.Payload = int64(root.Len)
		return
	}
	nsteps := r.int(int64(lim.MaxSegments), "step count")
	if r.err == nil && (nsteps == 0 || nsteps > int64(len(r.b)-r.pos)) {
		r.fail(corruptf("coded entry with %d steps", nsteps))
	}
	if r.err == nil && root.Len == 0 {
		r.fail(corruptf("coded entry with no data")) // writers store empty data raw
	}
	if r.steps += int(nsteps); r.err == nil && r.steps > frameSteps(lim) {
		r.fail(limitf("more than %d steps in one frame", frameSteps(lim)))
	}
	if r.err != nil {
		return
	}
	e.Steps = make([]StepRecord, nsteps)
	segs := make([]SegInfo, 1, min(int(nsteps)+1, lim.MaxSegments))
	segs[0] = root
	// Decoding work (bytes produced by all steps) is bounded by a multiple
	// of what the entry decodes to, so that a small frame cannot make the
	// decoder produce gigabytes of intermediate segments.
	work, maxWork := int64(0), maxDecodeWork(int64(root.Len))
	for i := range e.Steps {
		s := &e.Steps[i]
		s.Stage = StageID(r.int(1<<32-1, "stage ID"))
		s.Input = int(r.int(int64(lim.MaxSegments), "segment index"))
		s.RawLen = int(r.int(lim.MaxDecodedSize, "segment length"))
		s.Params = r.bytes(r.int(int64(len(r.b)), "parameter length"))
		if r.err != nil {
			return
		}
		if s.Input >= len(segs) {
			r.fail(corruptf("step %d reads segment %d of %d", i, s.Input, len(segs)))
			return
		}
		in := segs[s.Input]
		if in.Len >= 0 && in.Len != s.RawLen {
			r.fail(corruptf("step %d: segment %q is %d bytes, step says %d", i, in.Name, in.Len, s.RawLen))
			return
		}
		in.Len = s.RawLen
		if work += int64(s.RawLen); work > maxWork {
			r.fail(limitf("steps decode %d bytes or more for a %d-byte entry", work, root.Len))
			return
		}
		op, err := loadOp(s.Stage, s.Params)
		if err != nil {
			r.fail(err)
			return
		}
		if op.Stage().SlowDecode {
			if r.slow += int64(s.RawLen); r.slow > lim.MaxSlowDecoded {
				r.fail(limitf("step %d (%s): the frame decodes %d bytes or more through stages that decode at some MB/s, more than %d", i, op, r.slow, lim.MaxSlowDecoded))
				return
			}
		}
		// Parameters have one encoding: the one the stage writes (minimal
		// varints, no trailing bytes). Whatever Load accepted beyond that
		// is refused here, for every stage alike.
		if r.params = op.AppendParams(r.params[:0]); !bytes.Equal(r.params, s.Params) {
			r.fail(corruptf("step %d (%s): parameters %x are not in the stage's form %x", i, op, s.Params, r.params))
			return
		}
		outs, err := op.Outputs(in)
		if err != nil {
			r.fail(fmt.Errorf("%w: step %d (%s): %v", ErrCorrupt, i, op, err))
			return
		}
		if int(nsteps)+len(segs)-1+len(outs) > lim.MaxSegments {
			r.fail(limitf("more than %d steps and stored segments", lim.MaxSegments))
			return
		}
		s.op, s.nout, s.in = op, len(outs), in
		segs = slices.Replace(segs, s.Input, s.Input+1, outs...)
	}
	n := r.int(int64(lim.MaxSegments), "stored segment count")
	if r.err == nil && int(n) != len(segs) {
		r.fail(corruptf("%d stored segments, the steps make %d", n, len(segs)))
	}
	if r.err != nil {
		return
	}
	for i := range segs {
		l := r.int(lim.MaxFrameSize, "stored segment length")
		if r.err != nil {
			return
		}
		if segs[i].Len >= 0 && int64(segs[i].Len) != l {
			r.fail(corruptf("segment %q stored as %d bytes, expected %d", segs[i].Name, l, segs[i].Len))
			return
		}
		segs[i].Len = int(l)
		e.Payload += l
	}
	e.Stored = segs
}

// maxDecodeWork is the most bytes the steps of an entry of n decoded bytes
// may produce in all: 4 times n plus 64 KiB. Real recipes stay far below
// (a split, a filter and a coder per segment produce about 3n), and the
// decoder's scratch for the entry stays under this bound.
func maxDecodeWork(n int64) int64 { return 4*n + 64<<10 }

// frameSteps is the most steps a frame may record over all its entries.
func frameSteps(lim *Limits) int { return 16 * lim.MaxSegments }

func (r *headerReader) hello() *Hello {
	h := &Hello{}
	if m := r.bytes(4); r.err == nil && [4]byte(m) != helloMagic {
		r.fail(corruptf("hello magic %q", m))
	}
	h.MinVersion, h.MaxVersion = r.byte(), r.byte()
	copy(h.Session[:], r.bytes(16))
	h.Peer = r.str("peer ID")
	n := r.int(1<<16, "capability count")
	if r.err == nil && n > int64(len(r.b)-r.pos) {
		r.fail(corruptf("%d capabilities overrun header", n))
	}
	for i := int64(0); i < n && r.err == nil; i++ {
		h.Stages = append(h.Stages, StageID(r.int(1<<32-1, "stage ID")))
	}
	h.MaxFrame = r.uvarint()
	return h
}

func (r *headerReader) extensions() []Extension {
	n := r.int(int64(len(r.b)-r.pos), "extension area length")
	area := r.bytes(n)
	if r.err != nil {
		return nil
	}
	sub := &headerReader{b: area, lim: r.lim}
	var out []Extension
	for sub.pos < len(area) && sub.err == nil {
		k := sub.uvarint()
		v := sub.bytes(sub.int(int64(len(area)), "extension length"))
		if sub.err == nil && k&1 == 1 {
			sub.fail(fmt.Errorf("%w: critical extension %d", ErrUnsupported, k))
		}
		out = append(out, Extension{Key: k, Value: v})
	}
	r.fail(sub.err)
	return out
}
