package topk

import (
	"math"
	"math/bits"
)

// SampleOptions tunes Sampled. The zero value gives the defaults of the
// DGC reference implementation (DGCCompressor in
// github.com/synxlin/deep-gradient-compression, dgc/compression.py).
type SampleOptions struct {
	// SampleRatio is the fraction of x that is sampled to estimate the
	// threshold. As in the reference it is clamped to [0.01, 1]; so 0
	// (or NaN) means 0.01, and 1 means Exact.
	SampleRatio float64
	// UpperBound and LowerBound bound the accepted selection count as
	// multiples of k. 0 means the defaults 1.3 and 0.8. The threshold is
	// multiplied by LowerBound when fewer than LowerBound*k magnitudes
	// pass it, and (only with NoResample) by UpperBound when more than
	// UpperBound*k pass.
	UpperBound, LowerBound float64
	// MaxIters caps the threshold adaptations: 0 means the default 10, a
	// negative value means none.
	MaxIters int
	// Start picks the first sample: x[Start % stride], then every
	// stride-th element. The reference draws it uniformly at random per
	// call; pass a random or per-step value to do the same. Equal
	// options give equal results.
	Start uint64
	// NoResample is the reference's resample=False: when more than
	// UpperBound*k magnitudes pass, raise the threshold and select again
	// instead of taking the exact top k of those that passed.
	NoResample bool
}

// Adapt is one step of DGC's threshold adaptation (the reference's loop):
// count magnitudes of the data passed thr, k were wanted. Fewer than
// lower*k: the threshold is multiplied by lower; more than upper*k, with
// noResample: by upper; otherwise thr stands (again is false). The
// caller counts again at next while again is true, at most its number of
// iterations. The CPU (Sampled) and the GPU kernels' driver (package gpu)
// both step through it, so their thresholds are the same bits.
func Adapt(thr float32, count, k int, upper, lower float64, noResample bool) (next float32, again bool) {
	switch {
	case count > k:
		if !noResample || float64(count) <= upper*float64(k) {
			return thr, false
		}
		return thr * float32(upper), true
	case float64(count) < lower*float64(k):
		return thr * float32(lower), true
	}
	return thr, false
}

// Resolved returns the options in effect: the sample ratio clamped to
// [0.01, 1] (0 or NaN: 0.01), the bounds (0: 1.3 and 0.8) and the
// adaptations (0: 10, negative: none).
func (opt SampleOptions) Resolved() (ratio, upper, lower float64, iters int) {
	ratio = min(opt.SampleRatio, 1)
	if !(ratio >= 0.01) {
		ratio = 0.01
	}
	upper, lower = opt.UpperBound, opt.LowerBound
	if upper == 0 {
		upper = 1.3
	}
	if lower == 0 {
		lower = 0.8
	}
	iters = opt.MaxIters
	if iters == 0 {
		iters = 10
	}
	return ratio, upper, lower, iters
}

// Sampled sizes below which Sampled is Exact: a sample of 1% of them is
// too small to place the threshold well, and Exact is cheap there (see
// BenchmarkSampledSmall).
const sampledMinN = 1 << 15

