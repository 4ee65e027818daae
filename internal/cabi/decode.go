package cabi

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
)

// entry is one data record of a buffer of frames: a whole tensor, the first
// chunk of a tensor sent in chunks (standing for all of it), or a chunk of
// a byte stream.
type entry struct {
	name   string
	dtype  codec.DType
	flags  int32
	shape  []int64
	nbytes int64
}

// scan reads the headers of every frame in src, checking each header's
// CRC and the limits, and skipping payloads unread. single says src is
// exactly one data frame with one whole entry (DecodeFrameInto's case).
func scan(src []byte, lim codec.Limits) (es []entry, single bool, err error) {
	br := bytes.NewReader(src)
	var buf []byte
	frames := 0
	for br.Len() > 0 {
		var h *codec.FrameHeader
		h, buf, err = codec.ReadFrameHeader(br, br, lim, buf)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, false, err
		}
		frames++
		rest := h.FrameLen() - int64(h.HeaderLen)
		if rest > int64(br.Len()) {
			return nil, false, io.ErrUnexpectedEOF
		}
		br.Seek(rest, io.SeekCurrent)
		switch h.Type {
		case codec.FrameBytes:
			for _, e := range h.Entries {
				es = append(es, entry{dtype: codec.Byte, flags: FBytes, shape: []int64{e.RawLen}, nbytes: e.RawLen})
			}
		case codec.FrameTensor, codec.FrameTensors:
			for _, e := range h.Entries {
				t := &e.Tensor
				if t.Offset != 0 {
					continue // a later chunk: its tensor is recorded at the first
				}
				n := t.NumBytes()
				if n < 0 || n > lim.MaxTensorSize {
					return nil, false, &codec.CorruptError{Offset: int64(len(src)-br.Len()) - h.FrameLen(), What: "tensor " + t.Name, Err: codec.ErrLimit}
				}
				var fl int32
				if t.Tags.Lossless {
					fl |= FLossless
				}
				es = append(es, entry{name: t.Name, dtype: t.DType, flags: fl, shape: t.Shape, nbytes: n})
			}
		}
		single = frames == 1 && len(h.Entries) == 1 && (h.Type == codec.FrameBytes ||
			h.Entries[0].Count == h.Entries[0].Tensor.NumElements())
	}
	return es, single && frames == 1, nil
}

// DecodeInfo describes the data in the n bytes of frames at src, from
// their headers only, into info: a little-endian u32 record count, then
// per record u8 dtype, u8 flags, u16 ndim, u32 name length, i64 bytes,
// i64 shape[ndim], the name. need is the length of that description; when
// it is above cap, nothing is written and the caller retries with a
// buffer of need bytes.
func DecodeInfo(src unsafe.Pointer, n int64, lim *Limits, prof uint64, info unsafe.Pointer, cap int64) (need int64, code int32, msg string) {
	defer guard(&code, &msg)
	base, err := baseLimits(prof)
	var es []entry
	if err == nil {
		es, _, err = scan(mem(src, n), lim.limits(base))
	}
	if err != nil {
		code, msg = fail(err)
		return 0, code, msg
	}
	need = 4
	for _, e := range es {
		need += 16 + 8*int64(len(e.shape)) + int64(len(e.name))
	}
	if need > cap {
		return need, OK, ""
	}
	b := binary.LittleEndian.AppendUint32(mem(info, cap)[:0], uint32(len(es)))
	for _, e := range es {
		b = append(b, byte(e.dtype), byte(e.flags))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(e.shape)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.name)))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.nbytes))
		for _, d := range e.shape {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		b = append(b, e.name...)
	}
	return need, OK, ""
}

// decoders holds a Decoder per set of limits (few in practice: bounded).
var decoders = struct {
	sync.Mutex
	m map[codec.Limits]*codec.Decoder
}{m: make(map[codec.Limits]*codec.Decoder)}

func decoder(lim codec.Limits) (*codec.Decoder, error) {
	decoders.Lock()
	defer decoders.Unlock()
	if d, ok := decoders.m[lim]; ok {
		return d, nil
	}
	d, err := codec.NewDecoder(codec.WithLimits(lim))
	if err != nil {
		return nil, err
	}
	if len(decoders.m) >= 64 {
		clear(decoders.m)
	}
	decoders.m[lim] = d
	return d, nil
}

