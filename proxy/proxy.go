package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	// Importing rpc registers the "tensorpress" compressor, so that a
	// proxy's server reads what the other side's proxy sends on the hop
	// with grpc.UseCompressor(rpc.Name).
	"github.com/tensorpress/tensorpress/rpc"
)

// DefaultMaxMessageSize is the largest message a proxy forwards unless
// WithMaxMessageSize says otherwise: 64 MiB, each way, on both of its legs.
const DefaultMaxMessageSize = 64 << 20

// ErrBadOption is returned by ServerOptions, NewLocal and NewRemote for
// an option value out of range.
var ErrBadOption = errors.New("proxy: bad option")

// bidi describes every outgoing call: both sides may stream, so that one
// path forwards unary, server-streaming, client-streaming and
// bidirectional calls alike.
var bidi = grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// Forward returns a stream handler, for grpc.UnknownServiceHandler, that
// forwards every call it receives to conn under the same full method name.
//
// Each outgoing call carries the incoming request metadata (less the
// headers of the hop itself, see the package comment), the incoming
// call's deadline and cancellation (its context is the parent), and its
// content-subtype. Its call options are the pass-through codec,
// DefaultMaxMessageSize for sending and receiving, then opts: a later
// grpc.MaxCallRecvMsgSize or grpc.MaxCallSendMsgSize in opts wins, and
// grpc.UseCompressor(rpc.Name) compresses the hop.
//
// The server that runs the handler must use the pass-through codec too:
// use ServerOptions, which does both.
func Forward(conn grpc.ClientConnInterface, opts ...grpc.CallOption) grpc.StreamHandler {
	return newForwarder(conn, new(Stats), opts).handle
}

func newForwarder(conn grpc.ClientConnInterface, st *Stats, opts []grpc.CallOption) *forwarder {
	base := []grpc.CallOption{
		grpc.ForceCodecV2(passThrough{}),
		grpc.MaxCallRecvMsgSize(DefaultMaxMessageSize),
		grpc.MaxCallSendMsgSize(DefaultMaxMessageSize),
	}
	return &forwarder{conn: conn, opts: append(base, opts...), stats: st, maxMsg: DefaultMaxMessageSize}
}

// Option configures ServerOptions.
type Option func(*config) error

type config struct {
	maxMsg  int
	calls   []grpc.CallOption
	stats   *Stats
	out, in *Hop
	budget  *budget.Budget
	limits  Limits

	// A Side's alone (side.go).
	bandwidth            float64
	tcp                  bool
	drain                time.Duration
	log                  *slog.Logger
	listenAuth, dialAuth auth.Config
}

func defaultConfig() config {
	return config{
		maxMsg: DefaultMaxMessageSize,
		limits: DefaultLimits(),
		drain:  DefaultDrain,
		log:    slog.New(slog.DiscardHandler),
	}
}

// WithOutgoingHop codes the messages the proxy sends to the next one with
// h, whose connections its outgoing calls go on (the local side: its
// dialer wraps each connection with Hop.Conn). Every call is marked as a
// call between proxies; the next one must run the same version.
func WithOutgoingHop(h *Hop) Option {
	return func(c *config) error {
		if h == nil {
			return fmt.Errorf("%w: nil Hop", ErrBadOption)
		}
		c.out = h
		return nil
	}
}

// WithIncomingHop codes the responses to marked calls with h, whose
// connections the calls come in on (the remote side: its listener is
// Hop.Listener). Without it, a proxy still decodes marked calls, and codes
// their responses by the kind of data, with no measurement.
func WithIncomingHop(h *Hop) Option {
	return func(c *config) error {
		if h == nil {
			return fmt.Errorf("%w: nil Hop", ErrBadOption)
		}
		c.in = h
		return nil
	}
}

