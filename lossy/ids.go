package lossy

import "github.com/tensorpress/tensorpress/codec"

// Permanent wire IDs of the lossy stages (range 64-95). An ID never
// changes meaning.
const (
	FP16ID    codec.StageID = 64 // float16, round to nearest even
	BF16ID    codec.StageID = 65 // bfloat16, round to nearest even
	Int8ID    codec.StageID = 66 // blockwise absmax int8
	FP4ID     codec.StageID = 67 // blockwise 4-bit float (bitsandbytes FP4 codebook)
	NF4ID     codec.StageID = 68 // blockwise 4-bit normal float (QLoRA NF4 codebook)
	QSGDID    codec.StageID = 69 // QSGD: s levels, stochastic rounding, seeded
	SignID    codec.StageID = 70 // sign with a per-block scale (1 bit)
	TernaryID codec.StageID = 71 // ternary {-s, 0, +s} per block
)