// DecodeInto decodes the n bytes of frames at src into the caller's
// buffers outs[0:nout], one per record of DecodeInfo in its order, each of
// at least the record's bytes. The data is decoded straight into them;
// copies counts the records that could not be (0 in the usual cases).
func DecodeInto(src unsafe.Pointer, n int64, lim *Limits, prof uint64, outs *Buf, nout int32) (copies int64, code int32, msg string) {
	defer guard(&code, &msg)
	copies, err := decodeInto(mem(src, n), lim, prof, outs, nout)
	if err != nil {
		code, msg = fail(err)
	}
	return copies, code, msg
}

func decodeInto(src []byte, lim *Limits, prof uint64, outs *Buf, nout int32) (int64, error) {
	base, err := baseLimits(prof)
	if err != nil {
		return 0, err
	}
	l := lim.limits(base)
	es, single, err := scan(src, l)
	if err != nil {
		return 0, err
	}
	if nout < 0 || (nout > 0 && outs == nil) {
		return 0, argErrorf("bad output buffers (%d)", nout)
	}
	bufs := unsafe.Slice(outs, int(nout))
	if len(bufs) != len(es) {
		return 0, argErrorf("%d output buffers for %d records", len(bufs), len(es))
	}
	for i, e := range es {
		if bufs[i].Cap < e.nbytes || (e.nbytes > 0 && bufs[i].Data == nil) {
			return 0, argErrorf("output buffer %d (%q) holds %d bytes, needs %d", i, e.name, bufs[i].Cap, e.nbytes)
		}
	}
	if single && bufs[0].Cap >= (es[0].nbytes+7)&^7 { // DecodeFrameInto's room
		d, err := decoder(l)
		if err != nil {
			return 0, err
		}
		out := mem(bufs[0].Data, bufs[0].Cap)[:0]
		f, _, err := d.DecodeFrameInto(out, src)
		if err != nil {
			return 0, err
		}
		return land(f, bufs, 0)
	}
	return readInto(src, l, bufs)
}

// land makes sure the data of frame f's records, from record k on, is in
// bufs: it copies what the decoder did not put there and counts it.
func land(f *codec.Frame, bufs []Buf, k int) (copies int64, err error) {
	put := func(p []byte) error {
		if k >= len(bufs) {
			return &codec.CorruptError{What: "frames", Err: codec.ErrCorrupt}
		}
		b := bufs[k]
		k++
		if len(p) == 0 || unsafe.Pointer(unsafe.SliceData(p)) == b.Data {
			return nil
		}
		if int64(len(p)) > b.Cap {
			return &codec.CorruptError{What: "frames", Err: codec.ErrCorrupt}
		}
		copy(mem(b.Data, b.Cap), p)
		copies++
		return nil
	}
	if f.Header.Type == codec.FrameBytes {
		return copies, put(f.Bytes)
	}
	for _, t := range f.Tensors {
		if err := put(t.Data); err != nil {
			return copies, err
		}
	}
	return copies, nil
}

// readInto decodes a stream (or several frames) with a Reader that takes
// the caller's buffers, in order.
func readInto(src []byte, l codec.Limits, bufs []Buf) (copies int64, err error) {
	next, mismatch := 0, false
	take := func(n int64) []byte {
		if next >= len(bufs) || bufs[next].Cap < n {
			mismatch = true
			return nil
		}
		b := mem(bufs[next].Data, bufs[next].Cap)
		next++
		return b[:0]
	}
	alloc := func(n int) []byte {
		if b := take(int64(n)); b != nil {
			return b[:n]
		}
		return codec.AlignedBytes(n)
	}
	into := func(h *codec.FrameHeader, i int) []byte {
		if h.Type != codec.FrameTensor && h.Type != codec.FrameTensors && h.Type != codec.FrameBytes {
			return nil
		}
		return take(h.Entries[i].RawLen)
	}
	r, err := codec.NewReader(bytes.NewReader(src), codec.WithLimits(l), codec.WithTensorBuffers(alloc))
	if err != nil {
		return 0, err
	}
	done := 0
	for {
		f, err := r.NextJoined(into)
		if err == io.EOF {
			break
		}
		if err != nil {
			return copies, err
		}
		if mismatch {
			return copies, &codec.CorruptError{What: "frames", Err: codec.ErrCorrupt}
		}
		switch f.Header.Type {
		case codec.FrameTensor, codec.FrameTensors, codec.FrameBytes:
			c, err := land(f, bufs, done)
			copies += c
			if err != nil {
				return copies, err
			}
			if f.Header.Type == codec.FrameBytes {
				done++
			} else {
				done += len(f.Tensors)
			}
		}
	}
	if done != len(bufs) {
		return copies, &codec.CorruptError{What: "frames", Err: codec.ErrCorrupt}
	}
	return copies, nil
}
