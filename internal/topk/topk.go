package topk

import (
	"math"
	"slices"
)

// signBit is the float32 sign bit; magnitudes are the other 31 bits.
const signBit = 1 << 31

// mag returns the magnitude bits of v: the IEEE bits with the sign cleared.
// For non-NaN values they order like |v|; NaNs sort above +Inf.
func mag(v float32) uint32 { return math.Float32bits(v) &^ signBit }

// Branch-free comparisons of two magnitudes (both < 2^31, so the
// differences below never reach the sign bit by wrapping twice).
func gt(a, b uint32) uint32 { return (b - a) >> 31 }       // a > b
func ge(a, b uint32) uint32 { return 1 ^ (a-b)>>31 }       // a >= b
func eq(a, b uint32) uint32 { return ((a ^ b) - 1) >> 31 } // a == b

// hist is a histogram of up to 16 key bits; an index converted to uint16
// needs no bounds check.
type hist = [1 << 16]uint32

// Scratch holds the reusable memory of Exact and Sampled: a histogram and
// candidate buffers. The zero value is ready to use; a Scratch that is
// passed to every call of a loop makes that loop allocation-free once the
// buffers have grown. A Scratch must not be used by two goroutines at
// once. A nil *Scratch is accepted and allocates per call.
type Scratch struct {
	h   *hist
	idx []uint32 // candidate indices
	key []uint32 // candidate magnitudes, parallel to idx
	tmp []uint32 // keys being narrowed by kthLargest

	thresh float32 // Sampled's final threshold (for tests)
}

func (s *Scratch) hist() *hist {
	if s.h == nil {
		s.h = new(hist)
	}
	return s.h
}

// grow returns b with length n, reusing its capacity when it suffices.
func grow(b []uint32, n int) []uint32 {
	if cap(b) < n {
		return make([]uint32, n, n+n/8)
	}
	return b[:n]
}

// Cutoffs of Exact, measured on N(0,1) data with k = n/100 and n/2
// (BenchmarkExactSmall, BenchmarkExactDensity).
const (
	exactSortMax    = 24   // n <= this: sort a copy of the magnitudes
	exactNarrowMax  = 1024 // n < this: 8-bit first histogram (the exponent), else 11-bit
	exactCandAlways = 8192 // n <= this: resolve the cut in memory even if dense
	exactDenseDiv   = 16   // more than n/this candidates: collect them branch-free
)

// Exact appends to dst the indices of the k largest magnitudes of x, in
// ascending order, and returns the extended slice. k is clamped to
// [0, len(x)]. Equal magnitudes at the cut are taken lowest index first.
// dst is grown at most once.
func Exact(dst []uint32, x []float32, k int, s *Scratch) []uint32 {
	n := len(x)
	k = min(k, n)
	if k <= 0 {
		return dst
	}
	if k == n {
		return appendAll(dst, n)
	}
	if s == nil {
		s = new(Scratch)
	}
	if n <= exactSortMax {
		keys := grow(s.tmp, n)
		s.tmp = keys
		for i, v := range x {
			keys[i] = mag(v)
		}
		t, r := kthLargest(keys, 31, k, nil)
		return emitBranchy(slices.Grow(dst, k), x, t, r)
	}

	// Pass 1: histogram of the top bits of every magnitude.
	bits := uint(11)
	if n < exactNarrowMax {
		bits = 8
	}
	sh := 31 - bits
	h := s.hist()
	nb := 1 << bits
	u := bitsOf(x)
	histTop(h, u, bits)
	// The bucket b holding the k-th largest: above elements lie in higher
	// buckets, need more come from b.
	above, b := 0, nb-1
	for ; ; b-- {
		c := int(h[b])
		if above+c >= k {
			break
		}
		above += c
	}
	need := k - above
	members := int(h[b])

	if above+members <= n/8 || n <= exactCandAlways {
		return exactCandidates(dst, x, s, uint32(b), sh, above, need, members)
	}

	// Dense cut (large k or many equal magnitudes): narrow the boundary
	// bucket down to one magnitude with more histogram passes over x, then
	// emit branch-free. No candidate memory.
	t := uint32(b)
	dmax := uint(11)
	if n >= 1<<17 {
		dmax = 16
	}
	for lo := sh; lo > 0; {
		d := min(lo, dmax)
		nlo := lo - d
		clear(h[:1<<d])
		base, span, mask := t<<lo, uint32(1)<<lo, uint32(1)<<d-1
		for _, v := range u {
			// A branch: usually few elements are in the bucket, or
			// (equal magnitudes) nearly all.
			if key := v&^signBit - base; key < span {
				h[uint16(key>>(nlo&31))]++
			}
		}
		c := mask
		for ; ; c-- {
			if int(h[c]) >= need {
				break
			}
			need -= int(h[c])
		}
		t = t<<d | c
		lo = nlo
	}
	return emitDense(dst, x, k, t, need)
}

