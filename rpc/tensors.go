package rpc

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/tensorpress/tensorpress/codec"
)

// TensorCodecName is the name of TensorCodec: the content subtype of calls
// that use it (application/grpc+tensorpress-tensors).
const TensorCodecName = "tensorpress-tensors"

// smallTensor is the size up to which whole tensors share frames.
const smallTensor = 64 << 10

func init() {
	tc, err := NewTensorCodec()
	if err != nil {
		panic(err) // no options: cannot fail
	}
	encoding.RegisterCodecV2(tc)
}

// TensorCodec is a gRPC encoding.CodecV2 whose messages are tensors, as
// format-v1 frames (no protobuf): Marshal takes a *codec.Tensor or a batch,
// []*codec.Tensor or *[]*codec.Tensor; Unmarshal fills a *codec.Tensor
// (the message must hold exactly one) or a *[]*codec.Tensor.
//
// A tensor is cut into chunks of the chunk size, each frame coded by the
// recipe its policy chooses (default ByClass; a tensor tagged lossless is
// never given a lossy one); small whole tensors (up to 64 KiB) share
// frames. A frame stored raw references the tensor's bytes instead of
// copying them, so, as gRPC's rule is, a tensor must not be changed after
// SendMsg. Decoding joins chunks straight into each tensor's buffer,
// within the codec's limits (codec.DefaultLimits by default). Register
// it at init (it is, under TensorCodecName) and select it per call with
// grpc.CallContentSubtype(TensorCodecName), or per server with
// grpc.ForceServerCodecV2.
type TensorCodec struct {
	config
	enc     *codec.Encoder
	readers sync.Pool // *codec.Reader
}

// NewTensorCodec returns a TensorCodec; options as for NewCompressor.
func NewTensorCodec(opts ...Option) (*TensorCodec, error) {
	c := &TensorCodec{config: config{name: TensorCodecName, chunk: DefaultChunkSize, policy: ByClass{}, lim: codec.DefaultLimits()}}
	if err := c.apply(opts); err != nil {
		return nil, err
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		return nil, err
	}
	c.enc = enc
	return c, nil
}

// Name implements encoding.CodecV2.
func (c *TensorCodec) Name() string { return c.name }

// Marshal implements encoding.CodecV2.
func (c *TensorCodec) Marshal(v any) (mem.BufferSlice, error) {
	var ts []*codec.Tensor
	switch m := v.(type) {
	case *codec.Tensor:
		ts = []*codec.Tensor{m}
	case []*codec.Tensor:
		ts = m
	case *[]*codec.Tensor:
		ts = *m
	default:
		return nil, fmt.Errorf("rpc: %s cannot marshal %T (want *codec.Tensor or []*codec.Tensor)", c.name, v)
	}
	m := marshaller{c: c, pool: mem.DefaultBufferPool()}
	for _, t := range ts {
		if t == nil {
			m.out.Free()
			return nil, fmt.Errorf("rpc: %s: a nil tensor", c.name)
		}
		var err error
		if t.IsWhole() && len(t.Data) <= smallTensor {
			err = m.small(t)
		} else {
			err = m.flush()
			if err == nil {
				err = m.tensor(t)
			}
		}
		if err != nil {
			m.out.Free()
			return nil, err
		}
	}
	if err := m.flush(); err != nil {
		m.out.Free()
		return nil, err
	}
	return m.out, nil
}

// marshaller builds the frames of one message.
type marshaller struct {
	c     *TensorCodec
	pool  mem.BufferPool
	out   mem.BufferSlice
	batch []*codec.Tensor
	rs    []*codec.Recipe
	size  int
	seq   uint64
}

// choose asks the policy for the recipe of a frame of t, never a lossy one
// for a tensor tagged lossless.
func (m *marshaller) choose(t *codec.Tensor, first bool) *codec.Recipe {
	info := codec.FrameInfo{Seq: m.seq, Type: codec.FrameTensor, Name: t.Name, DType: t.DType, Shape: t.Shape, Tags: t.Tags,
		Offset: t.Offset, Len: len(t.Data), First: first, Data: t.Data}
	m.seq++
	r := m.c.policy.Choose(info)
	if r.Lossy() && t.Tags.Lossless {
		r = nil
	}
	return r
}

