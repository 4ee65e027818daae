package tensorfile

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/tensorpress/tensorpress/codec"
)

// SafetensorsWriter writes a safetensors file as a stream: the header when it
// is made, then the tensors' bytes, which the caller supplies in the order of
// Tensors() through Write or WriteTensor. It checks every length; Close
// reports data left unwritten. A SafetensorsWriter is not safe for concurrent
// use. It does not buffer: give it a bufio.Writer for many small writes.
type SafetensorsWriter struct {
	w       io.Writer
	tensors []TensorInfo // layout, in data order
	index   map[string]int
	total   int64
	written int64
	err     error // sticky: a write failed or the writer was closed
}

var errWriterClosed = errors.New("tensorfile: safetensors: writer is closed")

var (
	_ io.Writer = (*SafetensorsWriter)(nil)
	_ io.Closer = (*SafetensorsWriter)(nil)
	_ io.Closer = (*SafetensorsFile)(nil)
)

// NewSafetensorsWriter checks the tensors and metadata, lays the tensors out
// and writes the header to w. The Begin and End of the infos are ignored:
// the tensors are packed back to back, in the reference order (dtype
// descending in the order U64 I64 F64 F32 U32 I32 BF16 F16 U16 I16 I8 U8
// BOOL, then name, bytewise ascending) or, with WithKeepOrder(true), in the
// order given. A nil meta writes no "__metadata__"; a non-nil empty one
// writes "__metadata__":{}. Metadata keys are written sorted.
//
// Names and metadata must be valid UTF-8, names unique and not
// "__metadata__", dtypes ones safetensors has (all but codec.Byte), and the
// header within the limits (WithLimits), so that what is written can be read
// back with the same limits.
func NewSafetensorsWriter(w io.Writer, tensors []TensorInfo, meta map[string]string, opts ...Option) (*SafetensorsWriter, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	layout, total, err := layoutST(tensors, meta, c)
	if err != nil {
		return nil, err
	}
	header := appendSTHeader(make([]byte, stLenSize, 256), layout, meta)
	n := len(header) - stLenSize
	if int64(n) > c.limits.MaxHeaderSize {
		return nil, stErr(isLimit, "header of %d bytes would be over the limit of %d", n, c.limits.MaxHeaderSize)
	}
	binary.LittleEndian.PutUint64(header, uint64(n))
	return newSTWriter(w, header, layout, total)
}

// NewSafetensorsWriterFromHeader writes the given JSON header unchanged (as
// Safetensors.RawHeader returns it, padding included) and then expects the
// data it describes, in file order. It reproduces any valid file byte for
// byte, canonical or not. The header is checked as OpenSafetensors checks
// it, with the limits of WithLimits.
func NewSafetensorsWriterFromHeader(w io.Writer, header []byte, opts ...Option) (*SafetensorsWriter, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if int64(len(header)) > c.limits.MaxHeaderSize {
		return nil, stErr(isLimit, "header of %d bytes is over the limit of %d", len(header), c.limits.MaxHeaderSize)
	}
	h, err := parseSTHeader(header, c.limits)
	if err != nil {
		return nil, err
	}
	var end int64
	for _, t := range h.tensors {
		end = max(end, t.End)
	}
	if err := h.checkLayout(end); err != nil {
		return nil, err
	}
	buf := make([]byte, stLenSize, stLenSize+len(header))
	binary.LittleEndian.PutUint64(buf, uint64(len(header)))
	return newSTWriter(w, append(buf, header...), h.tensors, h.total)
}

func newSTWriter(w io.Writer, header []byte, layout []TensorInfo, total int64) (*SafetensorsWriter, error) {
	if _, err := w.Write(header); err != nil {
		return nil, fmt.Errorf("tensorfile: safetensors: writing the header: %w", err)
	}
	index := make(map[string]int, len(layout))
	for i, t := range layout {
		index[t.Name] = i
	}
	return &SafetensorsWriter{w: w, tensors: layout, index: index, total: total}, nil
}

