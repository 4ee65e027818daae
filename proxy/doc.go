// Package proxy is the core of a gRPC sidecar proxy that compresses the
// traffic of an application over a slow link, without any change to the
// application:
//
//	app client ──► local proxy ══ hop: one gRPC connection, tensorpress ══► remote proxy ──► app server
//
// The application's client talks to the local proxy as if it were the
// server. The local proxy forwards each call, under the same full method
// name, over one multiplexed connection (the hop) to the remote proxy,
// which calls the real server. Neither proxy needs the application's
// generated code: messages are opaque bytes, received into gRPC's buffers
// (mem.BufferSlice) and sent on from them without a copy.
//
// # A whole proxy
//
// NewLocal and NewRemote build what `tensorpress proxy` runs, from
// options checked there (ErrBadOption); Serve runs it on a listener until
// its context ends, then drains:
//
//	remote, err := proxy.NewRemote("127.0.0.1:50051", // the application's server
//		proxy.WithListenAuth(auth.Config{CertFile: "remote.pem", KeyFile: "remote-key.pem", CAFile: "ca.pem"}),
//		proxy.WithBudget(budget.New(512<<20)))
//	...
//	err = remote.Serve(ctx, ln) // ln: where the local proxies connect
//
//	local, err := proxy.NewLocal("server-host:7000", // the remote proxy
//		proxy.WithDialAuth(auth.Config{CertFile: "local.pem", KeyFile: "local-key.pem", CAFile: "ca.pem"}))
//	...
//	err = local.Serve(ctx, ln) // ln: where the application's client connects
//
// A Side works in one of three ways:
//
//   - gRPC mode: a gRPC server forwards every call over one connection to
//     the other proxy (ServerOptions, below), the hop coded by a Hop; the
//     hop's flow-control windows are 8 MiB per stream and per connection.
//   - Pass-through: a local side whose remote proxy is on this host (and
//     no bandwidth, TLS or token configured) passes each of the
//     application's connections through as it is after RawMagic; the
//     remote side, reading RawMagic first from a loopback peer, passes the
//     rest on to the server. From any other peer RawMagic closes the
//     connection: the remote proxy is no relay for other hosts.
//   - TCP mode (WithTCP): any byte stream, each connection carried to the
//     remote proxy as tensorpress frames (transport.Wrap), under TLS where
//     configured.
//
// When Serve's context ends, the listener closes, calls and connections
// get the drain (WithDrain, DefaultDrain: 10 s) to finish, and are cut
// after.
//
// # Limits for a port on the internet
//
// Everything a proxy holds for its peers is charged to one memory budget
// (WithBudget; a budget of budget.DefaultBytes, 512 MiB, by default):
// each message as received, the decoded size that a coded message's
// frames claim in their checked headers (codec.DecodedSize) before
// decoding it, and what is coded for the hop, until the message has been
// sent on. A message that does not fit fails its call with
// ResourceExhausted, as does one whose frames claim more than the
// message size limit, before any decoding. gRPC itself receives a message
// whole before the proxy sees it: that memory is bounded by the message
// limit times the concurrent streams, not by the budget.
//
// Limits (WithLimits; DefaultLimits) bound the connections: the handshake
// timeout (10 s: the first bytes, the whole TPRAW/1 marker, TLS and the
// HTTP/2 preface on gRPC listeners; TLS, and the local proxy's hello on
// the remote side in TCP mode), the idle timeout (5 min: a gRPC connection without
// calls gets a GOAWAY; a passed-through or TCP-mode connection that moved
// no byte either way is closed), concurrent streams per connection (256),
// connections in all (4096) and from one IP address (256), over which a
// connection is closed as soon as it is accepted.
//
// # Authentication
//
// WithListenAuth is what a Side's listener requires (package auth): on the
// remote side, mutual TLS (a CA file with the server's certificate) and/or
// a token in every call's metadata (gRPC mode; the token is removed
// before the call goes on). WithDialAuth is what the local side presents
// to the remote proxy. Serve refuses a listener off loopback that
// requires neither, unless the auth.Config says Insecure. TCP mode
// authenticates with mutual TLS only. The local side's listener, for the
// application, has no authentication of its own from the CLI: keep it on
// loopback.
//
// # The forwarding core
//
// ServerOptions alone is the core, for a program that runs its own gRPC
// server. A local proxy:
//
//	hop, err := grpc.NewClient("remote-host:7000", grpc.WithTransportCredentials(creds))
//	...
//	opts, err := proxy.ServerOptions(hop, proxy.WithCallOptions(grpc.UseCompressor(rpc.Name)))
//	...
//	srv := grpc.NewServer(opts...)
//	err = srv.Serve(ln) // where the application's client connects
//
// The remote proxy is the same with a connection to the application's
// server and without the compressor. Importing this package registers the
// "tensorpress" compressor (package rpc), so the remote proxy reads what
// the local one sends, and answers in kind: gRPC compresses a response as
// its request was.
//
// # The hop, coded per connection
//
// A Hop (WithOutgoingHop on the local side, whose dialer wraps its
// connection with Hop.Conn; WithIncomingHop on the remote side, whose
// listener is Hop.Listener) replaces the compressor: the local proxy
// marks each call, and each message of a marked call, both ways, starts
// with a mark byte. On a connection between two machines the message
// follows as tensorpress bytes frames (lossless, bit for bit), whose
// recipe per frame an autotune.Tuner of that connection chooses for the
// link's rate: plane coding for float runs, the sparse layout for mostly
// zeros, zstd, or raw where the link is faster than the coders. The rate
// is measured where the messages arrive (the time a message of 64 KiB or
// more took to come in on the connection's reads) and reported to the
// sender in the metadata of the next call (local to remote) or of the
// response header (remote to local). On loopback the message follows as
// it is, no copy: the proxies then cost their two extra gRPC legs only.
// NewHop with a bandwidth plans with it instead, loopback included.
// Hop.DialOptions on the local side's connection (a Side uses them) let
// each call find the connection it took, and announce that connection's
// rate, however many connections gRPC keeps. Each
// message is decoded whole into gRPC's pooled buffers, within the message
// size limit (ResourceExhausted beyond it); frames are at most 1 MiB.
//
// # What passes through
//
//   - Every shape of call (unary, server streaming, client streaming,
//     bidirectional), all on one path: each call is forwarded as a
//     bidirectional stream, both directions pumped at once; the end of the
//     client's messages half-closes the outgoing call. Messages arrive in
//     order, bit for bit, from 0 bytes up to the limit.
//   - The request metadata, less the keys each leg of a call sets for
//     itself: pseudo-headers (":authority": the server sees the remote
//     proxy's target), "content-type" (its subtype does pass:
//     "application/grpc+json" stays so), "user-agent" (gRPC writes its
//     connection's own, so the server sees the remote proxy's;
//     grpc.WithUserAgent on that connection prefixes it), "te", and every
//     "grpc-" key, which gRPC reserves ("grpc-accept-encoding",
//     "grpc-timeout", ...).
//   - The server's response header, sent on when the server sends it
//     (before its first message, or alone), and its trailer, less the same
//     keys.
//   - The deadline: the incoming call's context is the parent of the
//     outgoing one. gRPC sends the time left, which each receiver adds to
//     its own clock, so the server's deadline is later than the client's
//     by the transit time of the legs, as on any gRPC hop.
//   - Cancellation: a client that cancels, or whose deadline passes, ends
//     the call at the server, whose context is then done.
//   - The status: code, message and details, unchanged. A proxy that
//     cannot reach the next one or the server answers Unavailable.
//   - Flow control: one message in flight per direction per call. A proxy
//     receives a message, sends it on and frees it before it receives the
//     next, so a slow reader at one end slows the writer at the other
//     through gRPC's flow control on each leg, and nothing piles up in a
//     proxy.
//
// # What does not
//
//   - Transport security: each proxy terminates TLS, and the gRPC
//     connection, on each of its sides. The server sees the remote proxy as
//     its peer (peer.FromContext) with its credentials; per-call
//     credentials carried in metadata ("authorization") pass as metadata.
//   - The application's compression: gRPC decompresses each message where
//     it is received. A message the application's client compresses (gzip)
//     is decompressed by the local proxy, crosses the hop with tensorpress
//     and reaches the server uncompressed; the answer is compressed again
//     by the local proxy, as the request was. The local proxy must link
//     the compressors the application uses (import
//     google.golang.org/grpc/encoding/gzip), or gRPC refuses such calls
//     with Unimplemented.
//   - Services registered on a proxy's own server (a health check) are
//     answered there, with the proto codec, not forwarded.
//   - The application's connection settings (retries, load balancing,
//     service config) apply to its own leg only; the hop's are those of
//     the connection given to ServerOptions.
//
// # Message limits
//
//   - A message is at most DefaultMaxMessageSize (64 MiB) each way, unless
//     WithMaxMessageSize says otherwise; gRPC applies the limit after
//     decompression too, and fails a larger message with
//     ResourceExhausted. The application's own limits still apply at its
//     ends: a gRPC client or server left at the default receives at most
//     4 MiB, whatever the proxies allow.
//   - gRPC holds each message whole, so a proxy holds up to two messages
//     per call (one each way), plus what the flow-control windows of its
//     connections hold; the budget bounds what the calls hold together
//     (see "Limits for a port on the internet").
//
// # Concurrency
//
// The handler of Forward and the options of ServerOptions serve any number
// of concurrent calls. Each call uses one goroutine besides its handler's,
// the one that forwards the client's messages; when the server ends a call
// while the client is still sending, the handler returns at once and that
// goroutine ends as soon as gRPC closes the client's stream.
//
// # Metrics
//
// WithStats counts calls and the application's messages and bytes each
// way, the bytes on the hop, and with a Hop the bytes into and out of each
// recipe, the coding and decoding time, the link estimate of each hop
// connection, the autotuners' switches, the decoding errors by kind and
// the hop's bytes per peer address (at most 64, then "other"); Stats.Detail
// reads the named ones at once, and the metrics package's Proxy collector
// exports them all for Prometheus (this package does not import it). A proxy has no cache: each message is
// coded once, for its one receiver.
package proxy
