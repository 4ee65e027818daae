package gpu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
	_ "github.com/tensorpress/tensorpress/lossy"
	"github.com/tensorpress/tensorpress/sparse"
)

// fakeKernels compute, for the fake driver, what the kernels of
// kernels/kernels.cu compute: their contracts, element by element, not
// their threads. With them the Go side of the kernels (ops.go: launch
// arguments, scratch, the selection's passes and adaptations) runs on a
// machine without a GPU; the kernels themselves are checked by the
// emulation tests and, on a GPU, by the device tests.
var fakeKernels = map[string]func(k *fakeLaunch) bool{
	"tp_f32_to_f16": func(k *fakeLaunch) bool {
		n := k.u64(2)
		x, y := k.mem(0, 4*n), k.mem(1, 2*n)
		if x == nil || y == nil {
			return false
		}
		for i := range n {
			binary.LittleEndian.PutUint16(y[2*i:], float16.F16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))))
		}
		return true
	},
	"tp_f32_to_bf16": func(k *fakeLaunch) bool {
		n := k.u64(2)
		x, y := k.mem(0, 4*n), k.mem(1, 2*n)
		if x == nil || y == nil {
			return false
		}
		for i := range n {
			binary.LittleEndian.PutUint16(y[2*i:], float16.BF16FromF32(math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))))
		}
		return true
	},
	"tp_int8_blocks": func(k *fakeLaunch) bool {
		n, bsize := k.u64(3), uint64(k.u32(4))
		nb := (n + bsize - 1) / bsize
		x, q, scale, bad := k.mem(0, 4*n), k.mem(1, n), k.mem(2, 4*nb), k.mem(5, 4)
		if x == nil || q == nil || scale == nil || bad == nil {
			return false
		}
		for j := range nb {
			lo, hi := j*bsize, min(j*bsize+bsize, n)
			var m uint32
			for i := lo; i < hi; i++ {
				m = max(m, binary.LittleEndian.Uint32(x[4*i:])&0x7fffffff)
			}
			if m >= 0x7f800000 {
				binary.LittleEndian.PutUint32(bad, 1)
				binary.LittleEndian.PutUint32(scale[4*j:], 0)
				continue
			}
			a := math.Float32frombits(m)
			binary.LittleEndian.PutUint32(scale[4*j:], m)
			for i := lo; i < hi; i++ {
				v := math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
				switch {
				case m == 0:
					q[i] = 0
				case m < (127-100)<<23:
					inv := float32(127) / float32(a*0x1p100)
					q[i] = byte(fakeRC127(float32(float32(v*0x1p100) * inv)))
				default:
					q[i] = byte(fakeRC127(float32(v * (float32(127) / a))))
				}
			}
		}
		return true
	},
	"tp_zero": func(k *fakeLaunch) bool {
		n := k.u64(1)
		p := k.mem(0, 4*n)
		clear(p)
		return p != nil
	},
	"tp_topk_hist": func(k *fakeLaunch) bool {
		n, nbins, shift, pshift := k.u64(1), k.u32(3), k.u32(4), k.u32(5)
		x, hist, st := k.mem(0, 4*n), k.mem(2, 4*uint64(nbins)), k.mem(6, 8)
		if x == nil || hist == nil || st == nil || nbins > 2048 {
			return false
		}
		prefix := binary.LittleEndian.Uint32(st[4:])
		for i := range n {
			m := binary.LittleEndian.Uint32(x[4*i:]) & 0x7fffffff
			if m>>pshift == prefix {
				b := 4 * (m >> shift & (nbins - 1))
				binary.LittleEndian.PutUint32(hist[b:], binary.LittleEndian.Uint32(hist[b:])+1)
			}
		}
		return true
	},
	"tp_topk_find": func(k *fakeLaunch) bool {
		nbins, bits := k.u32(1), k.u32(2)
		hist, st := k.mem(0, 4*uint64(nbins)), k.mem(3, 12)
		if hist == nil || st == nil {
			return false
		}
		need0 := binary.LittleEndian.Uint32(st)
		need, b := need0, nbins
		for b > 0 {
			b--
			c := binary.LittleEndian.Uint32(hist[4*b:])
			if c >= need {
				break
			}
			need -= c
		}
		binary.LittleEndian.PutUint32(st, need)
		binary.LittleEndian.PutUint32(st[4:], binary.LittleEndian.Uint32(st[4:])<<bits|b)
		binary.LittleEndian.PutUint32(st[8:], need0-need+binary.LittleEndian.Uint32(hist[4*b:]))
		clear(hist)
		return true
	},
	"tp_topk_state": func(k *fakeLaunch) bool {
		st := k.mem(0, 8)
		if st == nil {
			return false
		}
		binary.LittleEndian.PutUint32(st, k.u32(1))
		binary.LittleEndian.PutUint32(st[4:], k.u32(2))
		return true
	},
	"tp_topk_count": func(k *fakeLaunch) bool {
		n := k.u64(1)
		tile := 16 * uint64(k.block)
		nt := (n + tile - 1) / tile
		x, st, cnt := k.mem(0, 4*n), k.mem(2, 8), k.mem(3, 8*nt)
		if x == nil || st == nil || cnt == nil {
			return false
		}
		t := binary.LittleEndian.Uint32(st[4:])
		for j := range nt {
			var gt, eq uint32
			for i := j * tile; i < min(n, j*tile+tile); i++ {
				m := binary.LittleEndian.Uint32(x[4*i:]) & 0x7fffffff
				if m > t {
					gt++
				} else if m == t {
					eq++
				}
			}
			binary.LittleEndian.PutUint32(cnt[8*j:], gt)
			binary.LittleEndian.PutUint32(cnt[8*j+4:], eq)
		}
		return true
	},
	"tp_topk_offsets": func(k *fakeLaunch) bool {
		nt := k.u64(1)
		cnt, st, off := k.mem(0, 8*nt), k.mem(2, 8), k.mem(3, 8*nt)
		if cnt == nil || st == nil || off == nil {
			return false
		}
		r := binary.LittleEndian.Uint32(st)
		var gt, eq uint32
		for j := range nt {
			binary.LittleEndian.PutUint32(off[8*j:], gt+min(eq, r))
			binary.LittleEndian.PutUint32(off[8*j+4:], eq)
			gt += binary.LittleEndian.Uint32(cnt[8*j:])
			eq += binary.LittleEndian.Uint32(cnt[8*j+4:])
		}
		return true
	},
	"tp_topk_compact": func(k *fakeLaunch) bool {
		n := k.u64(1)
		x, st := k.mem(0, 4*n), k.mem(2, 8)
		if x == nil || st == nil {
			return false
		}
		r, t := binary.LittleEndian.Uint32(st), binary.LittleEndian.Uint32(st[4:])
		// The selected count, to bound the outputs.
		var sel, eq uint64
		for i := range n {
			m := binary.LittleEndian.Uint32(x[4*i:]) & 0x7fffffff
			if m > t || m == t && eq < uint64(r) {
				sel++
			}
			if m == t {
				eq++
			}
		}
		idx, val := k.mem(4, 4*sel), k.mem(5, 4*sel)
		if sel > 0 && (idx == nil || val == nil) {
			return false
		}
		var j uint64
		eq = 0
		for i := range n {
			v := binary.LittleEndian.Uint32(x[4*i:])
			m := v & 0x7fffffff
			if m > t || m == t && eq < uint64(r) {
				binary.LittleEndian.PutUint32(idx[4*j:], uint32(i))
				binary.LittleEndian.PutUint32(val[4*j:], v)
				j++
			}
			if m == t {
				eq++
			}
		}
		return true
	},
	"tp_add_f32": func(k *fakeLaunch) bool {
		n := k.u64(3)
		g, res, c := k.mem(0, 4*n), k.mem(1, 4*n), k.mem(2, 4*n)
		if g == nil || res == nil || c == nil {
			return false
		}
		for i := range n {
			s := math.Float32frombits(binary.LittleEndian.Uint32(g[4*i:])) + math.Float32frombits(binary.LittleEndian.Uint32(res[4*i:]))
			binary.LittleEndian.PutUint32(c[4*i:], math.Float32bits(s))
		}
		return true
	},
	"tp_scatter_zero": func(k *fakeLaunch) bool {
		n := k.u64(2)
		idx := k.mem(1, 4*n)
		if idx == nil {
			return false
		}
		for j := range n {
			p := k.at(0, 4*uint64(binary.LittleEndian.Uint32(idx[4*j:])), 4)
			if p == nil {
				return false
			}
			clear(p)
		}
		return true
	},
	"tp_dgc_compensate": func(k *fakeLaunch) bool {
		n, m, nesterov, scale := k.u64(4), k.f32(5), k.u32(6), k.f32(7)
		g, u, c := k.mem(0, 4*n), k.mem(1, 4*n), k.mem(3, 4*n)
		var res []byte
		if k.u64(2) != 0 {
			res = k.mem(2, 4*n)
		}
		if g == nil || u == nil || c == nil || k.u64(2) != 0 && res == nil {
			return false
		}
		f := func(b []byte, i uint64) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }
		for i := range n {
			gi, ui := float32(scale*f(g, i)), f(u, i)
			var v float32
			if nesterov != 0 {
				ui = m * (ui + gi)
				v = ui + gi
			} else {
				ui = float32(m*ui) + gi
				v = ui
			}
			if res != nil {
				v += f(res, i)
			}
			binary.LittleEndian.PutUint32(u[4*i:], math.Float32bits(ui))
			binary.LittleEndian.PutUint32(c[4*i:], math.Float32bits(v))
		}
		return true
	},
	"tp_gather": func(k *fakeLaunch) bool {
		start, stride, num := k.u64(1), k.u64(2), k.u64(3)
		smp := k.mem(4, 4*num)
		if smp == nil {
			return false
		}
		for j := range num {
			v := k.at(0, 4*(start+j*stride), 4)
			if v == nil {
				return false
			}
			binary.LittleEndian.PutUint32(smp[4*j:], binary.LittleEndian.Uint32(v)&0x7fffffff)
		}
		return true
	},
}

