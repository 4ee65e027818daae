// Package cabi is the logic behind libtensorpress, the C ABI of tensorpress
// (cmd/libtensorpress holds only the cgo exports). It is pure Go, with no
// cgo, so that it builds and is tested with CGO_ENABLED=0 and the race
// detector.
//
// # Calling convention
//
// Every entry point takes raw memory as unsafe.Pointer plus a length, and
// returns a code (OK or one of the E* codes) and, when the code is not OK,
// a message. Entry points recover from panics: a panic becomes EINTERNAL
// with its value in the message, never a crash of the host process.
//
// # Ownership
//
//   - Memory passed in (tensors, frames, output buffers, accumulators) is the
//     caller's. It is read or written during the call only and never
//     retained: names, shapes and tags are copied, data is viewed in place
//     (Tensor.view makes a codec.Tensor whose Data aliases the caller's
//     memory, with no copy).
//   - Output goes straight into the caller's buffer. When it does not fit,
//     the result is kept in a spill handle that the caller reads with Take
//     (which frees it) or drops with Close.
//   - Objects that live across calls (profiles, Senders, Receivers, spilled
//     outputs) are held in a handle table under uint64 IDs; the table, not
//     finalizers, owns them until Close.
//
// # Concurrency
//
// Every entry point is safe for concurrent use. A Sender or Receiver handle
// serializes the calls made on it; different handles run in parallel.
// Decoding runs on the caller's goroutine only, so that a panic in it is
// recovered.
//
// # Hub clients
//
// HubDial makes a client of a tensorpress hub (the address parsed by
// hub.ParseAddr, TLS and the token from auth.Config). HubFetch writes each
// tensor into memory the caller allocates for it through a callback, as
// its chunks arrive from hub.FetchChunks: one copy, from the decoded
// chunk into the caller's memory, and every tensor checked against the
// hub's digest by package hub. HubUpload sends updates through a Sender's
// Outbox with hub.Upload, which commits each one when the hub
// acknowledges it; with a time (within_ms) each update's density is
// chosen by an autotune.Tuner per connection, whose link is the uplink the
// connection's uploads measure (bytes over time, less the round trip of
// its Versions calls). Results are JSON, with the gRPC wire bytes of the call
// (a stats handler counts them per call). Every call takes a timeout, and
// HubCancel cancels a hub's calls in flight from another thread.
//
// # Limits
//
// DecodeInfo reads frame headers only: every header's CRC and the decoder
// Limits are checked before anything whose size depends on the input is
// allocated, so a frame claiming a terabyte is refused with ELIMIT while
// allocating almost nothing. DecodeInto writes the data into the caller's
// buffers, whose sizes DecodeInfo gave.
package cabi
