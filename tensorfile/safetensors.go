package tensorfile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/tensorpress/tensorpress/codec"
)

// Safetensors file layout (little-endian; huggingface/safetensors):
//
//	offset 0      u64 N: the length of the JSON header in bytes
//	offset 8      N bytes: a JSON object, UTF-8, starting with '{'; the
//	              reference writer pads it with spaces to a multiple of 8
//	offset 8+N    the data buffer: every tensor's bytes, little-endian,
//	              row-major, back to back, covering the buffer exactly
//
// The JSON object maps each tensor name to
//
//	{"dtype":"F32","shape":[2,3],"data_offsets":[BEGIN,END]}
//
// with BEGIN and END relative to the data buffer, and may hold one
// "__metadata__" entry: an object of string values.
const stLenSize = 8

// metadataKey is the header key that holds the free-form metadata.
const metadataKey = "__metadata__"

// stDType maps a safetensors dtype name to a codec.DType. rank is the
// dtype's position in the reference implementation's Dtype enum (0.5/0.6:
// BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 I16 U16 F16 BF16
// I32 U32 F32 C64 F64 I64 U64), which its writer sorts by, descending.
var stDTypes = []struct {
	name string
	dt   codec.DType
	rank int
}{
	{"BOOL", codec.Bool, 0},
	{"U8", codec.U8, 4},
	{"I8", codec.I8, 5},
	{"I16", codec.I16, 9},
	{"U16", codec.U16, 10},
	{"F16", codec.F16, 11},
	{"BF16", codec.BF16, 12},
	{"I32", codec.I32, 13},
	{"U32", codec.U32, 14},
	{"F32", codec.F32, 15},
	{"F64", codec.F64, 17},
	{"I64", codec.I64, 18},
	{"U64", codec.U64, 19},
}

// stUnsupported are dtypes the reference defines that codec.DType lacks.
var stUnsupported = []string{"F4", "F6_E2M3", "F6_E3M2", "F8_E5M2", "F8_E4M3", "F8_E8M0", "C64"}

// stDTypeByName returns the codec.DType for a safetensors dtype name.
func stDTypeByName(name string) (codec.DType, error) {
	for _, d := range stDTypes {
		if d.name == name {
			return d.dt, nil
		}
	}
	if slices.Contains(stUnsupported, name) {
		return 0, fmt.Errorf("dtype %s is not supported (tensorpress has no such element type)", name)
	}
	return 0, fmt.Errorf("unknown dtype %q", name)
}

// stDTypeName returns the safetensors name and sort rank of dt.
func stDTypeName(dt codec.DType) (string, int, bool) {
	for _, d := range stDTypes {
		if d.dt == dt {
			return d.name, d.rank, true
		}
	}
	return "", 0, false
}

// TensorInfo describes one tensor of a file. In a safetensors file Begin
// and End are its data_offsets: byte offsets relative to the start of the
// data buffer (Safetensors.DataOffset bytes into the file); ONNX and TFJS
// say what theirs are.
type TensorInfo struct {
	Name       string
	DType      codec.DType
	Shape      []int64
	Begin, End int64
}

// Size is the tensor's length in bytes, End-Begin.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// Safetensors is an opened safetensors file: its validated header, and the
// io.ReaderAt that tensors are read from on demand. Its methods are safe for
// concurrent use when the ReaderAt is (an *os.File is).
type Safetensors struct {
	r         io.ReaderAt
	size      int64
	dataStart int64
	header    []byte // the raw JSON header, padding included
	tensors   []TensorInfo
	index     map[string]int
	meta      map[string]string // nil when the header has no __metadata__
	canonical bool
	limits    Limits
}