// histTop sets h[:1<<bits] to the histogram of the top bits (8 or 11) of
// the magnitudes u&^signBit. The loops are specialized: constant shifts
// and fixed-size tables need no bounds checks, and for larger inputs four
// interleaved tables keep runs of equal buckets from waiting on each
// other's increments: 2x at n=100352 over one table with a variable
// shift. (A 16-bit first histogram, tried for n >= 2^17, was no faster
// even at 25M and slower below: its table does not fit L1.)
func histTop(h *hist, u []uint32, bits uint) {
	switch {
	case bits == 11 && len(u) >= hist4Min:
		hist11x4(h, u)
	case bits == 11:
		const nb = 1 << 11
		h0 := (*[nb]uint32)(h[:nb])
		clear(h0[:])
		for _, v := range u {
			h0[v>>20&(nb-1)]++
		}
	default:
		const nb = 1 << 8
		h0 := (*[nb]uint32)(h[:nb])
		clear(h0[:])
		for _, v := range u {
			h0[uint8(v>>23)]++
		}
	}
}

// hist4Min is the size from which hist11x4's setup pays.
const hist4Min = 8192

func hist11x4(h *hist, u []uint32) {
	// The tables are spaced 64 entries more than their size, so that the
	// same bucket of two tables is not 4 KiB apart.
	const nb, st = 1 << 11, 1<<11 + 64
	clear(h[:4*st])
	h0 := (*[nb]uint32)(h[0:nb])
	h1 := (*[nb]uint32)(h[st : st+nb])
	h2 := (*[nb]uint32)(h[2*st : 2*st+nb])
	h3 := (*[nb]uint32)(h[3*st : 3*st+nb])
	i := 0
	for ; i+4 <= len(u); i += 4 {
		q := u[i : i+4 : i+4]
		h0[q[0]>>20&(nb-1)]++
		h1[q[1]>>20&(nb-1)]++
		h2[q[2]>>20&(nb-1)]++
		h3[q[3]>>20&(nb-1)]++
	}
	for ; i < len(u); i++ {
		h0[u[i]>>20&(nb-1)]++
	}
	for j := range h0 {
		h0[j] += h1[j] + h2[j] + h3[j]
	}
}

// exactCandidates finishes Exact when the cut is sparse: one more pass over
// x sends the indices above bucket b straight to dst and the members of b
// (with their magnitudes) to s; the members are resolved in memory and
// merged in.
func exactCandidates(dst []uint32, x []float32, s *Scratch, b uint32, sh uint, above, need, members int) []uint32 {
	base := len(dst)
	k := above + need
	dst = slices.Grow(dst, k)[:base+k]
	out := dst[base:]
	s.idx = grow(s.idx, members+1) // +1: the branch-free loop writes one past
	s.key = grow(s.key, members+1)
	bi, bk := s.idx, s.key
	floor := b << sh
	next := (b + 1) << sh // 2^31 at most: fits
	u, raw := bitsOf(x), bytesOf(x)
	a, c := 0, 0
	if (above+members)*exactDenseDiv > len(u) {
		// Many candidates: write every element of a block that skip
		// stops at, advancing past it only where it belongs. out[above]
		// exists (need >= 1), so does bi[members].
		for i := 0; i < len(u); {
			i = skip(raw, i, floor)
			end := min(i+block, len(u))
			for ; i < end; i++ {
				m := u[i] &^ signBit
				hi := ge(m, next)
				out[a] = uint32(i)
				a += int(hi)
				bi[c], bk[c] = uint32(i), m
				c += int(ge(m, floor) &^ hi)
			}
		}
	} else {
		for i := 0; i < len(u); {
			i = skip(raw, i, floor)
			end := min(i+block, len(u)) // past the tail once skip is done
			for ; i < end; i++ {
				if m := u[i] &^ signBit; m >= floor {
					if m >= next {
						out[a] = uint32(i)
						a++
					} else {
						bi[c] = uint32(i)
						bk[c] = m
						c++
					}
				}
			}
		}
	}
	bi, bk = bi[:members], bk[:members]
	chosen := bi
	if need < members {
		chosen = selectTop(bi, bk, need, sh, s)
	}
	// Merge the ascending runs out[:above] and chosen, from the back.
	i, j := above-1, need-1
	for w := k - 1; j >= 0; w-- {
		if i >= 0 && out[i] > chosen[j] {
			out[w] = out[i]
			i--
		} else {
			out[w] = chosen[j]
			j--
		}
	}
	return dst
}