// Tensors returns the layout: every tensor with its data_offsets, in the
// order its bytes must be written. The slice is the caller's.
func (sw *SafetensorsWriter) Tensors() []TensorInfo {
	out := slices.Clone(sw.tensors)
	for i := range out {
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Write writes the next len(p) bytes of the data buffer; it may span
// tensors. Writing past the end of the last tensor is an error and writes
// nothing.
func (sw *SafetensorsWriter) Write(p []byte) (int, error) {
	if sw.err != nil {
		return 0, sw.err
	}
	if int64(len(p)) > sw.total-sw.written {
		return 0, fmt.Errorf("tensorfile: safetensors: write of %d bytes at data offset %d goes past the end of the data (%d bytes)",
			len(p), sw.written, sw.total)
	}
	n, err := sw.w.Write(p)
	sw.written += int64(n)
	if err != nil {
		sw.err = fmt.Errorf("tensorfile: safetensors: writing data: %w", err)
		return n, sw.err
	}
	return n, nil
}

// WriteTensor writes the bytes of the whole tensor t, which must be the next
// one: every tensor before it in Tensors() written, and its name, dtype,
// shape and data length those of the layout.
func (sw *SafetensorsWriter) WriteTensor(t *codec.Tensor) error {
	if sw.err != nil {
		return sw.err
	}
	i, ok := sw.index[t.Name]
	if !ok {
		return fmt.Errorf("tensorfile: safetensors: tensor %q is not in the header", t.Name)
	}
	ti := &sw.tensors[i]
	if t.DType != ti.DType || !slices.Equal(t.Shape, ti.Shape) {
		return fmt.Errorf("tensorfile: safetensors: tensor %q is %v %v, the header says %v %v",
			t.Name, t.DType, t.Shape, ti.DType, ti.Shape)
	}
	if t.Offset != 0 || int64(len(t.Data)) != ti.Size() {
		return fmt.Errorf("tensorfile: safetensors: tensor %q has %d data bytes at element %d, want the whole %d",
			t.Name, len(t.Data), t.Offset, ti.Size())
	}
	if sw.written != ti.Begin {
		return fmt.Errorf("tensorfile: safetensors: tensor %q starts at data offset %d, but %d bytes have been written",
			t.Name, ti.Begin, sw.written)
	}
	_, err := sw.Write(t.Data)
	return err
}

// Close checks that all the data was written. It does not close the
// underlying writer. Writes after Close fail.
func (sw *SafetensorsWriter) Close() error {
	if sw.err == errWriterClosed {
		return nil
	}
	err := sw.err
	if err == nil && sw.written != sw.total {
		name := ""
		for _, t := range sw.tensors {
			if t.End > sw.written {
				name = t.Name
				break
			}
		}
		err = fmt.Errorf("tensorfile: safetensors: closed after %d of %d data bytes; tensor %q is incomplete",
			sw.written, sw.total, name)
	}
	sw.err = errWriterClosed
	return err
}

// WriteSafetensors writes a whole safetensors file: NewSafetensorsWriter
// with the tensors' names, dtypes and shapes, then their data in layout
// order. Each tensor must be whole (Offset 0, len(Data) == NumBytes()).
// Without WithKeepOrder it writes what the reference writer writes for the
// same tensors and metadata (with at most one metadata key; see the package
// documentation).
func WriteSafetensors(w io.Writer, tensors []*codec.Tensor, meta map[string]string, opts ...Option) error {
	infos := make([]TensorInfo, len(tensors))
	byName := make(map[string]*codec.Tensor, len(tensors))
	for i, t := range tensors {
		if t == nil {
			return fmt.Errorf("tensorfile: safetensors: tensor %d is nil", i)
		}
		infos[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape}
		byName[t.Name] = t
	}
	sw, err := NewSafetensorsWriter(w, infos, meta, opts...)
	if err != nil {
		return err
	}
	for _, ti := range sw.tensors {
		if err := sw.WriteTensor(byName[ti.Name]); err != nil {
			return err
		}
	}
	return sw.Close()
}

// layoutST checks the tensors and metadata for writing and returns the
// tensors with their offsets, in data order, and the data size.
func layoutST(tensors []TensorInfo, meta map[string]string, c config) ([]TensorInfo, int64, error) {
	l := c.limits
	if len(tensors) > l.MaxTensors {
		return nil, 0, stErr(isLimit, "%d tensors is over the limit of %d", len(tensors), l.MaxTensors)
	}
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, 0, stErr(isCorrupt, "%s entry %q is not valid UTF-8", metadataKey, k)
		}
		if len(k) > l.MaxNameLen {
			return nil, 0, stErr(isLimit, "%s key of %d bytes is over the limit of %d", metadataKey, len(k), l.MaxNameLen)
		}
	}
	out := make([]TensorInfo, len(tensors))
	seen := make(map[string]struct{}, len(tensors))
	for i, t := range tensors {
		what := fmt.Sprintf("tensor %q", t.Name)
		if !utf8.ValidString(t.Name) {
			return nil, 0, stErr(isCorrupt, "%s: name is not valid UTF-8", what)
		}
		if t.Name == metadataKey {
			return nil, 0, stErr(isCorrupt, "a tensor cannot be named %q", metadataKey)
		}
		if len(t.Name) > l.MaxNameLen {
			return nil, 0, stErr(isLimit, "%s: name of %d bytes is over the limit of %d", what, len(t.Name), l.MaxNameLen)
		}
		if _, dup := seen[t.Name]; dup {
			return nil, 0, stErr(isCorrupt, "duplicate tensor %q", t.Name)
		}
		seen[t.Name] = struct{}{}
		if _, _, ok := stDTypeName(t.DType); !ok {
			return nil, 0, stErr(isUnsupported, "%s: dtype %v has no safetensors name", what, t.DType)
		}
		if len(t.Shape) > l.MaxDims {
			return nil, 0, stErr(isLimit, "%s: %d dimensions is over the limit of %d", what, len(t.Shape), l.MaxDims)
		}
		n, ok := byteSize(t.DType, t.Shape)
		if !ok {
			return nil, 0, stErr(isCorrupt, "%s: shape %v of %v is negative or overflows", what, t.Shape, t.DType)
		}
		out[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), End: n}
	}
	if !c.keepOrder {
		slices.SortFunc(out, compareRef)
	}
	var pos int64
	for i := range out {
		n := out[i].End
		if n > math.MaxInt64-pos {
			return nil, 0, stErr(isLimit, "data of more than 2^63 bytes")
		}
		out[i].Begin, out[i].End = pos, pos+n
		pos += n
	}
	return out, pos, nil
}