// OpenSafetensors reads and validates the header of the safetensors file of
// the given size that r reads. It reads the 8-byte length and the header,
// nothing else; tensors are read when asked for.
//
// Every rule of the format is checked (see the package documentation), and
// the file must end where the last tensor does. The options that apply are
// WithLimits.
func OpenSafetensors(r io.ReaderAt, size int64, opts ...Option) (*Safetensors, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("tensorfile: safetensors: negative file size %d", size)
	}
	var lenBuf [stLenSize]byte
	if size < stLenSize {
		return nil, formatErr(fmtST, 0, isCutShort, "file of %d bytes is too short for the 8-byte header length", size)
	}
	if err := readFullAt(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("tensorfile: safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > uint64(c.limits.MaxHeaderSize) {
		return nil, formatErr(fmtST, 0, isLimit, "header length %d is over the limit of %d bytes", n, c.limits.MaxHeaderSize)
	}
	if n > uint64(size-stLenSize) {
		return nil, formatErr(fmtST, 0, isCutShort, "header length %d is past the end of the file (%d bytes)", n, size)
	}
	header := make([]byte, n)
	if err := readFullAt(r, header, stLenSize); err != nil {
		return nil, fmt.Errorf("tensorfile: safetensors: reading the header: %w", err)
	}
	h, err := parseSTHeader(header, c.limits)
	if err != nil {
		return nil, err
	}
	dataLen := size - stLenSize - int64(n)
	if err := h.checkLayout(dataLen); err != nil {
		return nil, err
	}
	s := &Safetensors{
		r:         r,
		size:      size,
		dataStart: stLenSize + int64(n),
		header:    header,
		tensors:   h.tensors,
		index:     h.index,
		meta:      h.meta,
		limits:    c.limits,
	}
	s.canonical = isCanonicalOrder(s.tensors) && bytes.Equal(appendSTHeader(nil, s.tensors, s.meta), header)
	return s, nil
}

// readFullAt reads len(b) bytes at off, treating a short read as
// io.ErrUnexpectedEOF.
func readFullAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Len is the number of tensors.
func (s *Safetensors) Len() int { return len(s.tensors) }

// Info describes tensor i, 0 <= i < Len(), in file order (ascending
// data_offsets; tensors of zero size at the same offset in header order).
// The Shape is the caller's.
func (s *Safetensors) Info(i int) TensorInfo {
	t := s.tensors[i]
	t.Shape = slices.Clone(t.Shape)
	return t
}

// Tensors describes every tensor in file order. The slice is the caller's.
func (s *Safetensors) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(s.tensors))
	for i := range s.tensors {
		out[i] = s.Info(i)
	}
	return out
}

// Index returns the position of the named tensor in file order, or -1.
func (s *Safetensors) Index(name string) int {
	if i, ok := s.index[name]; ok {
		return i
	}
	return -1
}

// Metadata returns a copy of the __metadata__ map, or nil when the header has
// none (or has it as null). An empty, non-nil map means "__metadata__":{}.
func (s *Safetensors) Metadata() map[string]string {
	if s.meta == nil {
		return nil
	}
	m := make(map[string]string, len(s.meta))
	for k, v := range s.meta {
		m[k] = v
	}
	return m
}

// RawHeader returns a copy of the JSON header exactly as stored, padding
// included. NewSafetensorsWriterFromHeader writes it back unchanged.
func (s *Safetensors) RawHeader() []byte { return bytes.Clone(s.header) }

// DataOffset is where the data buffer starts in the file: 8 + len(RawHeader).
func (s *Safetensors) DataOffset() int64 { return s.dataStart }

// Size is the file size given to OpenSafetensors.
func (s *Safetensors) Size() int64 { return s.size }

// Canonical reports whether the file is byte for byte what
// WriteSafetensors writes for its tensors and metadata, so that reading it
// and writing it back reproduces it without RawHeader. See the package
// documentation for the canonical layout.
func (s *Safetensors) Canonical() bool { return s.canonical }