func init() {
	fakeKernels["tp_take"] = func(k *fakeLaunch) bool {
		n := k.u64(2)
		idx, dst := k.mem(1, 4*n), k.mem(3, 4*n)
		if idx == nil || dst == nil {
			return false
		}
		for j := range n {
			v := k.at(0, 4*uint64(binary.LittleEndian.Uint32(idx[4*j:])), 4)
			if v == nil {
				return false
			}
			copy(dst[4*j:], v)
		}
		return true
	}
	fakeKernels["tp_put"] = func(k *fakeLaunch) bool {
		n := k.u64(2)
		idx, src := k.mem(1, 4*n), k.mem(3, 4*n)
		if idx == nil || src == nil {
			return false
		}
		for j := range n {
			v := k.at(0, 4*uint64(binary.LittleEndian.Uint32(idx[4*j:])), 4)
			if v == nil {
				return false
			}
			copy(v, src[4*j:4*j+4])
		}
		return true
	}
	fakeKernels["tp_sumsq_blocks"] = func(k *fakeLaunch) bool {
		n, bsize := k.u64(1), uint64(k.u32(2))
		nb := (n + bsize - 1) / bsize
		g, part := k.mem(0, 4*n), k.mem(3, 8*nb)
		if g == nil || part == nil {
			return false
		}
		for j := range nb {
			var b float64
			for i := j * bsize; i < min(n, j*bsize+bsize); i++ {
				x := float64(math.Float32frombits(binary.LittleEndian.Uint32(g[4*i:])))
				b += float64(x * x)
			}
			binary.LittleEndian.PutUint64(part[8*j:], math.Float64bits(b))
		}
		return true
	}
	// deltas reads k increasing u32 at parameter 0 as their deltas.
	deltas := func(k *fakeLaunch, n uint64) []uint32 {
		idx := k.mem(0, 4*n)
		if idx == nil {
			return nil
		}
		d := make([]uint32, n)
		var prev uint32
		for i := range n {
			x := binary.LittleEndian.Uint32(idx[4*i:])
			d[i], prev = x-prev, x
		}
		return d
	}
	fakeKernels["tp_pack_sizes"] = func(k *fakeLaunch) bool {
		n := k.u64(1)
		nb := (n + 127) / 128
		d, size := deltas(k, n), k.mem(2, 4*nb)
		if d == nil || size == nil {
			return false
		}
		for j := range nb {
			binary.LittleEndian.PutUint32(size[4*j:], uint32(sparse.BitpackLen(d[128*j:min(n, 128*j+128)])))
		}
		return true
	}
	fakeKernels["tp_scan"] = func(k *fakeLaunch) bool {
		n := k.u64(1)
		in, off := k.mem(0, 4*n), k.mem(2, 4*n+4)
		if in == nil || off == nil {
			return false
		}
		var sum uint32
		for j := range n {
			binary.LittleEndian.PutUint32(off[4*j:], sum)
			sum += binary.LittleEndian.Uint32(in[4*j:])
		}
		binary.LittleEndian.PutUint32(off[4*n:], sum)
		return true
	}
	fakeKernels["tp_pack"] = func(k *fakeLaunch) bool {
		n := k.u64(1)
		d := deltas(k, n)
		packed := sparse.AppendBitpack(nil, d)
		out := k.mem(3, uint64(len(packed)))
		if d == nil || out == nil {
			return false
		}
		copy(out, packed)
		return true
	}
	fakeKernels["tp_q4_blocks"] = func(k *fakeLaunch) bool {
		n, bsize, fp4 := k.u64(3), uint64(k.u32(4)), k.u32(5) != 0
		nb := (n + bsize - 1) / bsize
		x, q, scale, bad := k.mem(0, 4*n), k.mem(1, (n+1)/2), k.mem(2, 4*nb), k.mem(6, 4)
		if x == nil || q == nil || scale == nil || bad == nil {
			return false
		}
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
		}
		kind := "nf4"
		if fp4 {
			kind = "fp4"
		}
		// The stage itself, block by block (blocks are whole bytes).
		enc, _ := codec.NewEncoder()
		r := codec.MustParseRecipe(fmt.Sprintf("%s(%d)", kind, bsize))
		for j := range nb {
			lo, hi := j*bsize, min(n, j*bsize+bsize)
			frame, err := enc.AppendTensor(nil, codec.FromFloat32("x", xs[lo:hi], int64(hi-lo)), r)
			if err != nil {
				binary.LittleEndian.PutUint32(bad, 1)
				binary.LittleEndian.PutUint32(scale[4*j:], 0)
				continue
			}
			br := bufio.NewReader(bytes.NewReader(frame))
			h, _, err := codec.ReadFrameHeader(br, br, codec.Limits{}, nil)
			if err != nil {
				return false
			}
			payload := frame[h.HeaderLen:]
			for _, sg := range h.Entries[0].Stored {
				switch sg.Name {
				case "q":
					copy(q[lo/2:], payload[:sg.Len])
				case "scale":
					copy(scale[4*j:], payload[:sg.Len])
				}
				payload = payload[sg.Len:]
			}
		}
		return true
	}
	fakeKernels["tp_nonfinite_zero"] = func(k *fakeLaunch) bool {
		n := k.u64(1)
		c := k.mem(0, 4*n)
		if c == nil {
			return false
		}
		for i := range n {
			if binary.LittleEndian.Uint32(c[4*i:])&0x7fffffff >= 0x7f800000 {
				binary.LittleEndian.PutUint32(c[4*i:], 0)
			}
		}
		return true
	}
}