// Stats counts what a proxy forwarded: calls, and the messages and their
// bytes (as the application sent them, before any compression on the hop)
// from the clients to the servers (up) and back (down). metrics.Proxy
// exports it for Prometheus.
//
// HopOut and HopIn count the bytes a connection toward the other proxy
// writes and reads (Hop.Conn counts them, as does a connection passed
// through); the ratio of the application's bytes to them is what the
// hop saved.
//
// With a Hop, it also counts what the Hop's coding did: bytes into and
// out of each recipe (per frame; "none" for messages sent as they are),
// the time spent coding and decoding, the autotuners' switches, decoding
// errors by kind, and the hop's bytes per peer address (at most maxPeers
// apart, the rest as "other").
type Stats struct {
	HopOut, HopIn            atomic.Int64
	Calls, Active            atomic.Int64
	MessagesUp, MessagesDown atomic.Int64
	BytesUp, BytesDown       atomic.Int64
	EncodeNanos, DecodeNanos atomic.Int64
	Switches                 atomic.Int64

	mu      sync.Mutex
	recipes map[string]*recipeCount
	peers   map[string]*peerCount
	errs    map[string]*atomic.Int64
	hops    []*Hop
}

func (s *Stats) recipe(name string) *recipeCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recipes[name]
	if r == nil {
		if s.recipes == nil {
			s.recipes = map[string]*recipeCount{}
		}
		r = new(recipeCount)
		s.recipes[name] = r
	}
	return r
}

// peer returns the counts of the hop's peer at a (by IP address).
func (s *Stats) peer(a net.Addr) (*peerCount, string) {
	key := a.String()
	if host, _, err := net.SplitHostPort(key); err == nil {
		key = host
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peers == nil {
		s.peers = map[string]*peerCount{}
	}
	p := s.peers[key]
	if p == nil {
		if len(s.peers) >= maxPeers {
			key = "other"
			if p = s.peers[key]; p != nil {
				return p, key
			}
		}
		p = new(peerCount)
		s.peers[key] = p
	}
	return p, key
}

func (s *Stats) decodeError(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[string]*atomic.Int64{}
	}
	c := s.errs[kind]
	if c == nil {
		c = new(atomic.Int64)
		s.errs[kind] = c
	}
	c.Add(1)
}

func (s *Stats) addHop(h *Hop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.hops {
		if x == h {
			return
		}
	}
	s.hops = append(s.hops, h)
}

// WithStats counts the proxy's forwarding in s.
func WithStats(s *Stats) Option {
	return func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil Stats", ErrBadOption)
		}
		c.stats = s
		return nil
	}
}

// WithMaxMessageSize sets the largest message, in bytes, the proxy
// forwards in either direction (DefaultMaxMessageSize by default): its
// server's receive and send limits and those of its outgoing calls. gRPC
// applies the receive limit to a message after decompression too. A larger
// message fails the call with codes.ResourceExhausted. The application's
// own limits still apply at its ends: a client or server left at gRPC's
// default receives at most 4 MiB, whatever the proxies allow.
func WithMaxMessageSize(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > math.MaxInt32 {
			return fmt.Errorf("%w: message size %d, want 1 to %d", ErrBadOption, n, math.MaxInt32)
		}
		c.maxMsg = n
		return nil
	}
}

// WithCallOptions adds opts to every outgoing call, after the proxy's own
// (see Forward): on the side that sends over the slow link,
// grpc.UseCompressor(rpc.Name).
func WithCallOptions(opts ...grpc.CallOption) Option {
	return func(c *config) error {
		c.calls = append(c.calls, opts...)
		return nil
	}
}

// ServerOptions returns the options of a proxy's gRPC server: every call
// to a service the server does not register is forwarded to conn (Forward)
// with the pass-through codec, within the message size limit, the memory
// budget (WithBudget; by default one of budget.DefaultBytes for this
// server) and the limits of a gRPC connection (WithLimits: the handshake
// timeout, the idle timeout, the concurrent streams).
//
// Services registered on the same server are served there, not forwarded;
// their messages go through the registered proto codec.
func ServerOptions(conn grpc.ClientConnInterface, opts ...Option) ([]grpc.ServerOption, error) {
	c := defaultConfig()
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.budget == nil {
		c.budget = budget.New(budget.DefaultBytes)
	}
	return c.serverOptions(conn)
}