// readNamed reads the entry called name through readIndex, or gives an
// error wrapping ErrNotFound: the Read of every reader.
func readNamed(index map[string]int, name string, readIndex func(int) (*codec.Tensor, error)) (*codec.Tensor, error) {
	i, ok := index[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return readIndex(i)
}

// Read reads the named tensor; see ReadIndex. A name the file lacks gives an
// error wrapping ErrNotFound.
func (s *Safetensors) Read(name string) (*codec.Tensor, error) {
	return readNamed(s.index, name, s.ReadIndex)
}

// ReadIndex reads tensor i of file order into a new tensor whose Data is a
// fresh 8-byte aligned buffer owned by the caller. Tensors over
// Limits.MaxTensorBytes are refused with codec.ErrLimit before allocating;
// stream them with Section. A file that turns out shorter than its size
// gives an error wrapping io.ErrUnexpectedEOF.
func (s *Safetensors) ReadIndex(i int) (*codec.Tensor, error) {
	if i < 0 || i >= len(s.tensors) {
		return nil, fmt.Errorf("tensorfile: safetensors: tensor index %d out of range [0, %d)", i, len(s.tensors))
	}
	ti := &s.tensors[i]
	data, err := s.limits.alloc(fmtST, "tensor", ti.Name, ti.Size())
	if err != nil {
		return nil, err
	}
	if err := readFullAt(s.r, data, s.dataStart+ti.Begin); err != nil {
		return nil, fmt.Errorf("tensorfile: safetensors: reading tensor %q: %w", ti.Name, err)
	}
	return &codec.Tensor{Name: ti.Name, DType: ti.DType, Shape: slices.Clone(ti.Shape), Data: data}, nil
}

// Section returns a reader of tensor i's bytes, for streaming a tensor
// without holding it in memory. It shares the file's ReaderAt.
func (s *Safetensors) Section(i int) (*io.SectionReader, error) {
	if i < 0 || i >= len(s.tensors) {
		return nil, fmt.Errorf("tensorfile: safetensors: tensor index %d out of range [0, %d)", i, len(s.tensors))
	}
	ti := &s.tensors[i]
	return io.NewSectionReader(s.r, s.dataStart+ti.Begin, ti.Size()), nil
}

// SafetensorsFile is a Safetensors reading from a file it owns.
type SafetensorsFile struct {
	*Safetensors
	f *os.File
}

// OpenSafetensorsFile opens the file at path with OpenSafetensors. Close it
// when done.
func OpenSafetensorsFile(path string, opts ...Option) (*SafetensorsFile, error) {
	s, f, err := openFile(path, func(r io.ReaderAt, size int64) (*Safetensors, error) { return OpenSafetensors(r, size, opts...) })
	if err != nil {
		return nil, err
	}
	return &SafetensorsFile{Safetensors: s, f: f}, nil
}

// openFile opens the file at path and what open reads of it, and closes
// the file again when open fails.
func openFile[T any](path string, open func(r io.ReaderAt, size int64) (T, error)) (T, *os.File, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, nil, fmt.Errorf("tensorfile: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return zero, nil, fmt.Errorf("tensorfile: %w", err)
	}
	m, err := open(f, fi.Size())
	if err != nil {
		f.Close()
		return zero, nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return m, f, nil
}

// Close closes the file. Sections obtained before fail after it.
func (f *SafetensorsFile) Close() error { return f.f.Close() }

// stHeader is a parsed header.
type stHeader struct {
	tensors []TensorInfo // file order once checkLayout has run
	index   map[string]int
	meta    map[string]string
	total   int64 // data bytes the tensors cover, set by checkLayout
}

// stParser walks the header's JSON tokens (jsonTokens).
type stParser struct {
	jsonTokens
	limits Limits
}

// parseSTHeader parses and checks a JSON header, except for the layout of
// the tensors in the data buffer (checkLayout).
func parseSTHeader(header []byte, limits Limits) (*stHeader, error) {
	if len(header) == 0 {
		return nil, formatErr(fmtST, stLenSize, isCorrupt, "empty header")
	}
	if header[0] != '{' {
		return nil, formatErr(fmtST, stLenSize, isCorrupt, "header does not start with '{'")
	}
	if !utf8.Valid(header) {
		return nil, formatErr(fmtST, stLenSize, isCorrupt, "header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	p := &stParser{jsonTokens: jsonTokens{dec: dec, format: fmtST, base: stLenSize, doc: "header JSON"}, limits: limits}
	h := &stHeader{index: make(map[string]int)}
	if err := p.delim('{', "the header"); err != nil {
		return nil, err
	}
	metaSeen := false
	for dec.More() {
		key, err := p.key("the header")
		if err != nil {
			return nil, err
		}
		if key == metadataKey {
			if metaSeen {
				return nil, p.corrupt("duplicate key %q", metadataKey)
			}
			metaSeen = true
			if h.meta, err = p.metadata(); err != nil {
				return nil, err
			}
			continue
		}
		if _, dup := h.index[key]; dup {
			return nil, p.corrupt("duplicate tensor %q", key)
		}
		if len(h.tensors) >= limits.MaxTensors {
			return nil, stErr(isLimit, "more than %d tensors", limits.MaxTensors)
		}
		if len(key) > limits.MaxNameLen {
			return nil, stErr(isLimit, "tensor name of %d bytes is over the limit of %d", len(key), limits.MaxNameLen)
		}
		ti, err := p.tensor(key)
		if err != nil {
			return nil, err
		}
		h.index[key] = len(h.tensors)
		h.tensors = append(h.tensors, ti)
	}
	if err := p.delim('}', "the header"); err != nil {
		return nil, err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, p.syntax(err)
		}
		return nil, p.corrupt("unexpected %v after the header object", tok)
	}
	return h, nil
}

// describe names a token for an error message.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return "'" + v.String() + "'"
	case string:
		return "string " + strconv.Quote(v)
	case json.Number:
		return "number " + v.String()
	case bool:
		return "boolean " + strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

// metadata parses the value of __metadata__: an object of strings, or null.
func (p *stParser) metadata() (map[string]string, error) {
	tok, err := p.next()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil // the reference reads null as no metadata
	}
	if tok != json.Delim('{') {
		return nil, p.corrupt("%s is %s, want an object of strings", metadataKey, describe(tok))
	}
	m := make(map[string]string)
	for p.dec.More() {
		k, err := p.key(metadataKey)
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, p.corrupt("duplicate %s key %q", metadataKey, k)
		}
		if len(k) > p.limits.MaxNameLen {
			return nil, stErr(isLimit, "%s key of %d bytes is over the limit of %d", metadataKey, len(k), p.limits.MaxNameLen)
		}
		tok, err := p.next()
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, p.corrupt("%s value of %q is %s, want a string", metadataKey, k, describe(tok))
		}
		m[k] = v
	}
	if err := p.delim('}', metadataKey); err != nil {
		return nil, err
	}
	return m, nil
}