func fakeRC127(y float32) int32 {
	r := int32(math.Float32bits(y+0x1.8p23)) - 0x4b400000
	return max(-127, min(127, r))
}

// fakeLaunch is one launch's arguments and the fake device memory.
type fakeLaunch struct {
	f      *fakeDriver
	params []unsafe.Pointer
	block  uint32
}

func (k *fakeLaunch) u64(i int) uint64  { return *(*uint64)(k.params[i]) }
func (k *fakeLaunch) u32(i int) uint32  { return *(*uint32)(k.params[i]) }
func (k *fakeLaunch) f32(i int) float32 { return *(*float32)(k.params[i]) }

// mem returns n bytes at the device address in parameter i (nil when
// outside every allocation; an empty slice for n 0).
func (k *fakeLaunch) mem(i int, n uint64) []byte { return k.at(i, 0, n) }

// at returns n bytes at offset off from the address in parameter i.
func (k *fakeLaunch) at(i int, off, n uint64) []byte {
	if n == 0 {
		return []byte{}
	}
	return k.f.span(k.u64(i)+off, uintptr(n))
}

// fakeKernelParams are the kernels' parameter counts.
var fakeKernelParams = map[string]int{
	"tp_f32_to_f16": 3, "tp_f32_to_bf16": 3, "tp_int8_blocks": 6, "tp_zero": 2, "tp_topk_hist": 7,
	"tp_topk_find": 4, "tp_topk_count": 4, "tp_topk_offsets": 4, "tp_topk_compact": 6, "tp_add_f32": 4,
	"tp_scatter_zero": 3, "tp_dgc_compensate": 8, "tp_gather": 5, "tp_topk_state": 3,
	"tp_take": 4, "tp_put": 4, "tp_nonfinite_zero": 2, "tp_sumsq_blocks": 4,
	"tp_pack_sizes": 3, "tp_scan": 3, "tp_pack": 4, "tp_q4_blocks": 7,
}
