package topk

import "slices"

// Threshold appends to dst the indices i, ascending, with |x[i]| >= |t|
// (magnitude bits compared, so a NaN t keeps only NaNs with a larger
// payload, and t = ±0 keeps everything) and returns the extended slice.
func Threshold(dst []uint32, x []float32, t float32) []uint32 {
	tm := mag(t)
	u, b := bitsOf(x), bytesOf(x)
	i := 0
	for {
		i = skip(b, i, tm)
		if i+block > len(u) {
			break
		}
		// Branch-free within the block, which may be dense: write every
		// index into dst's spare capacity, keep those that pass.
		if cap(dst)-len(dst) < block {
			dst = slices.Grow(dst, block)
		}
		n := len(dst)
		out := dst[n : n+block]
		j := 0
		for q, v := range u[i : i+block : i+block] {
			out[j] = uint32(i + q)
			j += int(ge(v&^signBit, tm))
		}
		dst = dst[:n+j]
		i += block
	}
	for ; i < len(u); i++ {
		if u[i]&^signBit >= tm {
			dst = append(dst, uint32(i))
		}
	}
	return dst
}