// tensor parses the entry of tensor name.
func (p *stParser) tensor(name string) (TensorInfo, error) {
	ti := TensorInfo{Name: name}
	what := fmt.Sprintf("tensor %q", name)
	tok, err := p.next()
	if err != nil {
		return ti, err
	}
	if tok != json.Delim('{') {
		return ti, p.corrupt("%s is %s, want an object", what, describe(tok))
	}
	const (
		haveDType = 1 << iota
		haveShape
		haveOffsets
	)
	have := 0
	for p.dec.More() {
		field, err := p.key(what)
		if err != nil {
			return ti, err
		}
		var bit int
		switch field {
		case "dtype":
			bit = haveDType
		case "shape":
			bit = haveShape
		case "data_offsets":
			bit = haveOffsets
		default:
			return ti, p.corrupt("%s: unknown field %q", what, field)
		}
		if have&bit != 0 {
			return ti, p.corrupt("%s: duplicate field %q", what, field)
		}
		have |= bit
		switch field {
		case "dtype":
			tok, err := p.next()
			if err != nil {
				return ti, err
			}
			s, ok := tok.(string)
			if !ok {
				return ti, p.corrupt("%s: dtype is %s, want a string", what, describe(tok))
			}
			dt, err := stDTypeByName(s)
			if err != nil {
				return ti, stErr(isUnsupported, "%s: %v", what, err)
			}
			ti.DType = dt
		case "shape":
			if err := p.delim('[', what+": shape"); err != nil {
				return ti, err
			}
			ti.Shape = []int64{}
			for p.dec.More() {
				if len(ti.Shape) >= p.limits.MaxDims {
					return ti, stErr(isLimit, "%s: more than %d dimensions", what, p.limits.MaxDims)
				}
				d, err := p.uint(what + ": shape")
				if err != nil {
					return ti, err
				}
				ti.Shape = append(ti.Shape, d)
			}
			if err := p.delim(']', what+": shape"); err != nil {
				return ti, err
			}
		case "data_offsets":
			if err := p.delim('[', what+": data_offsets"); err != nil {
				return ti, err
			}
			var offs [2]int64
			for i := range offs {
				if !p.dec.More() {
					return ti, p.corrupt("%s: data_offsets has %d numbers, want 2", what, i)
				}
				if offs[i], err = p.uint(what + ": data_offsets"); err != nil {
					return ti, err
				}
			}
			if p.dec.More() {
				return ti, p.corrupt("%s: data_offsets has more than 2 numbers", what)
			}
			if err := p.delim(']', what+": data_offsets"); err != nil {
				return ti, err
			}
			ti.Begin, ti.End = offs[0], offs[1]
		}
	}
	if err := p.delim('}', what); err != nil {
		return ti, err
	}
	switch {
	case have&haveDType == 0:
		return ti, p.corrupt("%s has no dtype", what)
	case have&haveShape == 0:
		return ti, p.corrupt("%s has no shape", what)
	case have&haveOffsets == 0:
		return ti, p.corrupt("%s has no data_offsets", what)
	}
	if ti.Begin > ti.End {
		return ti, stErr(isCorrupt, "%s: data_offsets [%d, %d] end before they begin", what, ti.Begin, ti.End)
	}
	dtName, _, _ := stDTypeName(ti.DType)
	want, ok := byteSize(ti.DType, ti.Shape)
	if !ok {
		return ti, stErr(isCorrupt, "%s: shape %v of %s overflows", what, ti.Shape, dtName)
	}
	if want != ti.Size() {
		return ti, stErr(isCorrupt, "%s: data_offsets [%d, %d] hold %d bytes, but shape %v of %s needs %d",
			what, ti.Begin, ti.End, ti.Size(), ti.Shape, dtName, want)
	}
	return ti, nil
}

