// Package stages links the standard stateless stages into a program:
// lossless (shuffle, bytedelta, zstd, s2, xz, huff0), sparse (the sparse
// layouts and index codecs) and lossy (fp16, bf16, the block quantizers,
// QSGD, sign, ternary). Import it for its side effect where a program must
// decode whatever recipe a peer's policy chooses, or load a profile that
// names any of them:
//
//	import _ "github.com/tensorpress/tensorpress/stages"
//
// transport, rpc and profile import it. The stateful gradient stages
// (topk, dgc, powersgd, bloom, polyfit, ...) register with package
// gradient, which a program that sends or receives gradient updates links
// anyway (session does); they are left out here so that a program that
// only moves bytes or tensors does not link gradient and its linear
// algebra (gonum).
package stages

import (
	_ "github.com/tensorpress/tensorpress/lossless" // registers the lossless stages
	_ "github.com/tensorpress/tensorpress/lossy"    // registers the lossy stages
	_ "github.com/tensorpress/tensorpress/sparse"   // registers the sparse stages
)
