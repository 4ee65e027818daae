// Package lossy holds the quantizers: stages whose decoded values
// approximate the input within a stated worst-case error. Each stage's
// comment (and its Doc, shown by `codec-bench stages`) gives its exact
// definition, wire layout and error bound; tests assert every bound on
// random data and on the tensors of a model trained by PyTorch
// (testvectors.ModelWeights, ModelGrads).
//
//	fp16              data -> data (float16)   IEEE half, round to nearest even, bit-exact with PyTorch
//	bf16              data -> data (bfloat16)  round to nearest even, bit-exact with PyTorch's tensor path
//	int8(B=4096)      data -> q (int8), scale  blockwise absmax (bitsandbytes), bit-exact with the reference script
//	nf4(B=64)         data -> q (4-bit), scale QLoRA's NF4 codebook, blockwise absmax
//	fp4(B=64)         data -> q (4-bit), scale bitsandbytes' FP4 codebook, blockwise absmax
//	qsgd(s, B, seed)  data -> q (int8), scale  QSGD: s levels per bucket norm, seeded stochastic rounding
//	sign(B)           data -> q (1 bit), scale sign with the block's mean |x|
//	ternary(B)        data -> q (2 bits), scale {-s, 0, +s} by Ternary Weight Networks' threshold
//
// Inputs are float32 or float64 segments; decoding gives back the input's
// element type. Block quantizers name their outputs after their input
// ("q" and "scale" on data, "val.q" and "val.scale" on val), so they
// compose: "nf4(64) | scale:int8(256)" quantizes the block scales again,
// as QLoRA's double quantization does, and "int8(4096) | q:huff0" entropy
// codes the codes. Block sizes are recipe parameters; the stages implement
// codec.BlockSizer, so a Writer cuts chunks on block edges and a chunked
// tensor decodes exactly as one frame would, for one level of blocks. A
// nested quantizer (scale:int8(256) after nf4(64)) aligns chunks to the
// largest block of the recipe, not to the 64x256 elements one of its scale
// blocks covers, so small chunks give different (still in-bound) values
// than one frame. QSGD derives its random
// numbers from the seed and each element's index in the tensor, so its
// result does not depend on chunking either.
//
// fp16, bf16 and the block kernels have AVX2 (and F16C) assembly on amd64
// with pure-Go twins giving identical results (build tag noasm selects the
// twins; tests compare both with the scalar reference of internal/float16
// and with each stage's reference loop).
//
// The block quantizers refuse NaN and infinite input (and float64 values
// beyond float32's range) with an error wrapping ErrNonFinite that names
// the element; fp16 and bf16 carry them through.
//
// Lossy stages never meet a tensor tagged lossless: codec refuses such a
// recipe with codec.ErrLossy before anything is written. Decoders refuse
// malformed parameters and parts with codec.ErrCorrupt and never panic.
// Ops are immutable and safe for concurrent use.
package lossy
