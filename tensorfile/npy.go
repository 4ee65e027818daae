package tensorfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/tensorpress/tensorpress/codec"
)

// .npy layout (numpy.lib.format):
//
//	offset 0   "\x93NUMPY"
//	offset 6   major, minor version: 1.0, 2.0 or 3.0
//	offset 8   header length L: u16 little-endian (1.0) or u32 (2.0, 3.0)
//	then       L bytes: a Python dict literal, latin-1 (1.0, 2.0) or UTF-8
//	           (3.0), such as {'descr': '<f4', 'fortran_order': False,
//	           'shape': (3, 4), } padded with spaces and a final '\n' so that
//	           the data starts at a multiple of 64 bytes (16 in old files)
//	then       the data, product(shape) elements in C order
const (
	npyMagic      = "\x93NUMPY"
	npyAlign      = 64 // numpy's ARRAY_ALIGN
	npyGrowDigits = 21 // numpy's GROWTH_AXIS_MAX_DIGITS
)

// npyDescr is the descr np.save writes for each dtype (dtype.str).
var npyDescr = map[codec.DType]string{
	codec.Bool: "|b1",
	codec.I8:   "|i1",
	codec.U8:   "|u1",
	codec.I16:  "<i2",
	codec.U16:  "<u2",
	codec.F16:  "<f2",
	codec.I32:  "<i4",
	codec.U32:  "<u4",
	codec.F32:  "<f4",
	codec.I64:  "<i8",
	codec.U64:  "<u8",
	codec.F64:  "<f8",
}

// NpyHeader is the parsed preamble of an .npy file.
type NpyHeader struct {
	Major, Minor uint8       // format version: 1.0, 2.0 or 3.0
	Descr        string      // the descr as written, e.g. "<f4"
	DType        codec.DType // the element type it maps to
	Shape        []int64     // empty for a 0-d array
	// HeaderLen is the value of the length field: the bytes of the dict
	// and its padding.
	HeaderLen int
	// Canonical reports whether the preamble is byte for byte what WriteNpy
	// (and np.save) writes for DType and Shape in this version, so that
	// WriteNpy with WithNpyVersion(Major) reproduces the file.
	Canonical bool
}

// DataOffset is where the data starts: the length of the preamble.
func (h *NpyHeader) DataOffset() int64 {
	if h.Major == 1 {
		return 10 + int64(h.HeaderLen)
	}
	return 12 + int64(h.HeaderLen)
}

// DataSize is the length of the data in bytes (the shape is checked not to
// overflow when the header is read).
func (h *NpyHeader) DataSize() int64 {
	n, _ := byteSize(h.DType, h.Shape)
	return n
}

// ReadNpyHeader reads the preamble of an .npy file from r, leaving r at the
// first data byte; it reads nothing past the header. It accepts what
// np.load accepts for the supported dtypes, and refuses with an error
// wrapping
//
//   - codec.ErrUnsupported: a format version other than 1.0, 2.0, 3.0; a
//     big-endian, object, structured, complex, string, datetime or other
//     dtype with no codec.DType; fortran_order True;
//   - codec.ErrCorrupt: a bad magic string or dict literal (syntax, missing,
//     unknown or duplicate keys, values of the wrong type), negative
//     dimensions, a shape whose byte size overflows int64;
//   - codec.ErrLimit: a header over Limits.MaxNpyHeaderSize or more
//     dimensions than Limits.MaxDims;
//   - io.ErrUnexpectedEOF: input that ends inside the preamble.
//
// An input that is empty gives io.EOF itself, so that a stream of
// concatenated arrays ends cleanly. Byte order: '<' is little-endian, '|'
// (not applicable) is accepted for any type and '=' (native) too; both are
// read as little-endian, the only byte order tensorpress runs on. Options:
// WithLimits.
func ReadNpyHeader(r io.Reader, opts ...Option) (*NpyHeader, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return readNpyHeader(r, c.limits)
}

