// Package session carries tensors and gradient updates over a
// transport.Conn.
//
// transport.Conn is a compressing byte stream (frames, hello and stage
// negotiation, feedback, deadlines, half-close), as crypto/tls is an
// encrypting one. A Session is the layer above it: Wrap makes the Conn
// and keeps it (its methods, Read, Write, ReadTensor, deadlines and Close
// among them, are the Session's), and WriteTensor applies a profile's
// rules (WithProfile): a rule that requires lossless coding tags the
// tensor lossless, and a rule that lists gradient compressors makes it a
// gradient update with error feedback, at the density a DensityChooser
// policy picks (WithUpdateDeadline), compressed on the device the profile
// names where the program links one (gradient.UseDevice; package gpu is
// the GPU's). The residuals live in a gradient.Outbox per peer, kept
// across connections by the peer's hello ID (WithPeers). The wire is the
// Conn's: a Session talks to a peer wrapped with transport.Wrap as well.
//
// Guarantees:
//   - A gradient update's error feedback is committed only when the peer
//     reported the update's frame received (its feedback's frame count, or
//     its acknowledgement of the end frame: transport.AckObserver). When
//     the stream fails or is closed first, the update is aborted: its
//     residual keeps all of it and the next update of the tensor carries
//     it. Nothing of an update is lost; at worst it arrives twice.
//   - An update is only sent with stages the peer announced: one that
//     would need another is not sent (WriteTensor returns an error
//     wrapping codec.ErrUnsupported; the update stays in the residual).
//
// The package links the gradient stages (package gradient) besides the
// standard ones transport links, so a Session decodes every update a peer
// sends.
package session
