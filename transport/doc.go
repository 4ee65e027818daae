// Package transport carries tensorpress frames over connections.
//
// Wrap turns a net.Conn into one that compresses what is written to it and
// decompresses what it reads, speaking format v1 (docs/FORMAT.md) on the
// wire: both ends open with a hello listing the stages they decode, data
// travels in bytes frames coded with the recipe a policy chooses per frame
// (WithPolicy; an autotuner, or WithRecipe for a fixed one), and the
// receiver sends feedback control frames back (decode speed, how far the
// application has read) for the sender's policy.
//
// The package links the standard stages (lossless, sparse, lossy,
// gradient): a program that wraps a connection decodes every frame a
// sender's policy may choose without importing them. A policy that is a
// codec.PeerObserver learns the peer's stages before the first frame and chooses
// only among recipes the peer decodes; one that is a codec.Cutter says
// where the frames of the stream end (the autotuner cuts where the kind of
// data changes). A stream starts with small frames (16 KiB, each next at
// most twice as large, up to the chunk size), so that the first bytes
// arrive before the link's rate is known.
//
// Tensor sessions: WriteTensor and ReadTensor carry tensors on the same
// stream, with the same hello, negotiation, feedback and policy (a large
// tensor is cut into chunks, and ReadTensor joins them into one buffer).
// With WithProfile each tensor's rule applies: lossless rules tag it, and
// rules that list gradient compressors make it a gradient update with
// error feedback, at the density a DensityChooser policy picks
// (WithUpdateDeadline). The residuals live in a gradient.Outbox per peer,
// kept across connections by the peer's hello ID (WithPeers).
//
// Guarantees:
//   - What Write accepted arrives in order, exactly, or the peer's Read
//     reports an error: a stream cut short or damaged is an error (an
//     unexpected EOF, a checksum or corruption error), never silently
//     shortened. Data of the frames that arrived whole is delivered first.
//   - A frame is only coded with stages the peer announced; a recipe with
//     another (a fixed one, or a policy's that is not a PeerObserver) is
//     stored raw, and a gradient update that would need one is not sent
//     (WriteTensor returns an error wrapping codec.ErrUnsupported; the
//     update stays in the residual).
//   - The peer's frames are read with limits (WithLimits; codec's defaults
//     otherwise), so a hostile peer cannot make the reader allocate more
//     than a frame's limit, and at most WithReadAhead decoded frames wait
//     for Read.
//   - A gradient update's error feedback is committed only when the peer
//     reported the update's frame received (its feedback's frame count, or
//     its acknowledgement of the end frame). When the stream fails or is
//     closed first, the update is aborted: its residual keeps all of it and
//     the next update of the tensor carries it. Nothing of an update is
//     lost; at worst it arrives twice.
//   - Close releases every goroutine the Conn started; blocked Reads and
//     Writes return net.ErrClosed.
//   - Over loopback TCP (both ends on this host) raw frames carry no
//     payload CRC: the memory copy cannot damage them, and the header CRC
//     still guards everything the reader allocates by.
package transport