func (c config) serverOptions(conn grpc.ClientConnInterface) ([]grpc.ServerOption, error) {
	// The legs on the hop carry each message with its mark byte, and
	// coded messages with their frames' headers: their limits leave room
	// for that (hopLimit); decode holds the application's message to
	// maxMsg.
	callMax, serverMax := c.maxMsg, c.maxMsg
	if c.out != nil {
		callMax = hopLimit(c.maxMsg)
	}
	if c.in != nil {
		serverMax = hopLimit(c.maxMsg)
	}
	calls := append([]grpc.CallOption{
		grpc.MaxCallRecvMsgSize(callMax),
		grpc.MaxCallSendMsgSize(callMax),
	}, c.calls...)
	st := c.stats
	if st == nil {
		st = new(Stats)
	}
	f := newForwarder(conn, st, calls)
	f.maxMsg, f.outHop, f.inHop, f.budget = c.maxMsg, c.out, c.in, c.budget
	for _, h := range []*Hop{c.out, c.in} {
		if h != nil {
			h.setStats(st)
			st.addHop(h)
		}
	}
	return append([]grpc.ServerOption{
		grpc.UnknownServiceHandler(f.handle),
		grpc.ForceServerCodecV2(passThrough{}),
		grpc.MaxRecvMsgSize(serverMax),
		grpc.MaxSendMsgSize(serverMax),
	}, c.limits.serverOptions()...), nil
}

type forwarder struct {
	conn          grpc.ClientConnInterface
	opts          []grpc.CallOption
	stats         *Stats
	maxMsg        int
	outHop, inHop *Hop
	budget        *budget.Budget
}

// leg is what one direction of a call does to each message besides
// forwarding it: decode it from the hop (dec), code it for the hop (enc),
// time its arrival on the hop (recv), charge what it holds to budget.
type leg struct {
	dec, enc *hopConn
	decode   bool
	encode   bool
	recv     *hopConn
	max      int
	budget   *budget.Budget
}

// apply returns the message to send for m (a reference of its own), the
// application's bytes in it, and the charges to release once it is sent:
// m as received, then its decoded size as its frames claim (checked
// against the limit before decoding) or what coding it holds.
func (l leg) apply(m mem.BufferSlice, st *Stats) (mem.BufferSlice, int, charges, error) {
	if l.recv != nil {
		l.recv.meter.message(m.Len() + 5) // gRPC's message header
	}
	var ch charges
	if err := ch.add(l.budget, int64(m.Len())); err != nil {
		return nil, 0, nil, err
	}
	if l.decode {
		out, err := l.decodeCharged(m, st, &ch)
		if err != nil {
			ch.release()
			return nil, 0, nil, err
		}
		m = out
	} else {
		m.Ref()
	}
	n := m.Len()
	if !l.encode {
		return m, n, ch, nil
	}
	err := ch.add(l.budget, int64(n))
	var e mem.BufferSlice
	if err == nil {
		e, err = encode(l.enc, m, st)
	}
	m.Free()
	if err != nil {
		ch.release()
		return nil, 0, nil, err
	}
	return e, n, ch, nil
}

// decodeCharged charges the decoded size m's frames claim, refusing a
// claim over the limit, then decodes m.
func (l leg) decodeCharged(m mem.BufferSlice, st *Stats, ch *charges) (mem.BufferSlice, error) {
	n, err := claim(m, st)
	if err != nil {
		return nil, err
	}
	if n > int64(l.max) {
		st.decodeError("limit")
		return nil, status.Errorf(codes.ResourceExhausted, "proxy: a message from the other proxy claims %d bytes, more than %d", n, l.max)
	}
	if err := ch.add(l.budget, n); err != nil {
		return nil, err
	}
	return decode(l.dec, m, l.max, st)
}

// claim returns the bytes a message of a marked call holds once decoded:
// what its frames' checked headers claim (codec.DecodedSize), or its
// length less the mark byte for a message sent as it is. A message
// without a valid mark claims 0: decode refuses it.
func claim(m mem.BufferSlice, st *Stats) (int64, error) {
	r := m.Reader()
	mark, err := r.ReadByte()
	if err != nil || mark != markFrames {
		return int64(max(m.Len()-1, 0)), nil
	}
	n, err := codec.DecodedSize(r, rpc.DefaultLimits()) // the limits decode applies
	if err != nil {
		st.decodeError(errKind(err))
		return 0, status.Errorf(codes.Internal, "proxy: a message from the other proxy: %v", err)
	}
	return n, nil
}

// charges are what one message holds of the budget.
type charges []*budget.Charge