// Sampled is DGC's sparsification: it estimates the magnitude threshold
// of the top k from a strided sample, adapts it, and appends to dst the
// indices, ascending, of at most k magnitudes at or above the final
// threshold. It returns the extended slice.
//
// It follows DGCCompressor._sparsify and .initialize of the reference
// implementation (github.com/synxlin/deep-gradient-compression,
// dgc/compression.py) with its defaults sample_ratio=0.01,
// strided_sample=True, compress_upper_bound=1.3, compress_lower_bound=0.8,
// max_adaptation_iters=10, resample=True. With n = len(x) and r =
// SampleRatio clamped to [0.01, 1]:
//   - k >= n selects everything (the reference does not compress);
//   - m = max(ceil(n*r), ceil(2n/k)); if n <= ceil(2n/k) (k <= 2, about)
//     or r == 1 the reference takes every element as a sample, which is
//     Exact(dst, x, k, s);
//   - stride = ceil(n/m/32)*32 + 1, lowered by 8 until n/stride >= m
//     (the stride stays odd: it does not alias with power-of-two row
//     lengths); the samples are x[Start%stride], x[Start%stride+stride],
//     ... to the end, and num = n/stride;
//   - the threshold t is the ceil(num*k/n)-th largest sampled magnitude;
//   - then up to MaxIters times: if more than k magnitudes reach t: stop
//     if at most UpperBound*k do, else stop (NoResample: multiply t by
//     UpperBound and select again); if fewer than LowerBound*k reach t,
//     multiply t by LowerBound (in float32, as torch does) and select
//     again; otherwise stop;
//   - if more than k magnitudes reach the final t, the k largest of them
//     are kept, which is Exact(dst, x, k, s).
//
// Where it departs from the reference: (1) when between k and
// UpperBound*k magnitudes pass (or more than k after MaxIters with
// NoResample), the reference keeps the first k of them by index
// (indices[:num_selects]); Sampled keeps the k largest, so its result
// never has more than k indices and never drops a larger magnitude for a
// smaller one. (2) The reference draws the sample start at random per
// call; here it is Start % stride, so results are reproducible. (3) Below
// 32768 elements Sampled is Exact (the reference samples any n > ceil(2n/k);
// on such small inputs its sample has a handful of elements and Exact
// costs under 40 µs). (4) NaN magnitudes are the largest (torch.ge drops
// NaNs), and ties at the cut go to the lowest index (torch.topk leaves
// them unspecified); indices are ascending (topk's sorted=False order).
//
// So the result has at most k indices, every one of them with magnitude
// >= the final t; on well-behaved data between LowerBound*k and k.
// Selections after the first one count among the candidates kept by the
// lowest threshold scanned so far and rescan x only when t drops below it.
func Sampled(dst []uint32, x []float32, k int, s *Scratch, opt SampleOptions) []uint32 {
	n := len(x)
	k = min(k, n)
	if s == nil {
		s = new(Scratch)
	}
	s.thresh = 0
	if k <= 0 {
		return dst
	}
	if k == n {
		return appendAll(dst, n)
	}
	ratio, upper, lower, iters := opt.Resolved()

	stride, _, ks := SampleParams(n, k, ratio)
	if stride == 0 {
		return Exact(dst, x, k, s)
	}
	N := uint64(n)
	start := opt.Start % stride
	smp := grow(s.tmp, int((N-start+stride-1)/stride))
	s.tmp = smp
	gather(smp, bitsOf(x), int(start), int(stride))
	t0, _ := kthLargest(smp, 31, int(ks), s.hist())
	thr := math.Float32frombits(t0)

	// Candidates: the indices and magnitudes at or above low, the lowest
	// threshold scanned so far, unless more than capN passed it
	// (complete == false); count is how many pass thr.
	capN := n
	if c := 2*max(float64(k), upper*float64(k)) + 1024; c < float64(n) {
		capN = int(c)
	}
	s.idx = grow(s.idx, capN)
	s.key = grow(s.key, capN)
	low := t0
	count := scanGE(x, low, s.idx, s.key)
	stored, complete := min(count, capN), count <= capN
	for range iters {
		next, again := Adapt(thr, count, k, upper, lower, opt.NoResample)
		if !again {
			break
		}
		thr = next
		if tm := mag(thr); complete && tm >= low {
			count = countGE(s.key[:stored], tm)
		} else {
			low = tm
			count = scanGE(x, low, s.idx, s.key)
			stored, complete = min(count, capN), count <= capN
		}
	}
	s.thresh = thr

	// count <= k implies complete: count <= capN, and a count taken from
	// the candidates is only taken when they are complete.
	tm := mag(thr)
	if count > k && !complete {
		// The k largest of those at or above thr are the k largest of x.
		return Exact(dst, x, k, s)
	}
	idx, key := s.idx[:stored], s.key[:stored]
	if tm > low {
		j := 0
		for q, m := range key {
			if m >= tm {
				idx[j], key[j] = idx[q], m
				j++
			}
		}
		idx, key = idx[:j], key[:j]
	}
	if len(idx) > k {
		idx = selectTop(idx, key, k, 31, s)
	}
	return append(dst, idx...)
}

// gather sets smp[j] to the magnitude of u[start+j*stride]. Four loads
// per iteration keep more cache misses in flight.
func gather(smp, u []uint32, start, stride int) {
	j, i := 0, start
	for ; j+4 <= len(smp); j, i = j+4, i+4*stride {
		a, b, c, d := u[i], u[i+stride], u[i+2*stride], u[i+3*stride]
		s := smp[j : j+4 : j+4]
		s[0], s[1], s[2], s[3] = a&^signBit, b&^signBit, c&^signBit, d&^signBit
	}
	for ; j < len(smp); j, i = j+1, i+stride {
		smp[j] = u[i] &^ signBit
	}
}

// SampleParams returns the reference's sample stride, sample count and
// sample top-k for n elements, k selected and sample ratio ratio (in
// [0.01, 1]), or stride 0 where Sampled is Exact. The GPU path (package
// gpu) samples with them as Sampled does.
func SampleParams(n, k int, ratio float64) (stride, num, ks uint64) {
	N, K := uint64(n), uint64(k)
	cpr := (2*N + K - 1) / K // ceil(2 / compress_ratio)
	if N <= cpr || ratio >= 1 || n < sampledMinN {
		return 0, 0, 0
	}
	m := max(uint64(math.Ceil(float64(n)*ratio)), cpr)
	stride = (N+32*m-1)/(32*m)*32 + 1
	for N/stride < m {
		stride -= 8 // ends at 1 at the latest: stride is 1 mod 8
	}
	num = N / stride
	hi, lo := bits.Mul64(num, K)
	lo, carry := bits.Add64(lo, N-1, 0)
	ks, _ = bits.Div64(hi+carry, lo, N) // ceil(num*k/n) <= num
	return stride, num, ks
}

// scanGE stores in idx/key the first len(idx) indices and magnitudes of x
// at or above t and returns how many there are in all.
func scanGE(x []float32, t uint32, idx, key []uint32) int {
	key = key[:len(idx)]
	u, b := bitsOf(x), bytesOf(x)
	c := 0
	for i := 0; i < len(u); {
		i = skip(b, i, t)
		end := min(i+block, len(u)) // past the tail once skip is done
		for ; i < end; i++ {
			if m := u[i] &^ signBit; m >= t {
				if c < len(idx) {
					idx[c] = uint32(i)
					key[c] = m
				}
				c++
			}
		}
	}
	return c
}

// countGE returns how many keys are at least t.
func countGE(key []uint32, t uint32) int {
	c := 0
	for _, m := range key {
		c += int(ge(m, t))
	}
	return c
}
