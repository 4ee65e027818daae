package gpu

import (
	"encoding/binary"
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
)

// AppendTensor appends to dst the frame, made by enc, of tensor t whose n
// float32 are at x on the device (t gives the name, shape and tags;
// t.Data is not read), coded by recipe r. The first step of r must be one
// op on the whole tensor among fp16, bf16, int8(B), nf4(B) and fp4(B): it runs on the
// device, and only its output (half or a quarter of the bytes) crosses to
// the host, where the rest of r runs. The frame is byte for byte
// enc.AppendTensor's for the same data. Other recipes give
// codec.ErrUnsupported, for the CPU to take; a block holding a NaN or an
// infinity gives ErrNonFinite, as the int8 stage refuses it.
func (d *Device) AppendTensor(enc *codec.Encoder, dst []byte, t *codec.Tensor, x Ptr, r *codec.Recipe) ([]byte, error) {
	if t.DType != codec.F32 {
		return dst, fmt.Errorf("%w: gpu: tensor %q is %v, want f32", codec.ErrUnsupported, t.Name, t.DType)
	}
	n := 1
	for _, s := range t.Shape {
		n *= int(s)
	}
	if n <= 0 || uint64(n) >= 1<<32 {
		return dst, fmt.Errorf("gpu: AppendTensor: tensor %q of shape %v", t.Name, t.Shape)
	}
	if r == nil || len(r.Steps) == 0 || len(r.Steps[0].Ops) != 1 || len(r.Steps[0].Sel.Slots) != 0 {
		return dst, fmt.Errorf("%w: gpu: recipe %v: the GPU runs a first step of one fp16, bf16 or int8 op", codec.ErrUnsupported, r)
	}
	op := r.Steps[0].Ops[0]
	var outs [][]byte
	var err error
	switch name := op.Stage().Name; name {
	case "fp16", "bf16":
		out := make([]byte, 2*n)
		outs = [][]byte{out}
		err = d.half(out, x, n, name == "bf16")
	case "int8", "nf4", "fp4":
		be, ok := op.(interface{ BlockElems() int })
		if !ok {
			return dst, fmt.Errorf("%w: gpu: %v has no block size", codec.ErrUnsupported, op)
		}
		b := be.BlockElems()
		nq := n
		if name != "int8" {
			nq = (n + 1) / 2
		}
		q, scale := make([]byte, nq), make([]byte, 4*((n+b-1)/b))
		outs = [][]byte{q, scale}
		err = d.blocks(name, q, scale, x, n, b)
	default:
		return dst, fmt.Errorf("%w: gpu: %v runs on the CPU only", codec.ErrUnsupported, op)
	}
	if err != nil {
		return dst, err
	}
	rest := &codec.Recipe{Steps: append([]codec.Step{{Sel: r.Steps[0].Sel, Ops: []codec.Op{done{Op: op, outs: outs}}}}, r.Steps[1:]...)}
	ct := *t
	ct.Data = make([]byte, 4*n) // its length counts; its bytes are not read
	return enc.AppendTensor(dst, &ct, rest)
}

// done is an op whose output was computed on the device: the frame
// records op (its stage and parameters), and Encode hands over the
// device's output.
type done struct {
	codec.Op
	outs [][]byte
}

func (o done) Encode(_ *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	infos, err := o.Op.Outputs(in.SegInfo)
	if err != nil {
		return nil, err
	}
	if len(infos) != len(o.outs) {
		return nil, fmt.Errorf("gpu: %v: %d outputs, the device made %d", o.Op, len(infos), len(o.outs))
	}
	segs := make([]codec.Segment, len(infos))
	for i, info := range infos {
		if info.Len >= 0 && info.Len != len(o.outs[i]) {
			return nil, fmt.Errorf("gpu: %v: output %q of %d bytes, the device made %d", o.Op, info.Name, info.Len, len(o.outs[i]))
		}
		info.Len = len(o.outs[i])
		segs[i] = codec.Segment{SegInfo: info, Data: o.outs[i]}
	}
	return segs, nil
}

// half converts n float32 at x to fp16 (bf16) bits in out, on the device.
func (d *Device) half(out []byte, x Ptr, n int, bf bool) error {
	y, err := d.Alloc(2 * n)
	if err != nil {
		return err
	}
	defer d.Free(y)
	if bf {
		err = d.BF16(y, x, n, nil)
	} else {
		err = d.F16(y, x, n, nil)
	}
	if err == nil {
		err = d.Synchronize()
	}
	if err == nil {
		err = d.CopyDtoH(out, y)
	}
	return err
}

// blocks quantizes n float32 at x in blocks of b into q and scale, with
// the kind name (int8, nf4, fp4).
func (d *Device) blocks(name string, q, scale []byte, x Ptr, n, b int) error {
	nb := (n + b - 1) / b
	a := (len(q) + 3) &^ 3 // the scales and the flag start 4-byte aligned
	buf, err := d.Alloc(a + 4*nb + 4)
	if err != nil {
		return err
	}
	defer d.Free(buf)
	qp, sp, bad := buf, buf+Ptr(a), buf+Ptr(a+4*nb)
	if name == "int8" {
		err = d.Int8Blocks(qp, sp, x, n, b, bad, nil)
	} else {
		err = d.Q4Blocks(qp, sp, x, n, b, name == "fp4", bad, nil)
	}
	if err != nil {
		return err
	}
	if err := d.Synchronize(); err != nil {
		return err
	}
	var flag [4]byte
	if err := d.CopyDtoH(flag[:], bad); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(flag[:]) != 0 {
		return ErrNonFinite
	}
	if err := d.CopyDtoH(q, qp); err != nil {
		return err
	}
	return d.CopyDtoH(scale, sp)
}