func readNpyHeader(r io.Reader, l Limits) (*NpyHeader, error) {
	var pre [12]byte
	if n, err := io.ReadFull(r, pre[:8]); err != nil {
		if n == 0 && err == io.EOF {
			return nil, io.EOF
		}
		return nil, npyReadErr(err, "in the magic string (%d of 8 bytes)", n)
	}
	if string(pre[:6]) != npyMagic {
		return nil, formatErr(fmtNpy, 0, isCorrupt, "not an npy file: magic %q, want %q", pre[:6], npyMagic)
	}
	h := &NpyHeader{Major: pre[6], Minor: pre[7]}
	var hlen uint64
	switch {
	case h.Minor != 0 || h.Major < 1 || h.Major > 3:
		return nil, formatErr(fmtNpy, 6, isUnsupported, "format version %d.%d (want 1.0, 2.0 or 3.0)", h.Major, h.Minor)
	case h.Major == 1:
		if n, err := io.ReadFull(r, pre[8:10]); err != nil {
			return nil, npyReadErr(err, "in the header length (%d of 2 bytes)", n)
		}
		hlen = uint64(binary.LittleEndian.Uint16(pre[8:10]))
	default:
		if n, err := io.ReadFull(r, pre[8:12]); err != nil {
			return nil, npyReadErr(err, "in the header length (%d of 4 bytes)", n)
		}
		hlen = uint64(binary.LittleEndian.Uint32(pre[8:12]))
	}
	if hlen > uint64(l.MaxNpyHeaderSize) {
		return nil, formatErr(fmtNpy, 8, isLimit, "header of %d bytes is over the limit of %d", hlen, l.MaxNpyHeaderSize)
	}
	h.HeaderLen = int(hlen)
	dict := make([]byte, hlen)
	if n, err := io.ReadFull(r, dict); err != nil {
		return nil, npyReadErr(err, "in the header (%d of %d bytes)", n, hlen)
	}
	if h.Major == 3 && !utf8.Valid(dict) {
		return nil, npyErr(isCorrupt, "version 3.0 header is not valid UTF-8")
	}
	if err := parseNpyDict(h, dict, l); err != nil {
		return nil, err
	}
	pl := 10
	if h.Major > 1 {
		pl = 12
	}
	want, err := AppendNpyHeader(nil, h.DType, h.Shape, int(h.Major))
	h.Canonical = err == nil && bytes.Equal(want[:pl], pre[:pl]) && bytes.Equal(want[pl:], dict)
	return h, nil
}

// npyReadErr reports a read error in the preamble: truncation as
// io.ErrUnexpectedEOF, other errors as they are.
func npyReadErr(err error, msg string, args ...any) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return npyErr(isTruncated, "input ends "+msg, args...)
	}
	return fmt.Errorf("tensorfile: npy: reading %s: %w", fmt.Sprintf(msg, args...), err)
}

// ReadNpy reads one array from an .npy stream: the header (see
// ReadNpyHeader), then exactly the data bytes it announces, nothing more.
// The tensor has no name (the caller names it, from the file name say) and
// owns its Data, a fresh 8-byte aligned buffer. Data of more than
// Limits.MaxTensorBytes is refused with codec.ErrLimit; memory is allocated
// as the data arrives, so a header that lies about the size costs no more
// than a few times the input. Input that ends early gives an error wrapping
// io.ErrUnexpectedEOF.
func ReadNpy(r io.Reader, opts ...Option) (*codec.Tensor, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	h, err := readNpyHeader(r, c.limits)
	if err != nil {
		if err == io.EOF {
			return nil, npyErr(isTruncated, "empty input")
		}
		return nil, err
	}
	size := h.DataSize()
	if size > c.limits.MaxTensorBytes || size > math.MaxInt {
		return nil, formatErr(fmtNpy, h.DataOffset(), isLimit, "data of %d bytes (shape %v of %v) is over the limit of %d",
			size, h.Shape, h.DType, c.limits.MaxTensorBytes)
	}
	data, err := readGrowing(r, int(size))
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, formatErr(fmtNpy, h.DataOffset(), isTruncated, "input ends in the data: %d of %d bytes (shape %v of %v)",
				len(data), size, h.Shape, h.DType)
		}
		return nil, fmt.Errorf("tensorfile: npy: reading data: %w", err)
	}
	return &codec.Tensor{DType: h.DType, Shape: h.Shape, Data: data}, nil
}

