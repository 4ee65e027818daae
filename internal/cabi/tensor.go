package cabi

import (
	"math/bits"
	"strings"
	"sync"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
)

// Flags of a Tensor (TP_F_* in the header).
const (
	FLossless int32 = 1 // the tensor never meets a lossy stage
	FBytes    int32 = 2 // DecodeInfo: the entry is a byte stream chunk
)

// maxRank bounds the shapes accepted from a caller.
const maxRank = 64

// Tensor is tp_tensor: the layout matches the C struct field for field
// (cmd/libtensorpress checks the offsets against the C compiler's).
type Tensor struct {
	Name    *byte
	NameLen int64
	DType   int32
	NDim    int32
	Shape   *int64
	Data    unsafe.Pointer
	NBytes  int64
	Flags   int32
	_       int32
	Tags    *byte // "k=v\x00k=v", or nil
	TagsLen int64
}

// Limits is tp_limits; a field at 0 takes the default.
type Limits struct {
	MaxHeader, MaxFrame, MaxDecoded, MaxTensor, MaxDims,
	MaxSegments, MaxTensors, MaxName, MaxTags, MaxSlowDecoded int64
}

// Buf is tp_buf: a caller's output buffer.
type Buf struct {
	Data unsafe.Pointer
	Cap  int64
}

// Acc is tp_acc: a caller's float32 accumulator for Receiver.add. A nil
// Name matches any tensor.
type Acc struct {
	Name    *byte
	NameLen int64
	Data    *float32
	NElem   int64
	NDim    int32
	_       int32
	Shape   *int64
}

// str views n bytes at p as a string, without a copy: valid during the call.
func str(p *byte, n int64) string {
	if p == nil || n <= 0 {
		return ""
	}
	return unsafe.String(p, int(n))
}

// mem views n bytes at p.
func mem(p unsafe.Pointer, n int64) []byte {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

func shapeOf(p *int64, ndim int32) []int64 {
	if p == nil || ndim <= 0 {
		return nil
	}
	return unsafe.Slice(p, int(ndim))
}

// view makes the codec.Tensor t describes. Data aliases the caller's
// memory; the name, shape and tags are copied, since a Sender's Memory
// keeps them after the call.
func (t *Tensor) view() (*codec.Tensor, error) {
	if t == nil {
		return nil, argErrorf("no tensor (NULL)")
	}
	if t.NameLen < 0 || t.NameLen > 1<<16 {
		return nil, argErrorf("tensor name length %d out of range", t.NameLen)
	}
	name := strings.Clone(str(t.Name, t.NameLen))
	dt := codec.DType(t.DType)
	if t.DType < 0 || t.DType > 255 || !dt.Valid() {
		return nil, argErrorf("tensor %q: unknown dtype %d", name, t.DType)
	}
	if t.NDim < 0 || t.NDim > maxRank || (t.NDim > 0 && t.Shape == nil) {
		return nil, argErrorf("tensor %q: bad rank %d", name, t.NDim)
	}
	shape := append([]int64(nil), shapeOf(t.Shape, t.NDim)...)
	n := uint64(dt.Size())
	for _, d := range shape {
		if d < 0 {
			return nil, argErrorf("tensor %q: negative dimension in shape %v", name, shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<62 {
			return nil, argErrorf("tensor %q: shape %v overflows", name, shape)
		}
		n = lo
	}
	if int64(n) != t.NBytes {
		return nil, argErrorf("tensor %q: %d bytes given for shape %v of %v (%d bytes)", name, t.NBytes, shape, dt, n)
	}
	if n > 0 && t.Data == nil {
		return nil, argErrorf("tensor %q: no data (NULL)", name)
	}
	ct := &codec.Tensor{Name: name, DType: dt, Shape: shape, Data: mem(t.Data, t.NBytes)}
	if ct.Data == nil {
		ct.Data = []byte{}
	}
	ct.Tags.Lossless = t.Flags&FLossless != 0
	if tags := str(t.Tags, t.TagsLen); tags != "" {
		for kv := range strings.SplitSeq(tags, "\x00") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, argErrorf("tensor %q: tag %q is not key=value", name, kv)
			}
			ct.Tags.Extra = append(ct.Tags.Extra, codec.Tag{Key: strings.Clone(k), Value: strings.Clone(v)})
		}
	}
	return ct, nil
}

// limits lays l over base.
func (l *Limits) limits(base codec.Limits) codec.Limits {
	if l == nil {
		return base
	}
	c := func(v int64) int {
		if v > 1<<40 {
			return 1 << 40
		}
		return int(v)
	}
	return codec.Limits{
		MaxHeaderSize: c(l.MaxHeader), MaxFrameSize: l.MaxFrame, MaxDecodedSize: l.MaxDecoded,
		MaxTensorSize: l.MaxTensor, MaxDims: c(l.MaxDims), MaxSegments: c(l.MaxSegments),
		MaxTensors: c(l.MaxTensors), MaxNameLen: c(l.MaxName), MaxTags: c(l.MaxTags),
		MaxSlowDecoded: l.MaxSlowDecoded,
	}.Fill(base)
}

// The recipe cache: parsed recipes by their text, so a caller may pass the
// text on every call. Bounded: when full, it starts again empty.
const recipeCacheSize = 256

var recipes = struct {
	sync.RWMutex
	m map[string]*codec.Recipe
}{m: make(map[string]*codec.Recipe)}

// recipe parses (or finds) the recipe written at p; nil for none.
func recipe(p *byte, n int64) (*codec.Recipe, error) {
	s := str(p, n)
	if s == "" {
		return nil, nil
	}
	recipes.RLock()
	r, ok := recipes.m[s]
	recipes.RUnlock()
	if ok {
		return r, nil
	}
	if strings.IndexByte(s, 0) >= 0 {
		return nil, codeErrorf(ERECIPE, "tensorpress: recipe contains a NUL byte")
	}
	// The parsed recipe keeps substrings of its text (selector names), so
	// it must not parse the caller's memory, which is reused after the call.
	s = strings.Clone(s)
	r, err := codec.ParseRecipe(s)
	if err != nil {
		return nil, err
	}
	recipes.Lock()
	if len(recipes.m) >= recipeCacheSize {
		clear(recipes.m)
	}
	recipes.m[s] = r
	recipes.Unlock()
	return r, nil
}

// RecipeCheck parses a recipe and says whether it is lossy.
func RecipeCheck(p *byte, n int64) (lossy bool, code int32, msg string) {
	defer guard(&code, &msg)
	r, err := recipe(p, n)
	if err != nil {
		code, msg = fail(err)
		return false, code, msg
	}
	if r == nil {
		return false, OK, ""
	}
	return r.Lossy(), OK, ""
}