// add charges n bytes to b, or fails with ResourceExhausted (releasing
// what c held) when they do not fit.
func (c *charges) add(b *budget.Budget, n int64) error {
	ch, err := b.TryCharge(n)
	if err != nil {
		c.release()
		return status.Errorf(codes.ResourceExhausted, "proxy: %v", err)
	}
	*c = append(*c, ch)
	return nil
}

func (c charges) release() {
	for _, ch := range c {
		ch.Release()
	}
}

// handle forwards one call. The client's messages go out from a goroutine
// (up) while this one brings the server's back (down), one message in
// flight each way: a message is received, sent on, then freed before the
// next is received, so a slow reader at either end slows the writer at the
// other through gRPC's flow control, and nothing piles up in the proxy.
//
// When the server ends the call while the client is still sending, the
// handler returns at once (that ends the client's stream); up then returns
// as soon as its pending RecvMsg fails, which gRPC makes it do when it
// closes the stream.
func (f *forwarder) handle(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "proxy: no method name in the stream")
	}
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	f.stats.Calls.Add(1)
	f.stats.Active.Add(1)
	defer f.stats.Active.Add(-1)

	c, err := f.newCall(ctx)
	if err != nil {
		return err
	}
	out, err := f.conn.NewStream(metadata.NewOutgoingContext(ctx, c.omd), &bidi, method, c.opts...)
	if err != nil {
		return err
	}
	f.outgoingLegs(&c, out)
	return f.pump(in, out, c, cancel)
}

// call is what handle knows of one call before and after its outgoing
// stream opens.
type call struct {
	md, omd     metadata.MD // incoming, outgoing
	opts        []grpc.CallOption
	marked      bool     // a call between proxies (remote side)
	hc          *hopConn // the hop's connection of this call
	upLeg, down leg
	header      metadata.MD // added to the server's header
}

// newCall reads the incoming call's metadata: its content-subtype, the
// metadata to forward, and on the remote side the hop's mark and the rate
// the local proxy measured.
func (f *forwarder) newCall(ctx context.Context) (call, error) {
	var c call
	c.md, _ = metadata.FromIncomingContext(ctx)
	c.opts = f.opts
	if sub := contentSubtype(c.md); sub != "" {
		c.opts = append([]grpc.CallOption{grpc.CallContentSubtype(sub)}, c.opts...)
	}
	c.omd = forwardable(c.md)
	c.upLeg, c.down = leg{max: f.maxMsg, budget: f.budget}, leg{max: f.maxMsg, budget: f.budget}
	v := c.md.Get(hopKey)
	c.marked = len(v) > 0
	if c.marked && v[0] != hopVersion {
		f.stats.decodeError("version")
		return c, status.Errorf(codes.Unimplemented, "proxy: the other proxy codes the hop in format %q, this one in %q: run the same tensorpress release on both sides", v[0], hopVersion)
	}
	switch {
	case f.outHop != nil:
		// Local side: mark the call and tell the remote proxy the rate
		// its responses arrive at.
		rate := ""
		if !f.outHop.announcedPerCall() {
			rate = f.outHop.rateFor(f.outHop.lastConn())
		}
		c.omd = hopMD(c.omd, rate, true)
	case c.marked:
		// Remote side: the messages come marked, and go back so.
		if p, ok := peer.FromContext(ctx); ok && f.inHop != nil {
			c.hc = f.inHop.callConn(p)
		}
		c.hc.setRate(c.md.Get(rateKey))
		c.upLeg.decode, c.upLeg.dec, c.upLeg.recv = true, c.hc, c.hc
		c.down.encode, c.down.enc = true, c.hc
		c.header = hopMD(metadata.MD{}, f.inHop.rateForConn(c.hc), false)
	}
	return c, nil
}

// outgoingLegs sets the local side's legs on the hop's connection that
// the outgoing call took.
func (f *forwarder) outgoingLegs(c *call, out grpc.ClientStream) {
	if f.outHop == nil {
		return
	}
	if p, ok := peer.FromContext(out.Context()); ok {
		c.hc = f.outHop.callConn(p)
	}
	c.upLeg.encode, c.upLeg.enc = true, c.hc
	c.down.decode, c.down.dec, c.down.recv = true, c.hc, c.hc
}

