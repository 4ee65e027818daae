package tensorfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tensorpress/tensorpress/codec"
)

// TensorFlow.js graph model layout (tfjs-converter; the ModelJSON and
// WeightsManifestEntry types of tfjs-core/src/io/types.ts):
//
//	<model>.json  one JSON object:
//	  "format": "graph-model"
//	  "generatedBy", "convertedBy": strings (or null)
//	  "modelTopology": the graph, a GraphDef as JSON
//	  "signature", "userDefinedMetadata", "modelInitializer",
//	  "initializerSignature": optional objects
//	  "weightsManifest": [{"paths": ["group1-shard1of2.bin", ...],
//	                       "weights": [{"name": "conv/w", "shape": [3, 3],
//	                                    "dtype": "float32",
//	                                    "quantization": {...}}, ...]}, ...]
//	shard files   per group, the weights' bytes back to back in manifest
//	              order, little-endian, row-major, across the concatenation
//	              of the group's paths (relative to the JSON's directory), so
//	              that a weight may span two files; the concatenation holds
//	              exactly the group's weights.
//
// A quantized float32 weight is stored as float16 ({"dtype": "float16"}) or
// as affine integers ({"dtype": "uint8" or "uint16", "min": m, "scale": s},
// the value being m + s*q).

// tfjsMaxDepth bounds the nesting of the model JSON (modelTopology is
// skipped, not decoded): encoding/json's own limit for Unmarshal.
const tfjsMaxDepth = 10000

// TFJSWeight describes one weight of a TensorFlow.js model. DType is the
// stored element type: F32, I32 or Bool, or for a quantized float32 weight
// F16 (QuantDType "float16"), U8 or U16 (QuantDType "uint8" or "uint16", the
// weight's values being Min + Scale*q). Begin and End are byte offsets
// within the concatenation of the shard files of weightsManifest group
// Group.
type TFJSWeight struct {
	TensorInfo
	Group      int
	QuantDType string  // "" when the weight is stored as it is
	Min, Scale float64 // affine quantization only
}

// TFJS is an opened TensorFlow.js graph model: its validated weights
// manifest, and the fs.FS its shard files are read from on demand. It holds
// no open file (each Read opens the shard files it needs and closes them
// before returning), so there is nothing to close. It is immutable: its
// methods may be called concurrently when the fs.FS allows concurrent Opens,
// as os.DirFS and fstest.MapFS do.
type TFJS struct {
	fsys    fs.FS
	weights []TFJSWeight
	index   map[string]int
	groups  []tfjsGroup
	limits  Limits
}

// tfjsGroup is a weightsManifest group's shard files.
type tfjsGroup struct {
	paths []string // as in the manifest, relative to the model JSON
	files []string // the names in fsys
	ends  []int64  // ends[j]: where shard j ends in the concatenation
	size  int64    // the bytes its weights take
}

// OpenTFJS reads and validates the model JSON at name in fsys, and checks
// the shard files it names (fs.Stat: they must exist, be regular files, and
// hold together exactly the bytes of their group's weights). Shard paths
// are taken relative to path.Dir(name) and must stay under it: plain
// relative paths with '/' as the separator, no "." or ".." element. The JSON
// is read whole (bounded by Limits.MaxHeaderSize), the shard files not at
// all; weights are read when asked for.
//
// Every rule of the format is checked (see the package documentation). A
// shard file that is missing gives an error wrapping fs.ErrNotExist. The
// options that apply are WithLimits.
func OpenTFJS(fsys fs.FS, name string, opts ...Option) (*TFJS, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		return nil, errors.New("tensorfile: tfjs: nil fs.FS")
	}
	data, err := readTFJSJSON(fsys, name, c.limits.MaxHeaderSize)
	if err != nil {
		return nil, err
	}
	m, err := parseTFJS(data, c.limits)
	if err != nil {
		return nil, err
	}
	m.fsys, m.limits = fsys, c.limits
	dir := path.Dir(name)
	for gi := range m.groups {
		g := &m.groups[gi]
		g.files = make([]string, len(g.paths))
		g.ends = make([]int64, len(g.paths))
		var total int64
		for j, p := range g.paths {
			g.files[j] = path.Join(dir, p)
			fi, err := fs.Stat(fsys, g.files[j])
			if err != nil {
				return nil, fmt.Errorf("tensorfile: tfjs: group %d: shard %q: %w", gi, p, err)
			}
			if !fi.Mode().IsRegular() {
				return nil, tfjsErr(isCorrupt, "group %d: shard %q is not a regular file", gi, p)
			}
			n := fi.Size()
			if n < 0 || n > math.MaxInt64-total {
				return nil, tfjsErr(isCorrupt, "group %d: shard %q: size %d overflows the group's total", gi, p, n)
			}
			total += n
			g.ends[j] = total
		}
		if total != g.size {
			kind := isCorrupt
			if total < g.size {
				kind = isCutShort
			}
			return nil, tfjsErr(kind, "group %d: its weights take %d bytes, but its %d shard files hold %d",
				gi, g.size, len(g.paths), total)
		}
	}
	return m, nil
}

