package proxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/loopback"
	"github.com/tensorpress/tensorpress/rpc"
)

// Metadata of a call between two proxies that code the hop (Hop): the
// local proxy marks the call, and each side says how fast the other's
// messages arrive (bytes per second), so that each sender's autotuner
// plans with the rate of its own direction.
const (
	hopKey  = "tensorpress-hop"      // hopVersion: every message of the call, both ways, starts with a mark byte
	rateKey = "tensorpress-hop-rate" // bytes per second the sender of the metadata receives at (or was configured with)
)

// hopVersion is the format of the hop's messages this proxy speaks; a
// call marked with another is refused (Unimplemented).
const hopVersion = "1"

// The mark byte that starts each message of a marked call. Neither is a
// valid first byte of a protobuf message (field number 0), so a server
// that is not a proxy, given one by mistake, fails to parse it rather
// than taking it for data.
const (
	markPlain  = 0 // the application's message follows as it is
	markFrames = 1 // tensorpress bytes frames follow (package rpc's Compressor)
)

// Hop codes the messages a proxy sends over its connections to another
// proxy, one autotune.Tuner per connection: each message goes as
// tensorpress frames whose recipes the Tuner chooses for the rate of the
// link, or as it is (one mark byte before it, no copy) when the
// connection stays on this host (loopback: nothing can pay for itself
// there). Wrap every connection between the proxies with Conn (the local
// proxy's dialer) or Listener (the remote proxy's listener), and give the
// Hop to ServerOptions (WithOutgoingHop on the local side, WithIncomingHop
// on the remote side).
//
// The rate a Tuner plans with is measured by the receiver: each proxy
// times how long each message it receives from the other took to arrive,
// on its connection's reads, and says so in the metadata of the next call
// (local to remote) or response header (remote to local). A Hop made with
// a bandwidth plans with that, on any connection, loopback included.
//
// A Hop is safe for concurrent use.
type Hop struct {
	rate float64 // configured, bytes per second; 0: measured

	mu    sync.Mutex
	stats *Stats
	conns map[connKey]*hopConn // by both ends' addresses: one TCP connection each
	last  *hopConn             // the last made, for a rate before a call has its connection
	// perCall: DialOptions put each call's rate in its metadata.
	perCall bool
}

// connKey names a connection by its two ends, as peer.Peer does.
type connKey struct{ local, remote string }

func keyOf(local, remote net.Addr) connKey {
	k := connKey{remote: remote.String()}
	if local != nil {
		k.local = local.String()
	}
	return k
}

// NewHop returns a Hop for a link of bandwidth bytes per second, or of the
// rate measured on it where bandwidth is 0.
func NewHop(bandwidth float64) (*Hop, error) {
	if bandwidth < 0 || math.IsNaN(bandwidth) || math.IsInf(bandwidth, 0) {
		return nil, fmt.Errorf("%w: bandwidth %v", ErrBadOption, bandwidth)
	}
	return &Hop{rate: bandwidth, conns: map[connKey]*hopConn{}}, nil
}

func (h *Hop) setStats(st *Stats) {
	h.mu.Lock()
	h.stats = st
	h.mu.Unlock()
}

// Conn returns c as a connection of the hop: its own Tuner, reads timed
// for the rate, bytes counted in the Stats of the proxy (Stats.HopOut,
// HopIn, per peer). Closing it forgets it.
func (h *Hop) Conn(c net.Conn) net.Conn {
	h.mu.Lock()
	st := h.stats
	h.mu.Unlock()
	if st == nil {
		st = new(Stats)
	}
	hc := &hopConn{Conn: c, h: h, key: keyOf(c.LocalAddr(), c.RemoteAddr()), st: st}
	hc.loop.Store(h.rate == 0 && loopback.Conn(c))
	hc.peer, hc.peerKey = st.peer(c.RemoteAddr())
	// On an error (none of these options can fail) the connection codes
	// as a Hop without a Tuner does: recipes by the kind of data.
	hc.tuner, hc.comp, hc.err = newCoder(st)
	if hc.tuner != nil && h.rate > 0 {
		hc.tuner.Link().SetRate(h.rate, "configured")
	}
	h.mu.Lock()
	h.conns[hc.key] = hc
	h.last = hc
	h.mu.Unlock()
	return hc
}