// selectTop keeps, in place and in order, the k entries of idx with the
// largest keys (ties: earliest first) and returns idx[:k]. The keys agree
// above bit `bits`; key is left intact.
func selectTop(idx, key []uint32, k int, bits uint, s *Scratch) []uint32 {
	s.tmp = grow(s.tmp, len(key))
	copy(s.tmp, key)
	t, r := kthLargest(s.tmp, bits, k, s.hist())
	key = key[:len(idx)]
	j := 0
	for q, m := range key {
		if m > t || m == t && r > 0 {
			if m == t {
				r--
			}
			idx[j] = idx[q]
			j++
		}
	}
	return idx[:j]
}

// kthLargest returns the k-th largest value t of keys (1 <= k <= len(keys))
// and r, how many keys equal to t belong to the k largest. keys must agree
// above bit `bits`; they are reordered and overwritten. h may be nil when
// len(keys) is small.
func kthLargest(keys []uint32, bits uint, k int, h *hist) (t uint32, r int) {
	for {
		n := len(keys)
		if n == k {
			t = keys[0]
			for _, m := range keys {
				t = min(t, m)
			}
			for _, m := range keys {
				r += int(eq(m, t))
			}
			return t, r
		}
		if bits == 0 {
			return keys[0], k
		}
		if n <= 64 || h == nil {
			slices.Sort(keys)
			top := keys[n-k:]
			t = top[0]
			for r < len(top) && top[r] == t {
				r++
			}
			return t, r
		}
		d := min(bits, 11)
		lo := bits - d
		mask := uint32(1)<<d - 1
		clear(h[:1<<d])
		for _, m := range keys {
			h[uint16(m>>lo&mask)]++
		}
		c := mask
		for ; ; c-- {
			if int(h[c]) >= k {
				break
			}
			k -= int(h[c])
		}
		j := 0
		for _, m := range keys {
			if m>>lo&mask == c {
				keys[j] = m
				j++
			}
		}
		keys = keys[:j]
		bits = lo
	}
}

// emitBranchy appends the indices i with mag(x[i]) > t, and the first r
// with mag(x[i]) == t.
func emitBranchy(dst []uint32, x []float32, t uint32, r int) []uint32 {
	for i, v := range x {
		m := mag(v)
		if m >= t {
			if m == t {
				if r == 0 {
					continue
				}
				r--
			}
			dst = append(dst, uint32(i))
		}
	}
	return dst
}

// emitDense is emitBranchy for a dense cut with exactly k results: every
// index is written and the write position advances only when it is kept.
func emitDense(dst []uint32, x []float32, k int, t uint32, r int) []uint32 {
	base := len(dst)
	dst = slices.Grow(dst, k+1)
	out := dst[base : base+k+1]
	u := bitsOf(x)
	j, i := uint32(0), 0
	// Until the r-th tie, keep m >= t; after it, m > t.
	for ; i < len(u) && r > 0; i++ {
		m := u[i] &^ signBit
		out[j] = uint32(i)
		j += ge(m, t)
		r -= int(eq(m, t))
	}
	for ; i < len(u); i++ {
		out[j] = uint32(i)
		j += gt(u[i]&^signBit, t)
	}
	return dst[:base+k]
}

func appendAll(dst []uint32, n int) []uint32 {
	base := len(dst)
	dst = slices.Grow(dst, n)[:base+n]
	for i := range dst[base:] {
		dst[base+i] = uint32(i)
	}
	return dst
}
