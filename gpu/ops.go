package gpu

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/tensorpress/tensorpress/internal/topk"
)

// ErrNonFinite is returned by Int8Blocks for a block that holds a NaN or
// an infinity, which the int8 stage refuses too.
var ErrNonFinite = errors.New("gpu: a block holds a NaN or an infinity")

// ops are the embedded kernels on one Device, loaded on first use.
type ops struct {
	once sync.Once
	err  error
	mod  *Module
	fn   map[string]*Function
}

// kernel returns the named kernel of the embedded module on d.
func (d *Device) kernel(name string) (*Function, error) {
	o := &d.kern
	o.once.Do(func() {
		o.mod, o.err = d.LoadModule(kernelsPTX)
		if o.err != nil {
			return
		}
		o.fn = map[string]*Function{}
		for _, n := range kernelNames {
			f, err := o.mod.Function(n)
			if err != nil {
				o.err = err
				return
			}
			o.fn[n] = f
		}
	})
	if o.err != nil {
		return nil, o.err
	}
	return o.fn[name], nil
}

// kernelNames are the kernels of kernels.ptx.
var kernelNames = []string{"tp_f32_to_f16", "tp_f32_to_bf16", "tp_int8_blocks", "tp_zero", "tp_topk_hist",
	"tp_topk_find", "tp_topk_count", "tp_topk_offsets", "tp_topk_compact", "tp_add_f32", "tp_scatter_zero",
	"tp_dgc_compensate", "tp_gather", "tp_topk_state", "tp_take", "tp_put", "tp_nonfinite_zero", "tp_sumsq_blocks", "tp_pack_sizes", "tp_scan", "tp_pack", "tp_q4_blocks"}

const threads = 256 // TP_BLOCK_THREADS

// grid is the blocks of a grid-stride launch over n elements: enough to
// fill a large GPU several times, no more.
func grid(n int) uint32 { return uint32(min(max((n+threads-1)/threads, 1), 132*16)) }

// aligned refuses an address that is not a multiple of size, the bytes
// of the elements a kernel reads or writes there: the access would fault
// on the device (CUDA_ERROR_MISALIGNED_ADDRESS), an error that spoils
// the context for good, every later call of the process failing with it.
// Alloc's addresses are 256-byte aligned; an offset into a buffer must
// keep the element's alignment.
func aligned(op string, size Ptr, ps ...Ptr) error {
	for _, p := range ps {
		if p%size != 0 {
			return fmt.Errorf("gpu: %s: address %#x is not a multiple of %d", op, uintptr(p), size)
		}
	}
	return nil
}

// aligned2 is aligned for operations that read 4-byte elements at a and
// write 2-byte ones at b.
func aligned2(op string, a, b Ptr) error {
	if err := aligned(op, 4, a); err != nil {
		return err
	}
	return aligned(op, 2, b)
}

func (d *Device) launch(name string, blocks uint32, s *Stream, args ...any) error {
	q := batch{d: d, s: s}
	q.launch(name, blocks, args...)
	return q.run()
}

// F16 sets dst (n uint16) to the fp16 of src (n float32), as
// float16.F16FromF32 rounds them (the lossy fp16 stage).
func (d *Device) F16(dst, src Ptr, n int, s *Stream) error {
	if err := aligned2("F16", src, dst); err != nil {
		return err
	}
	return d.launch("tp_f32_to_f16", grid(n), s, src, dst, uint64(n))
}

// BF16 is F16 for bfloat16 (float16.BF16FromF32).
func (d *Device) BF16(dst, src Ptr, n int, s *Stream) error {
	if err := aligned2("BF16", src, dst); err != nil {
		return err
	}
	return d.launch("tp_f32_to_bf16", grid(n), s, src, dst, uint64(n))
}