// npyFirstRead is the most ReadNpy allocates before data arrives; the buffer
// then doubles as it fills.
const npyFirstRead = 16 << 20

// readGrowing reads exactly size bytes into an aligned buffer that grows as
// data arrives. On a short read it returns what it read and
// io.ErrUnexpectedEOF.
func readGrowing(r io.Reader, size int) ([]byte, error) {
	buf := codec.AlignedBytes(min(size, npyFirstRead))
	have := 0
	for {
		n, err := io.ReadFull(r, buf[have:])
		have += n
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf[:have], err
		}
		if have == size {
			return buf, nil
		}
		next := codec.AlignedBytes(min(size, 2*len(buf)))
		copy(next, buf)
		buf = next
	}
}

// npyParser is a strict parser for the subset of Python literals an .npy
// header holds: a dict with str keys, str, bool and tuple-of-int values.
type npyParser struct {
	b   []byte
	pos int
	v12 bool // version 1.0 or 2.0: accept Python 2 long suffixes (3L)
}

func (p *npyParser) errorf(msg string, args ...any) error {
	shown := p.b
	if len(shown) > 120 {
		shown = shown[:120]
	}
	return npyErr(isCorrupt, "header dict: "+msg+" (at offset %d of %q)", append(args, p.pos, shown)...)
}