// newCoder returns a connection's Tuner and the Compressor that it
// drives, counting in st.
func newCoder(st *Stats) (*autotune.Tuner, *rpc.Compressor, error) {
	tu, err := autotune.New(
		autotune.WithExplain(func(autotune.Decision) { st.Switches.Add(1) }),
		autotune.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, nil, err
	}
	comp, err := rpc.NewCompressor(rpc.WithName("tensorpress-hop"), rpc.WithPolicy(&recipeStats{inner: tu, st: st}))
	if err != nil {
		return nil, nil, err
	}
	return tu, comp, nil
}

// Listener returns ln whose accepted connections are the hop's (Conn).
func (h *Hop) Listener(ln net.Listener) net.Listener { return hopListener{ln, h} }

type hopListener struct {
	net.Listener
	h *Hop
}

func (l hopListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.h.Conn(c), nil
}

// conn returns the hop's connection of a call's peer (its two ends'
// addresses), nil if it is not one of the hop's.
func (h *Hop) conn(p *peer.Peer) *hopConn {
	if p == nil || p.Addr == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[keyOf(p.LocalAddr, p.Addr)]
}

// lastConn returns the connection made last, nil if it is closed: on the
// local side, the one a call is about to take in all likelihood (gRPC
// keeps one connection to the remote proxy), whose measured rate the
// call's metadata carries before the call has its connection.
func (h *Hop) lastConn() *hopConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// announcedPerCall reports whether DialOptions put each call's rate in
// its metadata.
func (h *Hop) announcedPerCall() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.perCall
}

// rateFor is the rate to tell the other side that it sends at (its
// metadata value): the configured one (marked so), or the one measured on
// hc's reads ("": none yet).
func (h *Hop) rateFor(hc *hopConn) string {
	if h.rate > 0 {
		return strconv.FormatFloat(h.rate, 'g', 6, 64) + configured
	}
	if hc == nil {
		return ""
	}
	if r := hc.meter.rate(); r > 0 {
		return strconv.FormatFloat(r, 'g', 6, 64)
	}
	return ""
}

// configured ends a rate value that an operator gave (--bandwidth).
const configured = ";configured"

// hopConn is a connection of a Hop.
type hopConn struct {
	net.Conn
	h       *Hop
	key     connKey
	st      *Stats
	peer    *peerCount
	peerKey string
	loop    atomic.Bool     // on loopback, and no rate configured on either side
	tuner   *autotune.Tuner // nil: newCoder failed (err)
	comp    *rpc.Compressor
	err     error
	meter   meter
	once    sync.Once
}

func (c *hopConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.st.HopOut.Add(int64(n))
	c.peer.out.Add(int64(n))
	return n, err
}

func (c *hopConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.st.HopIn.Add(int64(n))
		c.peer.in.Add(int64(n))
		c.meter.read(n, time.Now())
	}
	return n, err
}

func (c *hopConn) Close() error {
	c.once.Do(func() {
		c.h.mu.Lock()
		if c.h.conns[c.key] == c {
			delete(c.h.conns, c.key)
		}
		if c.h.last == c {
			c.h.last = nil
		}
		c.h.mu.Unlock()
	})
	return c.Conn.Close()
}

// setRate takes the rate the other side measured (metadata value v) for
// the Tuner, unless the Hop has a configured one.
func (c *hopConn) setRate(v []string) {
	if c == nil || c.tuner == nil || c.h.rate > 0 || len(v) == 0 {
		return
	}
	num, set := strings.CutSuffix(v[0], configured)
	if r, err := strconv.ParseFloat(num, 64); err == nil && r > 0 {
		if set {
			// The other side's operator gave the rate: take it as
			// given, loopback or not.
			c.loop.Store(false)
			c.tuner.Link().SetRate(r, "configured")
			return
		}
		c.tuner.Link().SetRate(r, "receiver")
	}
}

// estimate is the Tuner's link estimate in bits per second.
func (c *hopConn) estimate() float64 {
	if c.loop.Load() {
		return math.Inf(1)
	}
	if c.tuner == nil {
		return 0
	}
	return 8 * c.tuner.Link().Estimate().Bandwidth
}

var plainMark = mem.SliceBuffer{markPlain}

