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
// The package links the standard stages (package stages: lossless,
// sparse, lossy): a program that wraps a connection decodes every frame a
// sender's policy may choose without importing them (gradient stages come
// with package gradient, which package session links). A policy that is a
// codec.PeerObserver learns the peer's stages before the first frame and chooses
// only among recipes the peer decodes; one that is a codec.Cutter says
// where the frames of the stream end (the autotuner cuts where the kind of
// data changes). A stream starts with small frames (16 KiB, each next at
// most twice as large, up to the chunk size), so that the first bytes
// arrive before the link's rate is known.
//
// Tensors: WriteTensor and ReadTensor carry tensor frames on the same
// stream, with the same hello, negotiation, feedback and policy (a large
// tensor is cut into chunks, and ReadTensor joins them into one buffer).
// Profile rules and gradient updates with error feedback are the layer
// above (package session): it writes frames encoded elsewhere
// (WriteEncoded, after Decodable) and learns what the peer received
// through an AckObserver (WithAckObserver), the feedback's frame count and
// the end-ack.
//
// Guarantees:
//   - What Write accepted arrives in order, exactly, or the peer's Read
//     reports an error: a stream cut short or damaged is an error (an
//     unexpected EOF, a checksum or corruption error), never silently
//     shortened. Data of the frames that arrived whole is delivered first.
//   - A frame is only coded with stages the peer announced; a recipe with
//     another (a fixed one, or a policy's that is not a PeerObserver) is
//     stored raw, and a frame encoded elsewhere that would need one is not
//     sent (WriteEncoded returns an error wrapping codec.ErrUnsupported).
//   - The peer's frames are read with limits (WithLimits; codec's defaults
//     otherwise), so a hostile peer cannot make the reader allocate more
//     than a frame's limit, and at most WithReadAhead decoded frames wait
//     for Read.
//   - Close releases every goroutine the Conn started; blocked Reads and
//     Writes return net.ErrClosed.
//   - Over loopback TCP (both ends on this host) raw frames carry no
//     payload CRC: the memory copy cannot damage them, and the header CRC
//     still guards everything the reader allocates by.
package transport