// OpenTFJSFile opens the model JSON at path with OpenTFJS, its shard files
// being read from the same directory through os.DirFS. Like os.DirFS, it
// follows symbolic links, also out of the directory; to confine them, pass
// an os.Root's FS to OpenTFJS. There is nothing to close.
func OpenTFJSFile(path string, opts ...Option) (*TFJS, error) {
	m, err := OpenTFJS(os.DirFS(filepath.Dir(path)), filepath.Base(path), opts...)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return m, nil
}

// readTFJSJSON reads the model JSON, refusing it before reading when its
// size is over max and while reading when it turns out to be.
func readTFJSJSON(fsys fs.FS, name string, max int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("tensorfile: tfjs: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tensorfile: tfjs: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("tensorfile: tfjs: %s is not a regular file", name)
	}
	size := fi.Size()
	if size > max {
		return nil, tfjsErr(isLimit, "model JSON of %d bytes is over the limit of %d", size, max)
	}
	var buf bytes.Buffer
	if size > 0 && size < 1<<30 {
		buf.Grow(int(size) + bytes.MinRead)
	}
	r := io.Reader(f)
	if max < math.MaxInt64 {
		r = io.LimitReader(f, max+1)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("tensorfile: tfjs: reading the model JSON: %w", err)
	}
	if int64(buf.Len()) > max {
		return nil, tfjsErr(isLimit, "model JSON is over the limit of %d bytes", max)
	}
	return buf.Bytes(), nil
}

