// Package hub serves published model versions to many peers over gRPC
// (hubpb's Hub service): one RPC fetches many tensors by name, glob or tags,
// pulled chunk by chunk at the pace of the client's reading (credit), each
// chunk encoded once for every client that asks for it (a bounded cache),
// and checked by the client against the version's digests.
//
// A client that holds an earlier version (Request.Base) gets the tensors
// that version also has as lossless deltas against it: the zigzag-coded
// difference of the bits, element by element (docs/FORMAT.md, "Delta
// updates"), a few bytes for a tensor that did not change. The fetch says
// which coding of deltas the client decodes (DeltaCoding): this release's
// clients ask for lenbits (each difference's bit length, Huffman-coded
// given the one before, and the bits below its leading one), with the
// differences of floats in the order of their base element's exponent;
// older ones, which ask for none, get them shuffled and zstd-coded, as do
// clients that ask for the fastest deltas (Request.FastDeltas: those
// decode at over 1 GB/s a core, lenbits at about 250 MB/s). A base
// the hub no longer keeps
// gives full copies, and the trailer BaseTrailer says why.
//
// Lossy coding is the hub's policy's to choose (WithPolicy: an
// autotune.Tuner on a profile, say), once per version and tensor, and
// only where the request does not require lossless and the tensor is not
// tagged lossless. Such a tensor goes through the chosen recipe whole, or,
// against a base, as the arithmetic difference from it (tagged DeltaTag),
// whose error is that of the recipe on the difference, far smaller than
// on the weights. Result.Lossy names those tensors; every other tensor is
// checked against its digest bit for bit. A lossy delta is made against
// the base's shadow, not the base itself: the copy a client holds that
// fetched the versions one after the other as lossy deltas (error
// feedback on the downlink: one version's rounding goes into the next
// version's delta instead of staying in the client's copy). A client
// that holds the first version exactly and follows the versions holds
// each one's shadow bit for bit, within one rounding of a step from the
// version however many versions pass; any other copy keeps its distance
// from the shadow and adds nothing to it. Shadows are made as versions
// are published, for tensors held in memory, and cost a copy of each
// lossy tensor per version kept (Stats.ShadowBytes); a hub started again
// starts the chain again at its first version.
//
// A fetch whose stream breaks (the connection cut, the hub restarted with
// the same version, or drained: GOAWAY, then the stream cut) resumes after
// the last chunk it received, on the same version: chunks are whole frames
// and the plan is the same for the same request, so the tensors assemble
// across streams. A stream that cannot be opened is tried again after a
// pause that doubles (jittered, capped: Request.RetryWait, RetryMaxWait),
// Request.Retries times in a row; Request.Stall ends a fetch that gets no
// chunk for that long (ErrStalled), the context the whole. How soon a hub
// that came back is seen also depends on the connection's own reconnect
// backoff (grpc.WithConnectParams: grpc-go's default waits up to 120 s). A
// client killed in between resumes in a new process with ResumeAfter.
//
// A base the client's copy of which differs from the hub's (or that it
// lacks) is not the hub's error: those tensors end the fetch as a
// *BaseError naming them, every other tensor delivered and checked, for
// the client to fetch them again without a base.
//
// Clients upload updates for a round (Upload): each tensor's update goes
// through the client's gradient.Outbox (error feedback per peer), is added
// by the hub into the round's sum as it is decoded (a sparse or quantized
// frame is not densified), and is committed on the client only when the
// hub acknowledges it; an upload that breaks leaves every update either
// counted or in the client's residual. A named peer (UploadRequest.Peer)
// has one update per tensor counted in a round: a second is refused
// (AlreadyExists), which tells a client started again after a kill which
// of its updates the process before had counted; the same update sent
// again (a retry from the residual of an upload whose acknowledgement was
// lost) is acknowledged again and counted once. An update whose values
// times its weight hold a NaN or an infinity, or whose weight is a NaN,
// an infinity or negative, is refused (InvalidArgument) before any of it
// is added: one NaN would make the round's sum NaN for good. (Finite
// updates whose sum passes float32's range, values near 3.4e38, are not
// caught.) UploadRequest.Densities
// chooses each update's density from the client's measured uplink (an
// autotune.Tuner, for the updates to arrive within Within, each tensor
// its share of it by its elements); OnSend and
// OnCommit let a client keep its own record of what it sent and what was
// counted.
//
// The hub aggregates a federation with RunFedAvg: the newest version of a
// directory is the global model; a round ends at its quorum of updates
// (every tensor) or at its deadline, when CloseRound takes its sum and
// refuses the round's late updates (FailedPrecondition: the client keeps
// them in its residual for a later round); the model steps by the
// server's rate times the weighted mean update, and the result is written
// as the next version (WriteVersionDir: whole before it takes its name)
// and published. Every update a round counts is recorded in a journal in
// the directory before the client is told, so an aggregator killed and
// started again on the directory counts again what its open round had
// acknowledged, once (a torn record at the journal's end, the one the
// process died writing, is cut). The journal is written, not synced: it
// survives the process, not the machine. KeepSums writes each round's sum
// with the peers it counted, for a check against the clients' records
// (codec-bench fed does it).
//
// Models are published from memory (Publish) or served from files without
// being held (PublishSafetensors, PublishNpy), reading each file once for
// its digests (logged at info: the start, then the progress every 2 s).
// A directory of versions (one subdirectory per version, named by its
// number, holding one .safetensors file or .npy files) is read by one set
// of rules, VersionDir (OpenVersion): to publish a version into a Hub, or
// to read its tensors one at a time (the NATS publisher's input). A
// Watcher publishes a directory's newest versions at the start and each
// new one as it appears; a version that cannot be published (corrupt,
// unreadable, still being written) is logged as a warning naming the file
// and why, the others served, and it is tried again at the next poll.
//
// Serving: Serve runs a hub on a listener as `tensorpress hub` does: its
// Limits, its authentication (package auth: mutual TLS, a token; a
// listener off loopback refused without one, unless Insecure), and a drain
// when the context ends (GracefulStop's GOAWAY, which fetches with retries
// resume after; the streams left cut when the drain is over). The hub is
// also an ordinary gRPC service (hubpb.RegisterHubServer on the caller's
// grpc.Server), so TLS (grpc.Creds on the server, transport
// credentials on the client), authentication interceptors and keepalive
// settings are the caller's and pass through untouched. Fetches are long
// streams: give clients a deadline per request (the context), and give the
// server keepalive.ServerParameters Time and Timeout, so that a peer that
// vanished without closing is found (no answer to a ping sent after Time
// without a read, within Timeout; grpc-go raises a Time under 1 s to 1 s)
// and its connection closed, its fetch ended; a peer that is there but
// stopped reading answers the pings (its gRPC transport does) and keeps its
// stream, costing the hub only its credit's worth of chunks meanwhile.
// MaxConnectionIdle closes only connections with no stream open. A
// keepalive.EnforcementPolicy must allow the clients' own pings (MinTime no
// longer than their ClientParameters.Time, which grpc-go keeps at 10 s at
// the least; PermitWithoutStream if they ping with no stream open), or the
// server ends their connections; a client finds a vanished hub by its
// deadline, or by its own keepalive. A fetch's messages stay within gRPC's
// default 4 MiB receive limit at the default chunk size; uploads of large
// tensors need grpc.MaxRecvMsgSize on the server.
//
// A hub on a port open to peers it does not trust: Limits.ServerOptions
// gives the server bounds per connection (DefaultLimits: the handshake
// within 10 s, a connection with no call open closed after 5 min, 32
// calls at once per connection, messages of 32 MiB at most, a ping after
// 30 s of silence answered within 10 s), and WithBudget a memory budget
// (package budget, shared with the rest of the process) that what the hub
// holds for its peers is charged to: an upload message's decoded size as
// its frames' checked headers claim it (codec.DecodedSize), before any of
// it is decoded, refused with ResourceExhausted when it does not fit, or
// claims more than an update's one frame may hold (codec's MaxDecodedSize);
// an update's bytes decoded through the stages of some MB/s (floatcm,
// floatrank: about 0.1 s of a core a MiB, from as little as 3 KB a MiB on
// the wire) bounded by WithUploadLimits (1 MiB by default, refused before
// decoding);
// a round's sums until DropRound; what encoding a chunk holds, and a
// fetch's chunk until the next is sent (a fetch waits for the budget,
// without holding any of it meanwhile, until its context ends). Encoding
// runs on at most GOMAXPROCS chunks at once. Authentication is the
// caller's too: package auth's ServerOptions (mutual TLS, a shared token)
// go beside these. WithLogger logs a line per fetch and per upload at
// info: the peer, the version (the round), the tensors, the chunks and
// bytes, the time taken and the outcome (ok, or the status code).
//
// Metrics: Stats returns the Hub's counters, and the metrics package's
// Hub collector exports them (fetches, chunks and bytes
// sent, encodes and their time, cache hits, bytes before and after coding
// by recipe, chunks and bytes by client host, uploads, refused updates by
// reason, open streams) for Prometheus, read at each scrape. The recipe
// and host labels are bounded (MaxAccounts).
//
// Guarantees:
//   - A client's memory is bounded by its credit (chunks in flight) and
//     the tensors it keeps; the hub's by its budget (WithBudget) and the
//     cache bound; without a budget, by the cache bound plus, per fetch,
//     the chunks in flight.
//   - Chunks are the same for every request that selects the same
//     tensors, so they are encoded once and shared.
//   - Bad requests get a gRPC status: an unknown version or no matching
//     tensor NotFound, a bad pattern or first message InvalidArgument.
//   - Hub and Server are safe for concurrent use.
package hub