// Int8Blocks quantizes x (n float32) as the lossy int8(bsize) stage does:
// q gets n codes, scale one absmax per block of bsize. bad is 4 bytes of
// device memory for the non-finite flag (zeroed here); a block with a
// NaN or an infinity gives ErrNonFinite after the stream is synchronised.
func (d *Device) Int8Blocks(q, scale, x Ptr, n, bsize int, bad Ptr, s *Stream) error {
	if bsize <= 0 {
		return fmt.Errorf("gpu: Int8Blocks: block size %d", bsize)
	}
	if err := aligned("Int8Blocks", 4, x, scale, bad); err != nil {
		return err
	}
	if err := d.launch("tp_zero", 1, s, bad, uint64(1)); err != nil {
		return err
	}
	blocks := uint32(min((n+bsize-1)/bsize, 132*16))
	return d.launch("tp_int8_blocks", max(blocks, 1), s, x, q, scale, uint64(n), uint32(bsize), bad)
}

// Q4Blocks quantizes x (n float32) as the lossy nf4(bsize) stage does (or
// fp4(bsize), fp4 true): q gets (n+1)/2 bytes of codes, two a byte,
// scale one absmax per block; bad as for Int8Blocks. bsize is a multiple
// of 8.
func (d *Device) Q4Blocks(q, scale, x Ptr, n, bsize int, fp4 bool, bad Ptr, s *Stream) error {
	if bsize <= 0 || bsize%8 != 0 {
		return fmt.Errorf("gpu: Q4Blocks: block size %d: want a multiple of 8", bsize)
	}
	if err := aligned("Q4Blocks", 4, x, scale, bad); err != nil {
		return err
	}
	if err := d.launch("tp_zero", 1, s, bad, uint64(1)); err != nil {
		return err
	}
	var f uint32
	if fp4 {
		f = 1
	}
	blocks := uint32(min((n+bsize-1)/bsize, 132*16))
	return d.launch("tp_q4_blocks", max(blocks, 1), s, x, q, scale, uint64(n), uint32(bsize), f, bad)
}

// Selector selects by magnitude on the device, as package topk does on
// the CPU: the same indices, in the same order. Its scratch memory grows
// to the largest input (8 bytes a tile of 4096 elements, a sample of at
// most 4 MiB, and 8 bytes a candidate: up to 4k, or 2^16, for a selection
// of k; without room for those it selects in more passes) and is freed by
// Close. Not safe for concurrent use.
type Selector struct {
	d        *Device
	st, hist Ptr  // 3 u32 of state (tp_topk_*); TP_HIST_MAX u32
	cleared  bool // hist is all zeros: each pass's find clears it for the next
	cnt, off Ptr  // 2 u32 a tile
	tiles    int
	cand     Ptr // candidates: candN u32 indices, then candN float32
	candN    int
	smp      Ptr // Exact's sample: smpN u32
	smpN     int
	host     []byte // pinned: the state (12 bytes), then a tile's offsets and counts (16) read back
}

const tile = 16 * threads // TP_TILE_ROUNDS x blockDim