// encode returns m as it goes on the hop (a reference of its own, for the
// caller to free; m stays the caller's): after a mark byte, as it is on
// loopback, else as frames.
func encode(c *hopConn, m mem.BufferSlice, st *Stats) (mem.BufferSlice, error) {
	if c != nil && c.loop.Load() {
		out := make(mem.BufferSlice, 0, len(m)+1)
		out = append(out, plainMark)
		for _, b := range m {
			b.Ref()
			out = append(out, b)
		}
		n := int64(m.Len())
		st.recipe("none").add(n, n+1, 0)
		return out, nil
	}
	t0 := time.Now()
	var out mem.BufferSlice
	w := mem.NewWriter(&out, mem.DefaultBufferPool())
	w.Write([]byte{markFrames})
	comp, err := compressorOf(c)
	if err != nil {
		out.Free()
		return nil, status.Errorf(codes.Internal, "proxy: coding a message for the hop: %v", err)
	}
	cw, err := comp.Compress(w)
	if err == nil {
		for _, b := range m {
			if _, err = cw.Write(b.ReadOnlyData()); err != nil {
				break
			}
		}
		if cerr := cw.Close(); err == nil {
			err = cerr
		}
	}
	st.EncodeNanos.Add(int64(time.Since(t0)))
	if err != nil {
		out.Free()
		return nil, status.Errorf(codes.Internal, "proxy: coding a message for the hop: %v", err)
	}
	return out, nil
}

// decode returns the application's message of m, a message of a marked
// call (a reference of its own; m stays the caller's), at most max bytes.
func decode(c *hopConn, m mem.BufferSlice, max int, st *Stats) (mem.BufferSlice, error) {
	for len(m) > 0 && m[0].Len() == 0 {
		m = m[1:]
	}
	if len(m) == 0 {
		st.decodeError("unmarked")
		return nil, status.Error(codes.Internal, "proxy: a message from the other proxy without its mark")
	}
	switch first := m[0].ReadOnlyData()[0]; first {
	case markPlain:
		out := make(mem.BufferSlice, 0, len(m))
		for _, b := range m {
			b.Ref()
			out = append(out, b)
		}
		left, right := mem.SplitUnsafe(out[0], 1)
		left.Free()
		out[0] = right
		if n := out.Len(); n > max {
			out.Free()
			st.decodeError("limit")
			return nil, status.Errorf(codes.ResourceExhausted, "proxy: a message from the other proxy of %d bytes, more than %d", n, max)
		}
		return out, nil
	case markFrames:
	default:
		st.decodeError("unmarked")
		return nil, status.Errorf(codes.Internal, "proxy: a message from the other proxy with mark %d", first)
	}
	t0 := time.Now()
	r := m.Reader()
	r.ReadByte()
	comp, err := compressorOf(c)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "proxy: %v", err)
	}
	dr, err := comp.Decompress(r)
	if err != nil {
		st.decodeError(errKind(err))
		return nil, status.Errorf(codes.Internal, "proxy: %v", err)
	}
	out, err := mem.ReadAll(io.LimitReader(dr, int64(max)+1), mem.DefaultBufferPool())
	dr.(io.Closer).Close()
	st.DecodeNanos.Add(int64(time.Since(t0)))
	if err != nil {
		out.Free()
		st.decodeError(errKind(err))
		return nil, status.Errorf(codes.Internal, "proxy: a message from the other proxy: %v", err)
	}
	if out.Len() > max {
		out.Free()
		st.decodeError("limit")
		return nil, status.Errorf(codes.ResourceExhausted, "proxy: a message from the other proxy decodes to more than %d bytes", max)
	}
	return out, nil
}

// hopLimit is the largest message on the hop for an application's
// message of at most n bytes: its mark byte, and the frames' headers and
// checksums of the worst case (every frame stored raw, frames as short as
// 4 KiB): 0.4% and 33 bytes more at most, within gRPC's int32 sizes.
func hopLimit(n int) int {
	const shortest = 4 << 10
	perFrame := codec.MaxEncodedLen(rpc.DefaultChunkSize) - rpc.DefaultChunkSize
	return int(min(int64(n)+1+int64(n/shortest+2)*int64(perFrame), math.MaxInt32))
}

// defaultComp codes and decodes for a proxy that has no Hop of its own
// (a remote proxy given none): recipes by the kind of data.
var defaultComp = sync.OnceValues(func() (*rpc.Compressor, error) {
	return rpc.NewCompressor(rpc.WithName("tensorpress-hop"))
})

