// Package natsfan fans a model hub's versions out beyond one machine on
// NATS JetStream: an origin publishes each version once into an object
// store bucket, encoded (tensorpress frames, lossless, recipes by data
// class; the bucket's own compression off), and relay hubs on other
// machines, attached to the same NATS cluster (or to a leaf node of it),
// serve their own clients from it. A version crosses the origin's link
// once, whatever the number of relays and clients.
//
// A version is one object, named by its number. The object store writes
// an object's description only after its last chunk, and purges the
// chunks of a put that failed, so a version is visible whole or not at
// all; a relay checks the object's SHA-256 (the object store's) and every
// frame's checksum as it decodes.
//
// Publisher (origin): Publish retries, with backoff, until the version is
// in the bucket or its context ends; an attempt during which the
// connection to NATS dropped is abandoned at once and made again once
// connected (a NATS node that dies mid-publish costs a retry, not a
// version). Relay: Run watches the bucket and lists it at each update and
// every ReconcileEvery, so that a missed update delays a version and
// never loses it; a version that does not come whole, or does not decode,
// is tried again; NATS being down is logged and waited out.
//
// StartServer runs a NATS server with JetStream inside the process, so
// that a single origin needs no separate service: relays attach to its
// listen address. A hub with no NATS configured uses none.
//
// A relay holds the versions it serves in memory (hub.Publish).
package natsfan
