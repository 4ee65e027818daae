// Package natsfan fans a model hub's versions out beyond one machine on
// NATS JetStream: an origin publishes each version once into an object
// store bucket, encoded (tensorpress frames, lossless, recipes by data
// class; the bucket's own compression off), and relay hubs on other
// machines, attached to the same NATS cluster (or to a leaf node of it),
// serve their own clients from it. A version crosses the origin's link
// once, whatever the number of relays and clients.
//
// A version is one object, named by its number, laid out as nats.go's
// jetstream.ObjectStore lays objects out (so that its Get, Watch and List,
// and other clients of it, read them), but written by the Publisher
// itself rather than by ObjectStore.Put: each chunk is published from a
// buffer of its own, kept until the chunk's JetStream acknowledgement; a
// chunk that gets none is published again from the same bytes under the
// same message ID (the stream keeps one copy); once every chunk is
// acknowledged, the acknowledgements' sequences are checked to be in
// chunk order and the stream to hold exactly the chunks put, and only
// then is the description (the object's size, chunk count and SHA-256)
// published. An attempt that fails purges its chunks, so a version is
// visible whole or not at all and no description ever points at chunks
// other than the ones hashed. A relay reads an object the same way, with
// an ordered consumer of its chunks of its own rather than through
// ObjectStore.Get (whose reader, once its context ends between two
// chunks, waits for the next one until the get's deadline): a get ends
// when its context does, or when no chunk came for StallTimeout. It
// checks the object's SHA-256 (the object store's) and every frame's
// checksum as it reads.
//
// Publisher (origin): Publish encodes the tensors it is given;
// PublishFrames takes frames encoded already (a hub's, say, so that a
// version is encoded once for NATS and the origin's clients). Both retry, with backoff, until the version is
// in the bucket or its context ends; an attempt during which the
// connection to NATS dropped is abandoned at once and made again once
// connected (a NATS node that dies mid-publish costs a retry, not a
// version). Relay: Run watches the bucket and lists it at each update and
// every ReconcileEvery, so that a missed update delays a version and
// never loses it; a version that does not come whole, or does not decode,
// is tried again; NATS being down is logged and waited out.
//
// A relay does not hold a version in memory: it spools the object, as it
// reads it, into a safetensors file of its spool directory (WithSpoolDir;
// a temporary one by default), one frame decoded at a time (charged to
// WithBudget's budget), and serves the version from that file
// (hub.PublishSafetensors) once the object's digest has matched; the
// file is removed when the hub no longer keeps the version. Tensor tags
// do not cross a relay (safetensors has none).
//
// StartServer runs a NATS server with JetStream inside the process, so
// that a single origin needs no separate service: relays attach to its
// listen address. A hub with no NATS configured uses none.
package natsfan