// compareRef is the reference writer's order: dtype rank descending, then
// name ascending (Rust's String ordering, bytewise, as Go's).
func compareRef(a, b TensorInfo) int {
	_, ra, _ := stDTypeName(a.DType)
	_, rb, _ := stDTypeName(b.DType)
	if ra != rb {
		return cmp.Compare(rb, ra)
	}
	return cmp.Compare(a.Name, b.Name)
}

// isCanonicalOrder reports whether tensors are in the reference order.
func isCanonicalOrder(tensors []TensorInfo) bool {
	return slices.IsSortedFunc(tensors, compareRef)
}

// appendSTHeader appends the JSON header the reference writer produces for
// tensors (already laid out, in data order) and meta: serde_json's compact
// form, "__metadata__" first with its keys sorted, each tensor's fields in
// the order dtype, shape, data_offsets, padded with spaces to a multiple of
// 8 bytes.
func appendSTHeader(dst []byte, tensors []TensorInfo, meta map[string]string) []byte {
	start := len(dst)
	dst = append(dst, '{')
	if meta != nil {
		dst = appendJSONString(dst, metadataKey)
		dst = append(dst, ":{"...)
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = appendJSONString(dst, meta[k])
		}
		dst = append(dst, '}')
	}
	for i, t := range tensors {
		if i > 0 || meta != nil {
			dst = append(dst, ',')
		}
		name, _, _ := stDTypeName(t.DType)
		dst = appendJSONString(dst, t.Name)
		dst = append(dst, `:{"dtype":"`...)
		dst = append(dst, name...)
		dst = append(dst, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, d, 10)
		}
		dst = append(dst, `],"data_offsets":[`...)
		dst = strconv.AppendInt(dst, t.Begin, 10)
		dst = append(dst, ',')
		dst = strconv.AppendInt(dst, t.End, 10)
		dst = append(dst, "]}"...)
	}
	dst = append(dst, '}')
	for (len(dst)-start)%8 != 0 {
		dst = append(dst, ' ')
	}
	return dst
}

// appendJSONString appends s as serde_json writes it: '"' and '\\'
// escaped, the controls \b \t \n \f \r by name and the others as \u00xx
// (lowercase hex), everything else (DEL, '/', non-ASCII) as it is. s must be
// valid UTF-8.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, '"')
}

// AppendSafetensorsHeader appends the JSON header (without its length
// prefix, padded with spaces to a multiple of 8 bytes) of a file whose
// tensors lie at the data_offsets given (Begin, End), for a writer that
// places each tensor's bytes itself, in any order, and writes the header
// last: a file written as its tensors arrive. The tensors are checked as
// NewSafetensorsWriter checks them, and their offsets must tile the data
// buffer exactly, as a reader requires; the header is written in the
// order of the offsets. A reader accepts more padding (spaces) after it.
func AppendSafetensorsHeader(dst []byte, tensors []TensorInfo, meta map[string]string, opts ...Option) ([]byte, error) {
	c, err := newConfig(opts)
	if err != nil {
		return dst, err
	}
	c.keepOrder = true
	sorted := slices.Clone(tensors)
	slices.SortStableFunc(sorted, func(a, b TensorInfo) int { return cmpInt64(a.Begin, b.Begin) })
	layout, _, err := layoutST(sorted, meta, c)
	if err != nil {
		return dst, err
	}
	for i, t := range sorted {
		if t.Begin != layout[i].Begin || t.End != layout[i].End {
			return dst, stErr(isCorrupt, "tensor %q at data_offsets [%d, %d]: want [%d, %d] (the tensors must tile the data buffer)",
				t.Name, t.Begin, t.End, layout[i].Begin, layout[i].End)
		}
	}
	start := len(dst)
	dst = appendSTHeader(dst, layout, meta)
	if n := int64(len(dst) - start); n > c.limits.MaxHeaderSize {
		return dst[:start], stErr(isLimit, "header of %d bytes would be over the limit of %d", n, c.limits.MaxHeaderSize)
	}
	return dst, nil
}
