package topk

// Threshold appends to dst the indices i, ascending, with |x[i]| >= |t|
// (magnitude bits compared, so a NaN t keeps only NaNs with a larger
// payload, and t = ±0 keeps everything) and returns the extended slice.
func Threshold(dst []uint32, x []float32, t float32) []uint32 {
	tm := mag(t)
	u, b := bitsOf(x), bytesOf(x)
	for i := 0; i < len(u); {
		i = skip(b, i, tm)
		end := min(i+block, len(u)) // past the tail once skip is done
		for ; i < end; i++ {
			if u[i]&^signBit >= tm {
				dst = append(dst, uint32(i))
			}
		}
	}
	return dst
}
