// Package topk holds the magnitude selection kernels of the sparsifying
// gradient compressors: exact top-k (TopK), a fixed threshold (Threshold)
// and DGC's sampled threshold (Sampled).
//
// # Magnitudes
//
// The magnitude of x[i] is its IEEE bit pattern with the sign cleared,
// math.Float32bits(x[i]) &^ (1<<31), compared as an unsigned integer. For
// non-NaN values this orders exactly like |x[i]|: -0 and +0 are equal,
// subnormals order below normals, ±Inf are the largest numbers. Every NaN
// is larger still (NaNs order among themselves by payload), so a NaN
// counts as a large gradient and is selected first rather than ignored.
//
// # Guarantees
//
// All functions append element indices to dst in strictly ascending order
// and return the extended slice; what dst held before is kept. len(x) may
// be up to 2^32-1. Results are deterministic: they depend only on the
// arguments (for Sampled including SampleOptions.Start), never on dst's
// or the Scratch's earlier contents.
//
//   - Exact returns exactly min(max(k, 0), len(x)) indices: the k largest
//     magnitudes, equal magnitudes at the cut taken lowest index first. It
//     equals sorting the indices by (magnitude descending, index
//     ascending), taking k and sorting those.
//   - Threshold returns every index with magnitude >= the magnitude of t.
//   - Sampled returns at most k indices, all with magnitude >= its final
//     threshold; if more than k magnitudes reach that threshold the result
//     is Exact's. On data such as N(0,1) with the default options it
//     typically returns between 0.8k and k indices. See Sampled for the reference
//     implementation it follows and where it departs from it.
//
// # Memory
//
// Threshold allocates only through dst. Exact and Sampled take a *Scratch
// (zero value ready; nil allocates per call) that keeps a 256 KiB
// histogram and candidate buffers: for Exact 12 bytes per member of the
// histogram bucket at the cut (at most max(len(x)/8, 8192) of them; for
// 25M N(0,1) and k = 1% about 160000, 2 MB); for Sampled 4 bytes per sample
// (len(x)/100) and 8 per candidate (at most 2*max(k, UpperBound*k) +
// 1024). With a reused Scratch and a dst of sufficient capacity, calls do
// not allocate. A Scratch is not safe for concurrent use; everything else
// is.
//
// # Speed
//
// All kernels read x with plain loads of its bits and skip blocks of 16
// elements that hold no candidate with a branch-free 64-bit test (two
// magnitudes per word), so a sparse selection runs near memory speed.
// Exact is a radix selection: one histogram pass over the top 11
// magnitude bits (8 below 1024 elements) finds the bucket holding the
// k-th largest; a second pass sends the indices above that bucket to dst
// and the bucket's members to the Scratch, where histograms over the
// lower bits resolve the cut, and the two ascending runs are merged. When
// the cut is dense (more than len(x)/8 candidates) it narrows the bucket
// with one or two more histogram passes over x instead and writes the
// result branch-free. Inputs of at most 24 elements are sorted. Sampled
// costs a strided sample (1% of x), one Threshold-like pass and work
// proportional to the candidates; its adaptations count among the
// candidates of the lowest threshold scanned so far and rescan x only
// when the threshold drops below it.
//
// On the shared 2-core AMD EPYC development machine, 25M N(0,1) float32
// (100 MB), medians of three runs of five (bench_test.go; the runs vary
// with the machine's load): Exact with k = 1% 2.1-3.3 GB/s, Sampled at
// density 0.1% 4.5-9.6 GB/s, Threshold at 0.1% 6-12.6 GB/s, about 0.9x
// copying the same buffer in the same run, against 26-46 MB/s for
// sorting the magnitudes.
package topk
