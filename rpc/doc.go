// Package rpc plugs tensorpress into gRPC (google.golang.org/grpc).
//
// Importing it registers two compressors (encoding.RegisterCompressor):
//
//   - "tensorpress" (Name): each message becomes format-v1 bytes frames
//     (docs/FORMAT.md) of at most a chunk (1 MiB by default), each coded by
//     the recipe its policy chooses: by default ByClass, the recipe for the
//     kind of data in the frame (plane coding for float runs inside opaque
//     protobuf bytes, the sparse layout for mostly-zero data, zstd for the
//     rest); NewCompressor with WithPolicy takes an autotune.Tuner that
//     measures the live link. Only peers that import this package read it,
//     and only those that know every stage the sender's policy may choose:
//     ByClass chooses the width stage (ID 37, 2026-11-27) for mostly-zero
//     floats in a message, which earlier releases refuse.
//   - "zstd" (ZstdName), standard RFC 8878 frames, registered only when no
//     other package registered the name first: it interoperates both ways
//     with other grpc-go zstd compressors, such as
//     github.com/mostynb/go-grpc-compression's.
//
// It also registers TensorCodec (encoding.RegisterCodecV2, name
// TensorCodecName), whose messages are tensors or batches of tensors as
// frames, without protobuf: raw chunks reference the tensor's bytes, small
// tensors share frames, and decoding joins chunks into each tensor's
// buffer.
//
// A client picks a compressor per call (grpc.UseCompressor(rpc.Name)) or per
// connection (grpc.WithDefaultCallOptions); a server answers with the
// compressor of the request.
//
// Guarantees:
//   - Memory per message is bounded on both sides: the sender holds at
//     most one chunk (tensorpress) or one window (zstd), never the whole
//     message; the receiver decodes one frame at a time.
//   - A message that claims more than the receiver's limits is refused
//     before anything of that size is allocated: tensorpress frames by
//     their checked header (DefaultLimits: 8 MiB a frame), zstd frames by
//     their declared content size and window (Zstd.MaxDecoded,
//     Zstd.MaxWindow). gRPC's receive limit (4 MiB by default, raise it
//     with grpc.MaxCallRecvMsgSize) bounds the decoded message as a whole.
//   - Bad input is an error (gRPC turns it into a status), never a panic.
//   - Encoders and decoders are pooled and returned when gRPC closes them;
//     none starts goroutines, so nothing leaks when one is dropped.
//
// The package links the standard stateless stages (package stages), so a
// receiver decodes whatever recipe a sender's policy chose; gradient
// stages decode where the program links package gradient. It links no
// YAML and no linear algebra: ByClass lives in package sniff.
package rpc