// compressorOf returns the Compressor of c, or defaultComp where c is nil
// or has none.
func compressorOf(c *hopConn) (*rpc.Compressor, error) {
	if c != nil && c.comp != nil {
		return c.comp, nil
	}
	return defaultComp()
}

// errKind is the class of a decoding error for the metrics.
func errKind(err error) string {
	switch {
	case errors.Is(err, codec.ErrChecksum):
		return "checksum"
	case errors.Is(err, codec.ErrLimit):
		return "limit"
	case errors.Is(err, codec.ErrUnsupported):
		return "unsupported"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case errors.Is(err, codec.ErrCorrupt):
		return "corrupt"
	}
	return "other"
}

// hopMD returns the metadata a marked call or response header carries.
func hopMD(md metadata.MD, rate string, mark bool) metadata.MD {
	if mark {
		md.Set(hopKey, hopVersion)
	}
	if rate != "" {
		md.Set(rateKey, rate)
	}
	return md
}

// meter times a connection's reads: when a message of n wire bytes has
// arrived, rate is n over the time since the read that began it.
type meter struct {
	mu    sync.Mutex
	total int64
	ring  [4096]readAt // the last reads: total bytes read before each, and when it returned
	next  int
	bw    float64
}

type readAt struct {
	before int64
	at     time.Time
}

// minTimed is the smallest message whose arrival is timed: smaller ones
// say more about the round trip than about the rate.
const minTimed = 64 << 10

func (m *meter) read(n int, now time.Time) {
	m.mu.Lock()
	m.ring[m.next%len(m.ring)] = readAt{m.total, now}
	m.next++
	m.total += int64(n)
	m.mu.Unlock()
}

// message notes that a message of n bytes on the wire has just been read
// whole. Its first byte came with the read at which the total passed
// total-n; the bytes read after that one took the time from its end to
// the last read's.
func (m *meter) message(n int) {
	if n < minTimed {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.total - int64(n)
	oldest := max(0, m.next-len(m.ring))
	at := func(k int) readAt { return m.ring[k%len(m.ring)] }
	// j: the first read that began after start; j-1 holds the first byte.
	j := oldest + sort.Search(m.next-oldest, func(k int) bool { return at(oldest+k).before > start })
	if j == oldest || j >= m.next {
		return // older than the ring holds, or all in the last read
	}
	first, last := at(j-1), at(m.next-1)
	if d := last.at.Sub(first.at); d > 0 {
		m.bw = float64(m.total-at(j).before) / d.Seconds()
	}
}

func (m *meter) rate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bw
}

// recipeStats counts each frame's bytes by recipe for Stats, between the
// Compressor and its Tuner.
type recipeStats struct {
	inner *autotune.Tuner
	st    *Stats
}

func (p *recipeStats) Choose(fi codec.FrameInfo) *codec.Recipe { return p.inner.Choose(fi) }
func (p *recipeStats) Cut(data []byte) int                     { return p.inner.Cut(data) }
func (p *recipeStats) Observe(fs codec.FrameStats) {
	if fs.Err == nil {
		name := "raw"
		if fs.Recipe != nil {
			name = fs.Recipe.String()
		}
		p.st.recipe(name).add(int64(fs.RawBytes), int64(fs.FrameBytes), fs.Encode)
	}
	p.inner.Observe(fs)
}

var (
	_ codec.Policy = (*recipeStats)(nil)
	_ codec.Cutter = (*recipeStats)(nil)
)

// recipeCount is what went through one recipe on the hop.
type recipeCount struct {
	in, out, frames, nanos atomic.Int64
}

func (r *recipeCount) add(in, out int64, d time.Duration) {
	r.in.Add(in)
	r.out.Add(out)
	r.frames.Add(1)
	r.nanos.Add(int64(d))
}

type peerCount struct {
	in, out atomic.Int64
}

// maxPeers bounds the peers Stats counts apart; the others count as
// "other".
const maxPeers = 64

// rateForConn is rateFor on a Hop that may be nil (a remote proxy with
// none measures nothing).
func (h *Hop) rateForConn(c *hopConn) string {
	if h == nil {
		return ""
	}
	return h.rateFor(c)
}