// small adds a small whole tensor to the frame being batched.
func (m *marshaller) small(t *codec.Tensor) error {
	if len(m.batch) > 0 && (m.size+len(t.Data) > m.c.chunk || len(m.batch) == codec.DefaultLimits().MaxTensors) {
		if err := m.flush(); err != nil {
			return err
		}
	}
	m.batch = append(m.batch, t)
	m.rs = append(m.rs, m.choose(t, true))
	m.size += len(t.Data)
	return nil
}

// flush writes the batched small tensors as one frame.
func (m *marshaller) flush() error {
	if len(m.batch) == 0 {
		return nil
	}
	buf := m.pool.Get(m.size + 4096)
	frame, err := m.c.enc.AppendTensors((*buf)[:0], m.batch, m.rs)
	if err != nil {
		m.pool.Put(buf)
		return err
	}
	*buf = frame
	m.out = append(m.out, mem.NewBuffer(buf, m.pool))
	m.batch, m.rs, m.size = m.batch[:0], m.rs[:0], 0
	return nil
}

// tensor writes t in chunks: a raw chunk as head, the tensor's own bytes
// and tail; a coded chunk as a frame in a pooled buffer.
func (m *marshaller) tensor(t *codec.Tensor) error {
	if err := t.Validate(); err != nil {
		return err
	}
	esz := t.DType.Size()
	nel := len(t.Data) / esz
	whole := &codec.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Tags: t.Tags, Version: t.Version, Base: t.Base}
	first := m.choose(&codec.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Tags: t.Tags, Offset: t.Offset,
		Data: t.Data[:min(len(t.Data), m.c.chunk)]}, true)
	step := first.ChunkElements(esz, nel, m.c.chunk)
	for el := 0; el < nel || nel == 0; el += step {
		end := min(nel, el+step)
		ch := *whole
		ch.Offset, ch.Data = t.Offset+int64(el), t.Data[el*esz:end*esz]
		r := first
		if el > 0 {
			r = m.choose(&ch, false)
			if r.Lossy() != first.Lossy() || r.ChunkElements(esz, nel, m.c.chunk) != step {
				r = first // lossy recipes and chunking change only at tensor boundaries
			}
		}
		if r == nil {
			head, tail, err := m.c.enc.AppendRawTensorHead(nil, &ch)
			if err != nil {
				return err
			}
			m.out = append(m.out, mem.SliceBuffer(head), mem.SliceBuffer(ch.Data))
			if len(tail) > 0 {
				m.out = append(m.out, mem.SliceBuffer(tail))
			}
		} else {
			buf := m.pool.Get(codec.MaxTensorLen(&ch))
			frame, err := m.c.enc.AppendTensor((*buf)[:0], &ch, r)
			if err != nil {
				m.pool.Put(buf)
				return err
			}
			*buf = frame
			m.out = append(m.out, mem.NewBuffer(buf, m.pool))
		}
		if nel == 0 {
			break
		}
	}
	return nil
}

// Unmarshal implements encoding.CodecV2.
func (c *TensorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, _ := c.readers.Get().(*codec.Reader)
	if r == nil {
		var err error
		if r, err = codec.NewReader(data.Reader(), codec.WithLimits(c.lim)); err != nil {
			return err
		}
	} else {
		r.Reset(data.Reader())
	}
	defer func() {
		r.Reset(nil)
		c.readers.Put(r)
	}()
	switch m := v.(type) {
	case *codec.Tensor:
		t, err := r.ReadTensor()
		if err == io.EOF {
			return fmt.Errorf("%w: rpc: %s message holds no tensor", codec.ErrCorrupt, c.name)
		}
		if err != nil {
			return err
		}
		if _, err := r.ReadTensor(); err != io.EOF {
			if err == nil {
				err = errors.New("more than one")
			}
			return fmt.Errorf("%w: rpc: %s message for one tensor: %v", codec.ErrCorrupt, c.name, err)
		}
		*m = *t
		return nil
	case *[]*codec.Tensor:
		ts := (*m)[:0]
		for {
			t, err := r.ReadTensor()
			if err == io.EOF {
				*m = ts
				return nil
			}
			if err != nil {
				return err
			}
			ts = append(ts, t)
		}
	}
	return fmt.Errorf("rpc: %s cannot unmarshal into %T (want *codec.Tensor or *[]*codec.Tensor)", c.name, v)
}