func (p *npyParser) space() {
	for p.pos < len(p.b) {
		switch p.b[p.pos] {
		case ' ', '\t', '\n', '\r', '\f':
			p.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after spaces, or 0 at the end.
func (p *npyParser) peek() byte {
	p.space()
	if p.pos >= len(p.b) {
		return 0
	}
	return p.b[p.pos]
}

func (p *npyParser) expect(c byte) error {
	if p.peek() != c {
		return p.errorf("want %q", c)
	}
	p.pos++
	return nil
}

// str parses a quoted string without escapes.
func (p *npyParser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", p.errorf("want a string")
	}
	start := p.pos + 1
	for i := start; i < len(p.b); i++ {
		switch p.b[i] {
		case q:
			p.pos = i + 1
			return string(p.b[start:i]), nil
		case '\\', '\n':
			p.pos = i
			return "", p.errorf("escape or newline in a string")
		}
	}
	return "", p.errorf("unterminated string")
}

// ident parses a run of letters (True, False).
func (p *npyParser) ident() string {
	p.space()
	start := p.pos
	for p.pos < len(p.b) && (p.b[p.pos] >= 'a' && p.b[p.pos] <= 'z' || p.b[p.pos] >= 'A' && p.b[p.pos] <= 'Z') {
		p.pos++
	}
	return string(p.b[start:p.pos])
}

// dim parses a non-negative decimal integer that fits in an int64.
func (p *npyParser) dim() (int64, error) {
	p.space()
	start := p.pos
	if p.pos < len(p.b) && p.b[p.pos] == '-' {
		p.pos++
	}
	for p.pos < len(p.b) && p.b[p.pos] >= '0' && p.b[p.pos] <= '9' {
		p.pos++
	}
	s := string(p.b[start:p.pos])
	if p.v12 && p.pos < len(p.b) && (p.b[p.pos] == 'L' || p.b[p.pos] == 'l') {
		p.pos++
	}
	switch {
	case s == "" || s == "-":
		return 0, p.errorf("want an integer")
	case s[0] == '-':
		return 0, p.errorf("negative dimension %s", s)
	case len(s) > 1 && s[0] == '0':
		return 0, p.errorf("integer %s with a leading zero", s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, p.errorf("dimension %s does not fit in 63 bits", s)
	}
	return v, nil
}

// shape parses a tuple of integers: (), (5,), (2, 3), (2, 3,).
func (p *npyParser) shape(maxDims int) ([]int64, error) {
	if err := p.expect('('); err != nil {
		return nil, p.errorf("shape is not a tuple")
	}
	shape := []int64{}
	for {
		if p.peek() == ')' {
			p.pos++
			if len(shape) == 1 {
				return nil, p.errorf("shape (%d) is not a tuple; a 1-d shape is written (%d,)", shape[0], shape[0])
			}
			return shape, nil
		}
		if len(shape) >= maxDims {
			return nil, npyErr(isLimit, "shape has more than %d dimensions", maxDims)
		}
		d, err := p.dim()
		if err != nil {
			return nil, err
		}
		shape = append(shape, d)
		switch p.peek() {
		case ',':
			p.pos++
			if p.peek() == ')' {
				p.pos++
				return shape, nil
			}
		case ')':
			if len(shape) == 1 {
				return nil, p.errorf("shape (%d) is not a tuple; a 1-d shape is written (%d,)", d, d)
			}
			p.pos++
			return shape, nil
		default:
			return nil, p.errorf("want ',' or ')' in shape")
		}
	}
}

// parseNpyDict parses the header dict into h.
func parseNpyDict(h *NpyHeader, b []byte, l Limits) error {
	p := &npyParser{b: b, v12: h.Major < 3}
	if err := p.expect('{'); err != nil {
		return err
	}
	var haveDescr, haveFortran, haveShape, fortran bool
	for p.peek() != '}' {
		key, err := p.str()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		switch key {
		case "descr":
			if haveDescr {
				return p.errorf("duplicate key 'descr'")
			}
			haveDescr = true
			if c := p.peek(); c == '[' || c == '(' {
				return npyErr(isUnsupported, "structured dtype (descr is a list of fields)")
			}
			if h.Descr, err = p.str(); err != nil {
				return err
			}
		case "fortran_order":
			if haveFortran {
				return p.errorf("duplicate key 'fortran_order'")
			}
			haveFortran = true
			switch id := p.ident(); id {
			case "True":
				fortran = true
			case "False":
			default:
				return p.errorf("fortran_order is %q, want True or False", id)
			}
		case "shape":
			if haveShape {
				return p.errorf("duplicate key 'shape'")
			}
			haveShape = true
			if h.Shape, err = p.shape(l.MaxDims); err != nil {
				return err
			}
		default:
			return p.errorf("unexpected key %q", key)
		}
		if p.peek() == ',' {
			p.pos++
		} else if p.peek() != '}' {
			return p.errorf("want ',' or '}'")
		}
	}
	p.pos++
	if p.space(); p.pos != len(p.b) {
		return p.errorf("trailing characters after the dict")
	}
	switch {
	case !haveDescr:
		return p.errorf("no 'descr' key")
	case !haveFortran:
		return p.errorf("no 'fortran_order' key")
	case !haveShape:
		return p.errorf("no 'shape' key")
	}
	dt, err := npyDType(h.Descr)
	if err != nil {
		return err
	}
	h.DType = dt
	if fortran {
		return npyErr(isUnsupported, "fortran_order True (column-major data) is not supported; save np.ascontiguousarray(a) instead")
	}
	if _, ok := byteSize(h.DType, h.Shape); !ok {
		return npyErr(isCorrupt, "shape %v of %s overflows", h.Shape, h.Descr)
	}
	return nil
}

// npyDType maps a descr to a codec.DType.
func npyDType(descr string) (codec.DType, error) {
	s := descr
	order := byte('=')
	if s != "" && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=') {
		order, s = s[0], s[1:]
	}
	var dt codec.DType
	switch s {
	case "b1":
		dt = codec.Bool
	case "i1":
		dt = codec.I8
	case "u1":
		dt = codec.U8
	case "i2":
		dt = codec.I16
	case "u2":
		dt = codec.U16
	case "f2":
		dt = codec.F16
	case "i4":
		dt = codec.I32
	case "u4":
		dt = codec.U32
	case "f4":
		dt = codec.F32
	case "i8":
		dt = codec.I64
	case "u8":
		dt = codec.U64
	case "f8":
		dt = codec.F64
	default:
		kind := "dtype"
		if s != "" {
			switch s[0] {
			case 'O':
				kind = "object dtype (pickled Python objects)"
			case 'c':
				kind = "complex dtype"
			case 'U':
				kind = "unicode string dtype"
			case 'S', 'a':
				kind = "byte string dtype"
			case 'V':
				kind = "void or structured dtype"
			case 'M', 'm':
				kind = "datetime dtype"
			case 'f':
				kind = "float dtype of this size"
			}
		}
		return 0, npyErr(isUnsupported, "%s %q is not supported", kind, descr)
	}
	if order == '>' && dt.Size() > 1 {
		return 0, npyErr(isUnsupported, "big-endian dtype %q is not supported; convert with a.astype(a.dtype.newbyteorder('<'))", descr)
	}
	return dt, nil
}

// AppendNpyHeader appends the .npy preamble np.save (numpy 1.24 and later)
// writes for an array of dtype dt and shape shape, in format version
// major.0 (0 picks 1 unless the header needs version 2): the dict
// {'descr': ..., 'fortran_order': False, 'shape': (...), }, the spaces numpy
// adds so the header can grow in place (21 minus the digits of the first
// dimension, for arrays of one or more dimensions), then spaces and '\n' up
// to a multiple of 64 bytes.
func AppendNpyHeader(dst []byte, dt codec.DType, shape []int64, major int) ([]byte, error) {
	descr, ok := npyDescr[dt]
	if !ok {
		return dst, npyErr(isUnsupported, "dtype %v has no npy descr", dt)
	}
	if _, ok := byteSize(dt, shape); !ok {
		return dst, npyErr(isCorrupt, "shape %v of %v is negative or overflows", shape, dt)
	}
	if major < 0 || major > 3 {
		return dst, fmt.Errorf("tensorfile: npy: version %d, want 1, 2, 3 or 0 for automatic", major)
	}
	dict := make([]byte, 0, 128)
	dict = append(dict, "{'descr': '"...)
	dict = append(dict, descr...)
	dict = append(dict, "', 'fortran_order': False, 'shape': ("...)
	for i, d := range shape {
		if i > 0 {
			dict = append(dict, ", "...)
		}
		dict = strconv.AppendInt(dict, d, 10)
	}
	if len(shape) == 1 {
		dict = append(dict, ',')
	}
	dict = append(dict, "), }"...)
	if len(shape) > 0 {
		for range npyGrowDigits - len(strconv.FormatInt(shape[0], 10)) {
			dict = append(dict, ' ')
		}
	}
	hlen := len(dict) + 1 // the final '\n'
	pad := func(lenField int) int { return npyAlign - (8+lenField+hlen)%npyAlign }
	if major == 0 {
		major = 1
		if hlen+pad(2) > math.MaxUint16 {
			major = 2
		}
	}
	dst = append(dst, npyMagic...)
	dst = append(dst, byte(major), 0)
	if major == 1 {
		total := hlen + pad(2)
		if total > math.MaxUint16 {
			return dst[:len(dst)-8], npyErr(isLimit, "header of %d bytes does not fit version 1.0", total)
		}
		dst = binary.LittleEndian.AppendUint16(dst, uint16(total))
		dict = append(dict, bytes.Repeat([]byte{' '}, pad(2))...)
	} else {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(hlen+pad(4)))
		dict = append(dict, bytes.Repeat([]byte{' '}, pad(4))...)
	}
	dst = append(dst, dict...)
	return append(dst, '\n'), nil
}

// WriteNpy writes t as an .npy file, byte for byte what np.save writes for
// the same array (version 1.0, or 2.0 when the header needs it; see
// WithNpyVersion): numpy-written files that ReadNpy reads are reproduced
// exactly when NpyHeader.Canonical. t must be whole (Offset 0,
// len(Data) == NumBytes()); its Name is not stored. BF16 and codec.Byte have
// no npy dtype and are refused with codec.ErrUnsupported.
func WriteNpy(w io.Writer, t *codec.Tensor, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	if t == nil {
		return errors.New("tensorfile: npy: nil tensor")
	}
	hdr, err := AppendNpyHeader(nil, t.DType, t.Shape, c.npyVersion)
	if err != nil {
		return err
	}
	if t.Offset != 0 || int64(len(t.Data)) != t.NumBytes() {
		return fmt.Errorf("tensorfile: npy: tensor %q has %d data bytes at element %d, want the whole %d",
			t.Name, len(t.Data), t.Offset, t.NumBytes())
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("tensorfile: npy: writing the header: %w", err)
	}
	if len(t.Data) > 0 {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("tensorfile: npy: writing data: %w", err)
		}
	}
	return nil
}
