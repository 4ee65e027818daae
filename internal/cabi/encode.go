package cabi

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/gradient" // its stages, for decoding
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/sniff"
	_ "github.com/tensorpress/tensorpress/stages"
)

// CRC modes of Encode (crc argument).
const (
	CRCAlways  int32 = 0
	CRCOmitRaw int32 = 1
)

// encoders holds one process-wide Encoder per CRC mode (Encoders are safe
// for concurrent use).
var encoders [2]struct {
	once sync.Once
	e    *codec.Encoder
}

func encoder(crc int32) (*codec.Encoder, error) {
	if crc != CRCAlways && crc != CRCOmitRaw {
		return nil, argErrorf("unknown crc mode %d", crc)
	}
	x := &encoders[crc]
	x.once.Do(func() {
		var err error
		if x.e, err = codec.NewEncoder(codec.WithPayloadCRC(codec.CRCMode(crc))); err != nil {
			panic(err)
		}
	})
	return x.e, nil
}

// outSlice is the caller's output buffer as an empty slice to append to.
func outSlice(out unsafe.Pointer, cap int64) []byte {
	return mem(out, cap)[:0]
}

// finish reports b, appended to the caller's buffer at out: when append had
// to move it, b is kept in a spill handle for Take.
func finish(b []byte, out unsafe.Pointer) (n int64, spill uint64) {
	if len(b) == 0 || unsafe.Pointer(unsafe.SliceData(b)) == out {
		return int64(len(b)), 0
	}
	return int64(len(b)), newHandle(b)
}

// Take copies the spilled output of handle h into out and frees it.
func Take(h uint64, out unsafe.Pointer, cap int64) (n int64, code int32, msg string) {
	defer guard(&code, &msg)
	b, err := lookup[[]byte](h, "spilled output")
	if err != nil {
		code, msg = fail(err)
		return 0, code, msg
	}
	if int64(len(b)) > cap {
		return int64(len(b)), EARG, argErrorf("spilled output is %d bytes, buffer holds %d", len(b), cap).Error()
	}
	remove(h)
	return int64(copy(mem(out, cap), b)), OK, ""
}

// MaxTensorLen bounds the frame of t under a lossless recipe; -1 for a
// bad tensor.
func MaxTensorLen(t *Tensor) (n int64) {
	defer func() {
		if recover() != nil {
			n = -1
		}
	}()
	ct, err := t.view()
	if err != nil {
		return -1
	}
	return int64(codec.MaxTensorLen(ct))
}

// MaxEncodedLen bounds the bytes frame of n bytes.
func MaxEncodedLen(n int64) int64 {
	if n < 0 || n > 1<<56 {
		return -1
	}
	return int64(codec.MaxEncodedLen(int(n)))
}

// Encode encodes tensor t into the caller's buffer out (cap bytes), with
// the recipe written at rp (rn bytes), else profile prof's static choice,
// else sniff.ByClass. A tensor above the default MaxDecodedSize is written
// as a stream of chunk frames by a codec.Writer, so that any reader with
// default limits takes it. The frame's length is returned; a spill handle
// is returned too when it did not fit in out.
func Encode(t *Tensor, rp *byte, rn int64, prof uint64, crc int32, out unsafe.Pointer, cap int64) (n int64, spill uint64, code int32, msg string) {
	defer guard(&code, &msg)
	b, err := encode(t, rp, rn, prof, crc, outSlice(out, cap))
	if err != nil {
		code, msg = fail(err)
		return 0, 0, code, msg
	}
	n, spill = finish(b, out)
	return n, spill, OK, ""
}

func encode(t *Tensor, rp *byte, rn int64, prof uint64, crc int32, dst []byte) ([]byte, error) {
	ct, err := t.view()
	if err != nil {
		return nil, err
	}
	r, err := recipe(rp, rn)
	if err != nil {
		return nil, named(ct.Name, err)
	}
	p, err := profileOf(prof)
	if err != nil {
		return nil, err
	}
	enc, err := encoder(crc)
	if err != nil {
		return nil, err
	}
	if int64(len(ct.Data)) > codec.DefaultLimits().MaxDecodedSize {
		return writeStream(dst, ct, r, p, crc)
	}
	if r, err = choose(ct, r, p); err != nil {
		return nil, err
	}
	b, err := enc.AppendTensor(dst, ct, r)
	return b, named(ct.Name, err)
}

// sink is an io.Writer appending to a slice.
type sink struct{ b []byte }

func (s *sink) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

// writeStream writes a large tensor as a stream of chunks: with the
// recipe r, else profile p's static choice, else sniff.ByClass per chunk.
func writeStream(dst []byte, t *codec.Tensor, r *codec.Recipe, p *profile.Profile, crc int32) ([]byte, error) {
	var pol codec.Policy = sniff.ByClass{}
	if r != nil || p != nil {
		r, err := choose(t, r, p)
		if err != nil {
			return nil, err
		}
		pol = codec.FixedPolicy{Recipe: r}
	}
	s := &sink{b: dst}
	w, err := codec.NewWriter(s, codec.WithPayloadCRC(codec.CRCMode(crc)), codec.WithPolicy(pol), codec.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	if err := w.WriteTensor(t); err != nil {
		w.Close()
		return nil, named(t.Name, err)
	}
	if err := w.Close(); err != nil {
		return nil, named(t.Name, err)
	}
	return s.b, nil
}

// named puts the tensor's name in front of err's message, keeping its
// sentinels for errors.Is.
func named(name string, err error) error {
	if err == nil || name == "" {
		return err
	}
	return &namedError{name: name, err: err}
}

type namedError struct {
	name string
	err  error
}

func (e *namedError) Error() string { return fmt.Sprintf("tensor %q: %v", e.name, e.err) }
func (e *namedError) Unwrap() error { return e.err }

// EncodeBytes encodes n bytes at p as a bytes frame into out, with the
// recipe at rp (nil: stored raw).
func EncodeBytes(p unsafe.Pointer, n int64, rp *byte, rn int64, crc int32, out unsafe.Pointer, cap int64) (m int64, spill uint64, code int32, msg string) {
	defer guard(&code, &msg)
	if n < 0 || (n > 0 && p == nil) {
		return 0, 0, EARG, argErrorf("bad input (%d bytes)", n).Error()
	}
	r, err := recipe(rp, rn)
	var enc *codec.Encoder
	if err == nil {
		enc, err = encoder(crc)
	}
	var b []byte
	if err == nil {
		b, err = enc.AppendBytes(outSlice(out, cap), mem(p, n), r)
	}
	if err != nil {
		code, msg = fail(err)
		return 0, 0, code, msg
	}
	m, spill = finish(b, out)
	return m, spill, OK, ""
}
