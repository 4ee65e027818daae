// Package codec is the core of tensorpress: the tensor model, the stage
// interfaces and their registry, recipes, the self-describing frame format
// (version 1, specified in docs/FORMAT.md) and the streaming Writer and
// Reader built on it.
//
// # Model
//
// A Tensor is a name, a DType, a shape, Tags (among them the Lossless flag)
// and little-endian data. Encoding turns the tensor's bytes into segments
// through a Recipe: an ordered list of `slot:stage(params)` steps such as
//
//	shuffle4 | plane3:huff0 | plane0..2:raw
//
// Stages (Stage, with configured instances Op) are registered under
// permanent numeric IDs; the frame records which steps took effect, on which
// segment, with which parameters and lengths, so a decoder needs no
// configuration and the recipe may change at any frame.
//
// # Guarantees
//
//   - Frames are self-describing and checked: a CRC-32C over the header is
//     verified before anything that depends on the input is allocated; the
//     payload carries a CRC-32C unless the writer was told to omit it on
//     frames stored raw (CRCOmitRaw).
//   - Decoders are bounded by Limits with safe defaults; a frame that claims
//     more than the limits allow is refused with ErrLimit before allocation.
//     Decoded sizes come from the shape, never from a length field alone.
//   - Bad input gives an error wrapping ErrCorrupt, ErrChecksum, ErrLimit or
//     ErrUnsupported (io.ErrUnexpectedEOF when cut short), never a panic.
//     Input that is not tensorpress data at all (a zstd or gzip file) gives
//     ErrNotFrame, a kind of ErrCorrupt.
//   - A Reader checks the order of frames, whichever method reads them: the
//     chunks of a tensor come in order, without gaps or overlaps and with
//     only control frames between them; a stream that ends inside a tensor
//     is an error (ErrCorrupt at an end frame, io.ErrUnexpectedEOF at the
//     end of the input).
//   - A segment that a coder does not shrink is stored as it is, so a frame
//     never grows by more than its header.
//   - A lossy recipe on a tensor tagged lossless is refused with ErrLossy
//     before anything of that tensor is written, whatever a Policy returns.
//
// # Concurrency and ownership
//
// Encoder, Decoder, Recipe and registered Ops are safe for concurrent use.
// Writer and Reader are not (one goroutine each), but the Writer runs an
// ordered encode pipeline of its own (WithEncoderConcurrency). Tensors returned by
// a Reader or Decoder own their data, aligned to 8 bytes so that View works.
// Encoder.Append* functions append to the caller's buffer; MaxEncodedLen and
// MaxTensorLen bound what they append for lossless recipes, so a caller can
// size the buffer once. Per-segment statistics are made only when asked for
// (AppendTensorsStats, AppendBytesStats).
//
// # Options
//
// One option type per direction, as in klauspost/compress/zstd: EOption for
// NewEncoder and NewWriter, DOption for NewDecoder and NewReader. Options are
// checked where they are applied, and a constructor fails on a bad value;
// NewEncoder and NewDecoder refuse options that only the streaming type
// uses (a chunk size, a policy, a concurrency) instead of ignoring them.
// Every default is set in one place (options.go) and listed there. The
// zero Decoder is ready to use with DefaultLimits.
//
// The host must be little-endian; tensor data is little-endian everywhere.
package codec