// pump forwards the client's messages (up, on a goroutine) and the
// server's (down) until the call ends, and returns its status.
func (f *forwarder) pump(in grpc.ServerStream, out grpc.ClientStream, c call, cancel func()) error {
	upErr := make(chan error, 1)
	go func() {
		err := up(in, out, f.stats, c.upLeg)
		upErr <- err // before cancel: down must find it when it sees the cancellation
		if err != nil {
			cancel()
		}
	}()
	err := down(in, out, f.stats, c.down, c.header, f.outHop != nil, c.hc)
	if cerr := in.Context().Err(); cerr != nil && err != nil {
		// The incoming call's deadline passed (or the client left): say
		// so, whichever way it reached the outgoing call first (the up
		// goroutine cancels it when the incoming stream ends).
		return status.FromContextError(cerr).Err()
	}
	select {
	case e := <-upErr:
		if e != nil {
			return e // the client's side failed first (a message over the limit)
		}
	default:
	}
	return err
}

// up forwards the client's messages to the server, then half-closes. A
// send that fails with io.EOF (the server ended the call) ends it quietly:
// the server's status comes to down.
func up(in grpc.ServerStream, out grpc.ClientStream, st *Stats, l leg) error {
	for {
		var m mem.BufferSlice
		if err := in.RecvMsg(&m); err != nil {
			if err == io.EOF {
				out.CloseSend()
				return nil
			}
			return err
		}
		n, err := pass(m, l, st, out.SendMsg)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err // a message the hop refused, or over the outgoing call's limit
		}
		st.MessagesUp.Add(1)
		st.BytesUp.Add(int64(n))
	}
}

// pass applies l to m (freeing it), sends the result, releases its
// charges and returns the application's bytes of the message.
func pass(m mem.BufferSlice, l leg, st *Stats, send func(any) error) (int, error) {
	s, n, ch, err := l.apply(m, st)
	m.Free()
	if err != nil {
		return 0, err
	}
	err = send(&s)
	s.Free()
	ch.release()
	return n, err
}

// down forwards the server's header, messages and trailer to the client
// and returns the server's status.
//
// header is added to the server's header (the remote side's rate); a
// local side (rates) takes the rate the remote proxy measured from it.
func down(in grpc.ServerStream, out grpc.ClientStream, st *Stats, l leg, header metadata.MD, rates bool, hc *hopConn) error {
	// Header waits for the server's header; it is nil when the server
	// answered with a status only (the status comes to RecvMsg).
	if md, _ := out.Header(); md != nil {
		if rates {
			hc.setRate(md.Get(rateKey))
		}
		if err := in.SendHeader(metadata.Join(forwardable(md), header)); err != nil {
			return err
		}
	}
	for {
		var m mem.BufferSlice
		if err := out.RecvMsg(&m); err != nil {
			in.SetTrailer(forwardable(out.Trailer()))
			if err == io.EOF {
				return nil
			}
			return err
		}
		n, err := pass(m, l, st, in.SendMsg)
		if err != nil {
			return err
		}
		st.MessagesDown.Add(1)
		st.BytesDown.Add(int64(n))
	}
}

// forwardable returns the metadata of md that the proxy passes on: all but
// the pseudo-headers (":authority"), the HTTP headers gRPC sets per
// connection ("content-type", "user-agent", "te", "host") and the
// "grpc-" keys, which gRPC reserves and each leg sets for itself
// ("grpc-accept-encoding", "grpc-status-details-bin", ...).
func forwardable(md metadata.MD) metadata.MD {
	out := make(metadata.MD, len(md))
	for k, v := range md {
		if hopHeader(k) {
			continue
		}
		out[k] = v
	}
	return out
}

func hopHeader(k string) bool {
	switch k {
	case "content-type", "user-agent", "te", "host", "connection":
		return true
	}
	return strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == hopKey || k == rateKey || k == auth.TokenKey
}

// contentSubtype returns the subtype of the incoming call's content-type
// ("json" of "application/grpc+json"), "" for plain "application/grpc".
func contentSubtype(md metadata.MD) string {
	ct := md.Get("content-type")
	if len(ct) == 0 {
		return ""
	}
	rest, ok := strings.CutPrefix(ct[0], "application/grpc")
	if !ok || rest == "" || (rest[0] != '+' && rest[0] != ';') {
		return ""
	}
	return rest[1:]
}
