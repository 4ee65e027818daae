// Package gradient compresses gradients and model updates with error
// feedback, the way distributed and federated training sends them.
//
// A Compressor turns a compensated gradient into the first op of a frame's
// recipe: a selection (TopK, RandK, Threshold, DGC), a low-rank
// factorisation (PowerSGD) or a quantizer (Quantize: EF-signSGD, QSGD,
// int8). A Sender, one per peer, keeps the error-feedback Memory: per
// tensor name a residual that does not depend on the compressor (it
// survives a switch), and the compressors' private buffers (DGC's
// momentum, PowerSGD's q). Each update is compensated (residual plus
// gradient; DGC adds momentum correction), compressed, framed through the
// compressor's op and a tail recipe (positions delta-coded and bit-packed,
// values shuffled and Huffman-coded by default), and the residual becomes
// exactly what the receiver will not see: the compensated gradient minus
// the frame decoded. Staged changes become the state on Commit (the frames
// were delivered) or are rolled back on Abort, which keeps the whole
// compensated gradient as residual: nothing accepted is lost. A Memory
// serialises with MarshalBinary, so a reconnecting peer keeps its
// residuals.
//
// TopK with Model (topk(r,model=on)) keeps the model's k largest
// compensated values rather than each tensor's: Outbox.Plan ranks a whole
// update's tensors together and each Append then takes its tensor's share
// (hub.Upload plans by itself). Under non-IID federated data the output
// layer and the biases, small tensors with large updates, get more of the
// budget; codec-bench fl measures what that does to accuracy.
//
// An Outbox may compress on a device (its residuals kept there, the
// frames the same bytes): device backends register by import, as
// database/sql drivers do (RegisterDevice; package gpu registers "cuda"),
// and UseDevice puts an Outbox on the one a profile's device names ("auto":
// the first that opens). The package itself links no device code.
//
// The frames are ordinary tensorpress frames: any Decoder decodes them to
// dense tensors. A Receiver (codec.Decoder.DecodeAdd) adds them straight
// into an accumulator instead, scattering the k values of a sparse update
// or adding p·qᵀ of a low-rank one, so an aggregator sums many peers
// without a dense copy of each. A frame with the wrong shape for its
// accumulator, positions out of order or out of range, or factors of the
// wrong size is an error (codec.ErrCorrupt), and the accumulator is left
// unchanged. Updates come from peers: a Receiver's limits (ReceiverLimits)
// bound the bytes a frame decodes through the stages of some MB/s
// (floatcm, floatrank) at 1 MiB, where a plain Decoder allows 64 MiB, and
// it refuses an update that would add a NaN or an infinity
// (codec.ErrNonFinite), which would make the sum NaN for good.
//
// The stages (permanent IDs 96-127; wire layouts in docs/FORMAT.md):
//
//	topk(r) topk(k=N)   exact top-k by magnitude -> idx, val
//	thresh(t)           |x| >= t -> idx, val
//	dgc(r)              DGC's sampled threshold, at most ceil(r*n) -> idx, val
//	randk(r, seed)      seeded positions -> val only
//	powersgd(r, seed)   rank-r factors of the shape[0]×rest matrix -> p, q
//	bloom(r)            top-k positions in a Bloom filter (DeepReduce) -> bloom, val
//	polyfit(d)          values as piecewise polynomials of their sorted curve -> perm, coef
//
// Recipes may use them directly (codec-bench run --chains 'topk(0.01) |
// idx:delta,bitpack | val:shuffle | *:huff0'); then there is no error
// feedback, and each chunk selects on its own.
//
// Senders are not safe for concurrent use; Receivers and Compressors are.
package gradient

import (
	_ "github.com/tensorpress/tensorpress/lossless" // the default tails use shuffle and huff0
	_ "github.com/tensorpress/tensorpress/sparse"   // and delta, bitpack
)