// NewSelector allocates a Selector's fixed scratch on d.
func (d *Device) NewSelector() (*Selector, error) {
	s := &Selector{d: d}
	var err error
	if s.st, err = d.Alloc(12); err == nil {
		if s.hist, err = d.Alloc(4 * 2048); err == nil {
			s.host, err = d.AllocHost(32)
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close frees the Selector's memory.
func (s *Selector) Close() error {
	var errs []error
	for _, p := range []*Ptr{&s.st, &s.hist, &s.cnt, &s.off, &s.cand, &s.smp} {
		if *p != 0 {
			errs = append(errs, s.d.Free(*p))
			*p = 0
		}
	}
	if s.host != nil {
		errs = append(errs, s.d.FreeHost(s.host))
		s.host = nil
	}
	return errors.Join(errs...)
}

// tilesFor makes room for the tiles' counts and offsets of n elements.
// A reallocation first runs q, whose launches may name the old buffers.
func (s *Selector) tilesFor(q *batch, n int) error {
	t := (n + tile - 1) / tile
	if t <= s.tiles {
		return nil
	}
	if err := s.runQ(q); err != nil {
		return err
	}
	for _, p := range []*Ptr{&s.cnt, &s.off} {
		if *p != 0 {
			if err := s.d.Free(*p); err != nil {
				return err
			}
			*p = 0
		}
	}
	s.tiles = 0
	var err error
	if s.cnt, err = s.d.Alloc(8 * t); err != nil {
		return err
	}
	if s.off, err = s.d.Alloc(8 * t); err != nil {
		return err
	}
	s.tiles = t
	return nil
}

// grow makes *p hold n elements of size bytes; *have is what it holds.
// A reallocation first runs q, whose launches may name the old buffer.
func (s *Selector) grow(q *batch, p *Ptr, have *int, n, size int) error {
	if n <= *have {
		return nil
	}
	if err := s.runQ(q); err != nil {
		return err
	}
	if *p != 0 {
		if err := s.d.Free(*p); err != nil {
			return err
		}
		*p, *have = 0, 0
	}
	r, err := s.d.Alloc(size * n)
	if err != nil {
		return err
	}
	*p, *have = r, n
	return nil
}

// roomFor grows the candidates' scratch to n; false where the device has
// no room for it (the caller then selects without candidates).
func (s *Selector) roomFor(q *batch, n int) (bool, error) {
	err := s.grow(q, &s.cand, &s.candN, n, 8)
	if errors.Is(err, ErrOutOfMemory) {
		return false, nil
	}
	return err == nil, err
}

// setState adds st[0] = need and st[1] = prefix to q.
func (s *Selector) setState(q *batch, need, prefix uint32) {
	q.launch("tp_topk_state", 1, s.st, need, prefix)
}

// readState runs q with a read of the state and a wait, and returns the
// state: the elements still to take at the cut, the prefix, and the
// elements at or above the last pass's bin.
func (s *Selector) readState(q *batch) (need, prefix, ge uint32, err error) {
	b := s.host[:12]
	q.copyDtoH(b, s.st)
	q.wait()
	if err := s.runQ(q); err != nil {
		return 0, 0, 0, err
	}
	return getU32(b), getU32(b[4:]), getU32(b[8:]), nil
}

// A radix pass of the selection: a histogram of nbins bins of the
// magnitudes' bits from shift up, among those whose bits from pshift up
// are the prefix found so far; the bin of the cut appends bits to it.
type radixPass struct{ nbins, shift, pshift, bits uint32 }

var radixPasses = [3]radixPass{{2048, 20, 31, 11}, {2048, 9, 20, 11}, {512, 0, 9, 9}}

// radix adds a pass over x (n elements) to q.
func (s *Selector) radix(q *batch, x Ptr, n int, p radixPass) {
	if !s.cleared {
		// New, or a pass whose find may not have run.
		q.launch("tp_zero", 8, s.hist, uint64(2048))
	}
	// At least 16 elements a thread: each block clears and adds up 2048
	// bins of its own, which would outweigh a sample's few elements.
	blocks := uint32(min(max(n/(16*threads), 1), 132*16))
	q.launch("tp_topk_hist", blocks, x, uint64(n), s.hist, p.nbins, p.shift, p.pshift, s.st)
	q.launch("tp_topk_find", 1, s.hist, p.nbins, p.bits, s.st)
	s.cleared = true // as find leaves it (runQ and the callers' errors say otherwise)
}

// kth adds to q the radix selection of the need-th largest magnitude of x
// (n elements) into the state: st[1] the magnitude, st[0] how many equal
// to it are taken.
func (s *Selector) kth(q *batch, x Ptr, n, need int) {
	s.setState(q, uint32(need), 0)
	for _, p := range radixPasses {
		s.radix(q, x, n, p)
	}
}

// count adds to q the count, tile by tile, of the magnitudes of x above
// st[1] and equal to it, and the placing of each tile's selection in the
// output (offsets).
func (s *Selector) count(q *batch, x Ptr, n int) error {
	if err := s.tilesFor(q, n); err != nil {
		return err
	}
	t := (n + tile - 1) / tile
	q.launch("tp_topk_count", uint32(min(t, 132*16)), x, uint64(n), s.st, s.cnt)
	q.launch("tp_topk_offsets", 1, s.cnt, uint64(t), s.st, s.off)
	return nil
}

// compactCounted adds to q the writing of the selection that count
// placed: the indices of the magnitudes of x above st[1], and the first
// st[0] equal to it, ascending, to idx, and their elements to val.
func (s *Selector) compactCounted(q *batch, idx, val, x Ptr, n int) {
	t := (n + tile - 1) / tile
	q.launch("tp_topk_compact", uint32(min(t, 132*16)), x, uint64(n), s.st, s.off, idx, val)
}

// countAtOrAbove adds to q the state that takes every magnitude of x at
// or above t and their count (a compactCounted may follow), runs q and
// returns how many there are.
func (s *Selector) countAtOrAbove(q *batch, x Ptr, n int, t uint32) (int, error) {
	s.setState(q, math.MaxUint32, t)
	if err := s.count(q, x, n); err != nil {
		return 0, err
	}
	// The last tile's offset (every tie is taken) and its counts.
	last := Ptr(8 * ((n+tile-1)/tile - 1))
	b := s.host[16:32]
	q.copyDtoH(b[:8], s.off+last)
	q.copyDtoH(b[8:], s.cnt+last)
	q.wait()
	if err := s.runQ(q); err != nil {
		return 0, err
	}
	return int(getU32(b)) + int(getU32(b[8:])) + int(getU32(b[12:])), nil
}

// runQ runs q; after a failure the histogram may hold a pass's counts,
// so the next pass clears it first.
func (s *Selector) runQ(q *batch) error {
	err := q.run()
	if err != nil {
		s.cleared = false
	}
	return err
}

// Exact writes to idx and val (k uint32 and k float32 of device memory)
// the indices of the k largest magnitudes of x (n float32 on the
// device), ascending, ties to the lower index, and their elements: what
// topk.Exact selects. n must be below 2^32. Its launches and the reads of
// their results go to the device in three or four trips (batch).
func (s *Selector) Exact(idx, val, x Ptr, n, k int, st *Stream) error {
	if n < 0 || uint64(n) >= 1<<32 || k < 0 {
		return fmt.Errorf("gpu: Exact: n %d, k %d", n, k)
	}
	if err := aligned("Exact", 4, idx, val, x); err != nil {
		return err
	}
	q := &batch{d: s.d, s: st}
	if err := s.exact(q, idx, val, x, n, min(k, n), true); err != nil {
		s.cleared = false // what was added is dropped
		return err
	}
	return s.runQ(q)
}

// candidatesMax is the most candidates exact compacts to select among
// for a selection of k: 8 bytes of scratch each.
func candidatesMax(k int) int { return max(4*k, 1<<16) }

// exact adds Exact to q (and runs q where it needs a result). With among,
// candidates first: those at or above a threshold from a sample of x
// where that threshold holds at least k and at most candidatesMax(k)
// (exactSampled: two passes over x); else, where the first radix pass
// leaves at most candidatesMax(k) and fewer than half of the elements at
// or above its bin (one read of the state back), those are compacted and
// the k chosen among them: three passes over x (a histogram, the count,
// the compaction). Otherwise, without among, and where the device has no
// room for the candidates (8 bytes each), five (three histograms, the
// count, the compaction).
func (s *Selector) exact(q *batch, idx, val, x Ptr, n, k int, among bool) error {
	if k == 0 {
		return nil
	}
	if among {
		if done, err := s.exactSampled(q, idx, val, x, n, k); done || err != nil {
			return err
		}
	}
	s.setState(q, uint32(k), 0)
	s.radix(q, x, n, radixPasses[0])
	if among {
		_, prefix, ge, err := s.readState(q)
		if err != nil {
			return err
		}
		c := int(ge)
		room := false
		if c <= candidatesMax(k) && c < n/2 {
			if room, err = s.roomFor(q, c); err != nil {
				return err
			}
		}
		if room {
			s.setState(q, math.MaxUint32, prefix<<radixPasses[0].shift)
			if err := s.count(q, x, n); err != nil {
				return err
			}
			return s.exactAmong(q, idx, val, x, n, k, c)
		}
	}
	for _, p := range radixPasses[1:] {
		s.radix(q, x, n, p)
	}
	if err := s.count(q, x, n); err != nil {
		return err
	}
	s.compactCounted(q, idx, val, x, n)
	return nil
}

// exactSampled is Exact where x is large (at least 2^20 elements) and k
// at most a sixteenth of it: a threshold t is the magnitude 2k/n of the
// way down an evenly spaced sample of n/64 elements of x (at most 2^20;
// 16 more against chance), and where between k and candidatesMax(k)
// magnitudes of x are at or above t, the k largest are chosen among them
// (exactAmong): the selection Exact makes, with a count and a compaction
// over x and no histogram. It reports whether it did; where the sample
// misled (a stride that meets a pattern in x), nothing is written and the
// caller selects otherwise, one pass over x later.
func (s *Selector) exactSampled(q *batch, idx, val, x Ptr, n, k int) (bool, error) {
	if n < 1<<20 || k > n/16 {
		return false, nil
	}
	num := min(n>>6, 1<<20)
	stride := n / num
	ks := int((2*uint64(num)*uint64(k)+uint64(n)-1)/uint64(n)) + 16
	if err := s.grow(q, &s.smp, &s.smpN, num, 4); err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			err = nil // selected without the sample
		}
		return false, err
	}
	_, count, err := s.sampleThreshold(q, x, n, uint64(stride/2), uint64(stride), uint64(num), ks, s.smp)
	if err != nil || count < k || count > candidatesMax(k) {
		return false, err
	}
	if room, err := s.roomFor(q, count); !room {
		return false, err
	}
	return true, s.exactAmong(q, idx, val, x, n, k, count)
}

// sampleThreshold gathers the magnitudes of x at start, start+stride, ...
// (num of them) into smp, takes the ks-th largest of them as a threshold
// t, and counts the magnitudes of x at or above t (the state then takes
// them all: a compactCounted may follow). Two trips.
func (s *Selector) sampleThreshold(q *batch, x Ptr, n int, start, stride, num uint64, ks int, smp Ptr) (t uint32, count int, err error) {
	q.launch("tp_gather", grid(int(num)), x, start, stride, num, smp)
	s.kth(q, smp, int(num), ks)
	if _, t, _, err = s.readState(q); err != nil {
		return 0, 0, err
	}
	count, err = s.countAtOrAbove(q, x, n, t)
	return t, count, err
}

// exactAmong adds to q Exact for x when count > k of its magnitudes are
// at or above a threshold, count has placed them (the state takes them
// all) and the candidates' scratch holds count: those are compacted
// (indices ascending), the k largest chosen among them (ties to the lower
// position, so to the lower index), and their positions mapped back to
// indices of x.
func (s *Selector) exactAmong(q *batch, idx, val, x Ptr, n, k, count int) error {
	cidx, cval := s.cand, s.cand+Ptr(4*s.candN)
	s.compactCounted(q, cidx, cval, x, n)
	if err := s.exact(q, idx, val, cval, count, k, false); err != nil {
		return err
	}
	q.take(idx, cidx, idx, k) // each thread reads its idx[j], then writes it
	return nil
}

// Sampled writes to idx and val the selection of topk.Sampled with the
// same options and returns how many were selected (at most k). The
// threshold adaptations read a count back from the device after each
// pass; the launches between go to the device in one trip each.
func (s *Selector) Sampled(idx, val, x Ptr, n, k int, opt topk.SampleOptions, smp Ptr, st *Stream) (int, error) {
	// See topk.Sampled: the same steps, each pass over x on the device.
	if err := aligned("Sampled", 4, idx, val, x, smp); err != nil {
		return 0, err
	}
	k = min(k, n)
	if k <= 0 {
		return 0, nil
	}
	q := &batch{d: s.d, s: st}
	c, err := s.sampled(q, idx, val, x, n, k, opt, smp)
	if err != nil {
		s.cleared = false // what was added is dropped
		return 0, err
	}
	return c, s.runQ(q)
}

func (s *Selector) sampled(q *batch, idx, val, x Ptr, n, k int, opt topk.SampleOptions, smp Ptr) (int, error) {
	ratio, upper, lower, iters := opt.Resolved()
	exact := func() (int, error) { return k, s.exact(q, idx, val, x, n, k, true) }
	if k == n {
		return exact() // every element: Exact gives them all, in order
	}
	stride, num, ks := topk.SampleParams(n, k, ratio)
	if stride == 0 {
		return exact()
	}
	start := opt.Start % stride
	num = (uint64(n) - start + stride - 1) / stride
	t0, count, err := s.sampleThreshold(q, x, n, start, stride, num, int(ks), smp)
	if err != nil {
		return 0, err
	}
	thr := math.Float32frombits(t0)
	for range iters {
		next, again := topk.Adapt(thr, count, k, upper, lower, opt.NoResample)
		if !again {
			break
		}
		thr = next
		if count, err = s.countAtOrAbove(q, x, n, math.Float32bits(thr)&^(1<<31)); err != nil {
			return 0, err
		}
	}
	switch {
	case count > 4*k:
		return exact() // the k largest of those at or above thr are the k largest of x
	case count > k:
		// The k largest of x are the k largest of the count at or above
		// thr, which are few (scratch of 8 bytes each, at most 4k) and
		// counted: selected among them, one more pass over x.
		if room, err := s.roomFor(q, count); err != nil || !room {
			if err != nil {
				return 0, err
			}
			return exact()
		}
		return k, s.exactAmong(q, idx, val, x, n, k, count)
	}
	// Every magnitude at or above thr, counted: ties all taken.
	s.compactCounted(q, idx, val, x, n)
	return count, nil
}

// DGCCompensate is gradient.DGC.Compensate on the device: u (momentum,
// updated in place) and c (the compensated gradient) from g scaled by
// scale (ClipScale's, or 1), and the residual res (0: none).
func (d *Device) DGCCompensate(c, u, g, res Ptr, n int, momentum float32, nesterov bool, scale float32, s *Stream) error {
	if err := aligned("DGCCompensate", 4, c, u, g, res); err != nil {
		return err
	}
	var nv uint32
	if nesterov {
		nv = 1
	}
	return d.launch("tp_dgc_compensate", grid(n), s, g, u, res, c, uint64(n), momentum, nv, scale)
}

// SumSquares is gradient.SumSquares(g, bsize) of n float32 at g, the
// blocks summed on the device into part (8 bytes a block), their sums
// added on the host.
func (d *Device) SumSquares(g Ptr, n, bsize int, part Ptr, s *Stream) (float64, error) {
	if err := aligned("SumSquares", 4, g); err != nil {
		return 0, err
	}
	if err := aligned("SumSquares", 8, part); err != nil {
		return 0, err
	}
	nb := (n + bsize - 1) / bsize
	if err := d.launch("tp_sumsq_blocks", grid(nb), s, g, uint64(n), uint32(bsize), part); err != nil {
		return 0, err
	}
	if err := syncStream(d, s); err != nil {
		return 0, err
	}
	b := make([]byte, 8*nb)
	if err := d.CopyDtoH(b, part); err != nil {
		return 0, err
	}
	var ss float64
	for j := range nb {
		ss += math.Float64frombits(uint64(getU32(b[8*j:])) | uint64(getU32(b[8*j+4:]))<<32)
	}
	return ss, nil
}

// AddF32 sets c = g + res, element by element (error-feedback
// compensation).
func (d *Device) AddF32(c, g, res Ptr, n int, s *Stream) error {
	if err := aligned("AddF32", 4, c, g, res); err != nil {
		return err
	}
	return d.launch("tp_add_f32", grid(n), s, g, res, c, uint64(n))
}

// ScatterZero sets res[idx[j]] = 0 for j < k: the elements sent leave
// the residual.
func (d *Device) ScatterZero(res, idx Ptr, k int, s *Stream) error {
	if k == 0 {
		return nil
	}
	if err := aligned("ScatterZero", 4, res, idx); err != nil {
		return err
	}
	q := batch{d: d, s: s}
	q.scatterZero(res, idx, k)
	return q.run()
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
func getU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// syncStream waits for the work queued on s (nil: the default stream,
// so the whole device).
func syncStream(d *Device, s *Stream) error {
	if s == nil {
		return d.Synchronize()
	}
	return s.Synchronize()
}

// Take sets dst[j] = src[idx[j]] for j < k (4-byte elements).
func (d *Device) Take(dst, src, idx Ptr, k int, s *Stream) error {
	if k == 0 {
		return nil
	}
	if err := aligned("Take", 4, dst, src, idx); err != nil {
		return err
	}
	q := batch{d: d, s: s}
	q.take(dst, src, idx, k)
	return q.run()
}

// Put sets dst[idx[j]] = src[j] for j < k (4-byte elements).
func (d *Device) Put(dst, idx, src Ptr, k int, s *Stream) error {
	if k == 0 {
		return nil
	}
	if err := aligned("Put", 4, dst, idx, src); err != nil {
		return err
	}
	q := batch{d: d, s: s}
	q.put(dst, idx, src, k)
	return q.run()
}

// ZeroNonFinite sets the NaNs and infinities among c's n float32 to 0.
func (d *Device) ZeroNonFinite(c Ptr, n int, s *Stream) error {
	if err := aligned("ZeroNonFinite", 4, c); err != nil {
		return err
	}
	q := batch{d: d, s: s}
	q.zeroNonFinite(c, n)
	return q.run()
}

// PackIndices codes k increasing positions at idx as the sparse stages
// "delta, bitpack" do (sparse.AppendBitpack of their deltas) into out,
// which has room for 5 bytes a position, using size (room for 8 bytes a
// block of 128, and 4 more); it returns the coded length.
func (d *Device) PackIndices(out, idx Ptr, k int, size Ptr, s *Stream) (int, error) {
	if k == 0 {
		return 0, nil
	}
	if err := aligned("PackIndices", 4, idx, size); err != nil {
		return 0, err
	}
	return d.packIndices(&batch{d: d, s: s}, out, idx, k, size, nil)
}

// packIndices adds PackIndices's launches to q, runs q and returns the
// coded length: read into total (4 bytes of AllocHost's) in the same
// trip, or where total is nil, by a copy of its own.
func (d *Device) packIndices(q *batch, out, idx Ptr, k int, size Ptr, total []byte) (int, error) {
	if k == 0 {
		return 0, nil
	}
	nb := (k + 127) / 128
	off := size + Ptr(4*nb)
	q.launch("tp_pack_sizes", grid(nb), idx, uint64(k), size)
	q.launch("tp_scan", 1, size, uint64(nb), off)
	q.launch("tp_pack", grid(nb), idx, uint64(k), off, out)
	if total != nil {
		q.copyDtoH(total[:4], off+Ptr(4*nb))
	}
	q.wait()
	if err := q.run(); err != nil {
		return 0, err
	}
	if total == nil {
		var b [4]byte
		if err := d.CopyDtoH(b[:], off+Ptr(4*nb)); err != nil {
			return 0, err
		}
		total = b[:]
	}
	return int(getU32(total)), nil
}