// Weights describes every weight in manifest order. The slice is the
// caller's.
func (m *TFJS) Weights() []TFJSWeight {
	out := slices.Clone(m.weights)
	for i := range out {
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Tensors describes every weight in manifest order as a TensorInfo, whose
// DType is the stored element type. The slice is the caller's.
func (m *TFJS) Tensors() []TensorInfo {
	out := make([]TensorInfo, len(m.weights))
	for i := range m.weights {
		out[i] = m.weights[i].TensorInfo
		out[i].Shape = slices.Clone(out[i].Shape)
	}
	return out
}

// Read reads the named weight; see ReadIndex. A name the manifest lacks
// gives an error wrapping ErrNotFound.
func (m *TFJS) Read(name string) (*codec.Tensor, error) {
	return readNamed(m.index, name, m.ReadIndex)
}

// ReadIndex reads weight i of manifest order, as stored (DType of
// Weights()[i]; a quantized weight is not dequantized), into a new tensor
// whose Data is a fresh 8-byte aligned buffer owned by the caller. It opens
// the one or two shard files the weight lies in and reads only its bytes:
// at its offset through io.ReaderAt or io.Seeker when the fs.File has them
// (os.DirFS and fstest.MapFS files do), else by reading the shard from its
// start. Weights over Limits.MaxTensorBytes are refused with codec.ErrLimit
// before allocating. A shard file that turns out shorter than at open gives
// an error wrapping io.ErrUnexpectedEOF.
func (m *TFJS) ReadIndex(i int) (*codec.Tensor, error) {
	if i < 0 || i >= len(m.weights) {
		return nil, fmt.Errorf("tensorfile: tfjs: weight index %d out of range [0, %d)", i, len(m.weights))
	}
	w := &m.weights[i]
	data, err := m.limits.alloc(fmtTFJS, "weight", w.Name, w.Size())
	if err != nil {
		return nil, err
	}
	if err := m.groups[w.Group].read(m.fsys, data, w.Begin); err != nil {
		return nil, fmt.Errorf("tensorfile: tfjs: reading weight %q: %w", w.Name, err)
	}
	return &codec.Tensor{Name: w.Name, DType: w.DType, Shape: slices.Clone(w.Shape), Data: data}, nil
}

// read fills b from offset off of the group's concatenated shards.
func (g *tfjsGroup) read(fsys fs.FS, b []byte, off int64) error {
	j, _ := slices.BinarySearch(g.ends, off+1) // the first shard ending after off
	for len(b) > 0 {
		if j >= len(g.ends) {
			return io.ErrUnexpectedEOF // open checked the sizes; not reached
		}
		var start int64
		if j > 0 {
			start = g.ends[j-1]
		}
		k := int(min(int64(len(b)), g.ends[j]-off))
		if k > 0 {
			if err := readTFJSShard(fsys, g.files[j], b[:k], off-start); err != nil {
				return fmt.Errorf("shard %q: %w", g.paths[j], err)
			}
		}
		b, off, j = b[k:], off+int64(k), j+1
	}
	return nil
}

// readTFJSShard reads len(b) bytes at off of the named file.
func readTFJSShard(fsys fs.FS, name string, b []byte, off int64) (err error) {
	f, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if r, ok := f.(io.ReaderAt); ok {
		return readFullAt(r, b, off)
	}
	if s, ok := f.(io.Seeker); ok {
		if _, err := s.Seek(off, io.SeekStart); err != nil {
			return err
		}
	} else if _, err := io.CopyN(io.Discard, f, off); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if _, err := io.ReadFull(f, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// tfjsDType maps a manifest dtype to a codec.DType.
func tfjsDType(name string) (codec.DType, error) {
	switch name {
	case "float32":
		return codec.F32, nil
	case "int32":
		return codec.I32, nil
	case "bool":
		return codec.Bool, nil
	case "string", "complex64":
		return 0, fmt.Errorf("dtype %s is not supported", name)
	}
	return 0, fmt.Errorf("unknown dtype %q", name)
}

// tfjsQuantDType maps a quantization dtype to the stored codec.DType.
func tfjsQuantDType(name string) (codec.DType, bool) {
	switch name {
	case "float16":
		return codec.F16, true
	case "uint8":
		return codec.U8, true
	case "uint16":
		return codec.U16, true
	}
	return 0, false
}

// tfjsParser walks the model JSON's tokens, as stParser walks a safetensors
// header: encoding/json checks the syntax, the parser the structure and
// the duplicate keys that decoding into a map would merge silently.
type tfjsParser struct {
	jsonTokens
	limits Limits
	shards int // shard paths seen, all groups together
}

// parseTFJS parses and checks the model JSON. The TFJS it returns has no
// fsys and no shard sizes yet.
func parseTFJS(data []byte, limits Limits) (*TFJS, error) {
	if !utf8.Valid(data) {
		return nil, formatErr(fmtTFJS, 0, isCorrupt, "model JSON is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	p := &tfjsParser{jsonTokens: jsonTokens{dec: dec, format: fmtTFJS, doc: "model JSON"}, limits: limits}
	m := &TFJS{index: make(map[string]int)}
	const what = "the model JSON"
	if err := p.delim('{', what); err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	for dec.More() {
		key, err := p.key(what)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, p.corrupt("duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "format":
			tok, err := p.next()
			if err != nil {
				return nil, err
			}
			if s, ok := tok.(string); !ok {
				return nil, p.corrupt("format is %s, want a string", describe(tok))
			} else if s != "graph-model" {
				return nil, p.fail(isUnsupported, "format %q is not supported, only \"graph-model\"", s)
			}
		case "generatedBy", "convertedBy":
			tok, err := p.next()
			if err != nil {
				return nil, err
			}
			if _, ok := tok.(string); !ok && tok != nil {
				return nil, p.corrupt("%s is %s, want a string", key, describe(tok))
			}
		case "modelTopology", "signature", "userDefinedMetadata", "modelInitializer", "initializerSignature":
			if err := p.skipObject(key); err != nil {
				return nil, err
			}
		case "weightsManifest":
			if err := p.manifest(m); err != nil {
				return nil, err
			}
		default:
			return nil, p.fail(isUnsupported, "unknown top-level key %q", key)
		}
	}
	if err := p.delim('}', what); err != nil {
		return nil, err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, p.syntax(err)
		}
		return nil, p.corrupt("unexpected %s after the model JSON object", describe(tok))
	}
	switch {
	case !seen["format"]:
		return nil, p.fail(isUnsupported, "no format key (a graph model of TensorFlow.js 1.0 or later has \"graph-model\")")
	case !seen["modelTopology"]:
		return nil, p.corrupt("no modelTopology")
	case !seen["weightsManifest"]:
		return nil, p.corrupt("no weightsManifest")
	}
	return m, nil
}

// str reads a string.
func (p *tfjsParser) str(what string) (string, error) {
	tok, err := p.next()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", p.corrupt("%s is %s, want a string", what, describe(tok))
	}
	return s, nil
}

// float reads a finite number.
func (p *tfjsParser) float(what string) (float64, error) {
	tok, err := p.next()
	if err != nil {
		return 0, err
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, p.corrupt("%s is %s, want a number", what, describe(tok))
	}
	v, err := strconv.ParseFloat(num.String(), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, p.corrupt("%s: %s is not a finite float64", what, num)
	}
	return v, nil
}

// skipObject reads an object without keeping it, checking its syntax, that
// no object in it repeats a key, and its nesting depth.
func (p *tfjsParser) skipObject(what string) error {
	if err := p.delim('{', what); err != nil {
		return err
	}
	// One entry per open object or array: its keys so far, nil for an array.
	stack := []map[string]bool{{}}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		if !p.dec.More() {
			if _, err := p.next(); err != nil { // the closing delimiter
				return err
			}
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil {
			k, err := p.key(what)
			if err != nil {
				return err
			}
			if top[k] {
				return p.corrupt("%s: duplicate key %q", what, k)
			}
			top[k] = true
		}
		tok, err := p.next()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= tfjsMaxDepth {
				return p.fail(isLimit, "%s: nested deeper than %d levels", what, tfjsMaxDepth)
			}
			var keys map[string]bool
			if tok == json.Delim('{') {
				keys = make(map[string]bool)
			}
			stack = append(stack, keys)
		}
	}
	return nil
}

// manifest parses the weightsManifest array into m.
func (p *tfjsParser) manifest(m *TFJS) error {
	if err := p.delim('[', "weightsManifest"); err != nil {
		return err
	}
	for p.dec.More() {
		if len(m.groups) >= p.limits.MaxTensors {
			return p.fail(isLimit, "weightsManifest: more than %d groups", p.limits.MaxTensors)
		}
		if err := p.group(m, len(m.groups)); err != nil {
			return err
		}
	}
	return p.delim(']', "weightsManifest")
}

// group parses weightsManifest group gi and appends it and its weights to m.
func (p *tfjsParser) group(m *TFJS, gi int) error {
	what := fmt.Sprintf("weightsManifest group %d", gi)
	if err := p.delim('{', what); err != nil {
		return err
	}
	m.groups = append(m.groups, tfjsGroup{})
	g := &m.groups[gi]
	var havePaths, haveWeights bool
	for p.dec.More() {
		field, err := p.key(what)
		if err != nil {
			return err
		}
		switch field {
		case "paths":
			if havePaths {
				return p.corrupt("%s: duplicate key %q", what, field)
			}
			havePaths = true
			if g.paths, err = p.paths(what); err != nil {
				return err
			}
		case "weights":
			if haveWeights {
				return p.corrupt("%s: duplicate key %q", what, field)
			}
			haveWeights = true
			if err := p.delim('[', what+": weights"); err != nil {
				return err
			}
			for p.dec.More() {
				if len(m.weights) >= p.limits.MaxTensors {
					return p.fail(isLimit, "more than %d weights", p.limits.MaxTensors)
				}
				w, err := p.weight(gi, len(m.weights))
				if err != nil {
					return err
				}
				if _, dup := m.index[w.Name]; dup {
					return p.corrupt("duplicate weight %q", w.Name)
				}
				n := w.End // the weight's size until placed
				if n > math.MaxInt64-g.size {
					return p.corrupt("%s: weight %q: the group's size overflows", what, w.Name)
				}
				w.Begin, w.End = g.size, g.size+n
				g.size += n
				m.index[w.Name] = len(m.weights)
				m.weights = append(m.weights, w)
			}
			if err := p.delim(']', what+": weights"); err != nil {
				return err
			}
		default:
			return p.fail(isUnsupported, "%s: unknown key %q", what, field)
		}
	}
	if err := p.delim('}', what); err != nil {
		return err
	}
	switch {
	case !havePaths:
		return p.corrupt("%s has no paths", what)
	case !haveWeights:
		return p.corrupt("%s has no weights", what)
	}
	return nil
}

// paths parses a group's shard paths.
func (p *tfjsParser) paths(what string) ([]string, error) {
	what += ": paths"
	if err := p.delim('[', what); err != nil {
		return nil, err
	}
	paths := []string{}
	for p.dec.More() {
		if p.shards >= p.limits.MaxTensors {
			return nil, p.fail(isLimit, "more than %d shard paths", p.limits.MaxTensors)
		}
		p.shards++
		s, err := p.str(what)
		if err != nil {
			return nil, err
		}
		if len(s) > p.limits.MaxNameLen {
			return nil, p.fail(isLimit, "%s: path of %d bytes is over the limit of %d", what, len(s), p.limits.MaxNameLen)
		}
		// fs.ValidPath refuses "", absolute paths and "." and ".."
		// elements; '\\' and ':' would be separators or volume names on
		// Windows.
		if !fs.ValidPath(s) || s == "." || strings.ContainsAny(s, `\:`) {
			return nil, p.corrupt("%s: %q is not a plain relative path under the model's directory", what, s)
		}
		paths = append(paths, s)
	}
	if err := p.delim(']', what); err != nil {
		return nil, err
	}
	return paths, nil
}

// weight parses weight entry i (of the whole manifest) of group gi. The
// TFJSWeight it returns has its byte size in End and Begin 0.
func (p *tfjsParser) weight(gi, i int) (TFJSWeight, error) {
	w := TFJSWeight{Group: gi}
	what := fmt.Sprintf("weightsManifest group %d: weight %d", gi, i)
	if err := p.delim('{', what); err != nil {
		return w, err
	}
	var (
		dtype string
		q     tfjsQuant
		have  = make(map[string]bool, 5)
	)
	for p.dec.More() {
		field, err := p.key(what)
		if err != nil {
			return w, err
		}
		if have[field] {
			return w, p.corrupt("%s: duplicate key %q", what, field)
		}
		have[field] = true
		switch field {
		case "name":
			if w.Name, err = p.str(what + ": name"); err != nil {
				return w, err
			}
			if len(w.Name) > p.limits.MaxNameLen {
				return w, p.fail(isLimit, "%s: name of %d bytes is over the limit of %d", what, len(w.Name), p.limits.MaxNameLen)
			}
			what = fmt.Sprintf("weight %q", w.Name)
		case "shape":
			if err := p.delim('[', what+": shape"); err != nil {
				return w, err
			}
			w.Shape = []int64{}
			for p.dec.More() {
				if len(w.Shape) >= p.limits.MaxDims {
					return w, p.fail(isLimit, "%s: more than %d dimensions", what, p.limits.MaxDims)
				}
				d, err := p.uint(what + ": shape")
				if err != nil {
					return w, err
				}
				w.Shape = append(w.Shape, d)
			}
			if err := p.delim(']', what+": shape"); err != nil {
				return w, err
			}
		case "dtype":
			if dtype, err = p.str(what + ": dtype"); err != nil {
				return w, err
			}
		case "quantization":
			if q, err = p.quantization(what); err != nil {
				return w, err
			}
		case "group": // "model" or "optimizer": which weights an optimizer holds
			if _, err := p.str(what + ": group"); err != nil {
				return w, err
			}
		default:
			return w, p.fail(isUnsupported, "%s: unknown key %q", what, field)
		}
	}
	if err := p.delim('}', what); err != nil {
		return w, err
	}
	for _, f := range [...]string{"name", "shape", "dtype"} {
		if !have[f] {
			return w, p.corrupt("%s has no %s", what, f)
		}
	}
	dt, err := tfjsDType(dtype)
	if err != nil {
		return w, p.fail(isUnsupported, "%s: %v", what, err)
	}
	w.DType = dt
	if have["quantization"] {
		if dtype != "float32" {
			return w, p.corrupt("%s: quantization on a weight of dtype %s (only float32 weights are quantized)", what, dtype)
		}
		if q.original != "" && q.original != dtype {
			return w, p.corrupt("%s: quantization original_dtype %q differs from its dtype %q", what, q.original, dtype)
		}
		sdt, ok := tfjsQuantDType(q.dtype)
		switch {
		case !ok:
			return w, p.fail(isUnsupported, "%s: unknown quantization dtype %q", what, q.dtype)
		case sdt == codec.F16 && (q.haveMin || q.haveScale):
			return w, p.corrupt("%s: float16 quantization with a min or scale", what)
		case sdt != codec.F16 && !(q.haveMin && q.haveScale):
			return w, p.corrupt("%s: %s quantization without min and scale", what, q.dtype)
		}
		w.DType, w.QuantDType, w.Min, w.Scale = sdt, q.dtype, q.min, q.scale
	}
	n, ok := byteSize(w.DType, w.Shape)
	if !ok {
		return w, p.corrupt("%s: shape %v of %v overflows", what, w.Shape, w.DType)
	}
	w.End = n
	return w, nil
}

// tfjsQuant is a parsed quantization entry.
type tfjsQuant struct {
	dtype, original     string
	min, scale          float64
	haveMin, haveScale  bool
	haveDType, haveOrig bool
}

// quantization parses a weight's quantization entry.
func (p *tfjsParser) quantization(weight string) (tfjsQuant, error) {
	var q tfjsQuant
	what := weight + ": quantization"
	if err := p.delim('{', what); err != nil {
		return q, err
	}
	for p.dec.More() {
		field, err := p.key(what)
		if err != nil {
			return q, err
		}
		var seen *bool
		switch field {
		case "dtype":
			seen = &q.haveDType
		case "original_dtype":
			seen = &q.haveOrig
		case "min":
			seen = &q.haveMin
		case "scale":
			seen = &q.haveScale
		default:
			return q, p.fail(isUnsupported, "%s: unknown key %q", what, field)
		}
		if *seen {
			return q, p.corrupt("%s: duplicate key %q", what, field)
		}
		*seen = true
		switch field {
		case "dtype":
			q.dtype, err = p.str(what + ": dtype")
		case "original_dtype":
			q.original, err = p.str(what + ": original_dtype")
		case "min":
			q.min, err = p.float(what + ": min")
		case "scale":
			q.scale, err = p.float(what + ": scale")
		}
		if err != nil {
			return q, err
		}
	}
	if err := p.delim('}', what); err != nil {
		return q, err
	}
	if !q.haveDType {
		return q, p.corrupt("%s has no dtype", what)
	}
	if q.haveOrig && q.original == "" {
		return q, p.corrupt("%s: empty original_dtype", what)
	}
	return q, nil
}