// byteSize is the product of shape times the element size, with ok=false on
// a negative dimension or overflow.
func byteSize(dt codec.DType, shape []int64) (int64, bool) {
	n := int64(dt.Size())
	if n == 0 {
		return 0, false
	}
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// checkLayout sorts the tensors into file order and checks that they tile
// the data buffer of dataLen bytes exactly: no hole, no overlap, nothing
// past the end, nothing after the last tensor. This is the reference's rule
// (sort by data_offsets; each begins where the previous ended; the last ends
// at the end of the file).
func (h *stHeader) checkLayout(dataLen int64) error {
	for i := range h.tensors {
		t := &h.tensors[i]
		if t.End > dataLen {
			return stErr(isCutShort, "tensor %q: data_offsets [%d, %d] reach past the end of the data buffer (%d bytes): truncated file or bad offsets",
				t.Name, t.Begin, t.End, dataLen)
		}
	}
	slices.SortStableFunc(h.tensors, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmpInt64(a.Begin, b.Begin)
		}
		return cmpInt64(a.End, b.End)
	})
	var pos int64
	for i := range h.tensors {
		t := &h.tensors[i]
		switch {
		case t.Begin > pos:
			return stErr(isCorrupt, "data buffer bytes [%d, %d) before tensor %q belong to no tensor (a hole)", pos, t.Begin, t.Name)
		case t.Begin < pos:
			prev := h.tensors[i-1]
			return stErr(isCorrupt, "tensor %q at data_offsets [%d, %d] overlaps tensor %q at [%d, %d]",
				t.Name, t.Begin, t.End, prev.Name, prev.Begin, prev.End)
		}
		pos = t.End
		h.index[t.Name] = i
	}
	if pos != dataLen {
		return stErr(isCorrupt, "%d bytes after the last tensor's data belong to no tensor (data buffer of %d bytes, tensors cover %d)",
			dataLen-pos, dataLen, pos)
	}
	h.total = pos
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
