package autotune

import (
	"math"
	"net"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/internal/loopback"
)

// Estimate is what the link estimator knows of the path.
type Estimate struct {
	// Bandwidth in bytes per second of wire data; 0 when unknown. When
	// Bound is set it is a lower bound: the link took all that was sent
	// without holding the writer back, so it may be faster.
	Bandwidth float64
	Bound     bool
	// Kept is set when Bandwidth was measured earlier (at At) while the
	// link held the writer back, and is kept because the writer has sent
	// no faster since: the link may have become faster unnoticed.
	Kept bool
	// Blocked is the share of the window the writer spent blocked in
	// Write (writer-side estimates only).
	Blocked float64
	Source  string        // what it comes from: "hint", "blocked writes", "receiver feedback", "tcp_info"
	RTT     time.Duration // 0 when unknown
	At      time.Time     // when it was measured
}

// linkWindow is how far back the writer-side estimate looks.
const (
	linkWindow    = 200 * time.Millisecond
	linkMinFrames = 2
	linkMaxFrames = 8
	// blockedShare is the share of the window the writer must spend
	// blocked in Write for the link to count as the bottleneck.
	blockedShare = 0.5
	// freeShare: a writer blocked for less than this share of the time is
	// not held back by the link at all, whose bandwidth is then unknown
	// (at least the rate sent).
	freeShare = 0.1
	// linkStartBytes: on TCP, the writer's own timing says nothing until
	// it has sent this much: socket buffers take the first megabyte or so
	// at once, whatever the link (a stream starts with small frames,
	// which would all look unhindered). Bytes queued unsent (TCP_INFO)
	// say that the link is slow sooner.
	linkStartBytes = 1 << 20
)

type sent struct {
	seq     uint64
	at      time.Time // when the write returned
	bytes   int
	blocked time.Duration
}

// Link estimates the bandwidth of the path under a writer from the time
// its writes spend blocked (the link is the bottleneck when the writer
// waits on it), from the receiver's feedback (how fast data arrives), from
// the kernel (TCP_INFO, through WithTCPInfo) and from a configured hint.
// It is safe for concurrent use.
type Link struct {
	mu     sync.Mutex
	hint   float64
	frames []sent
	total  int64    // wire bytes of all the frames observed
	from   uint64   // frames before this sequence number are not in the window
	known  Estimate // the last bandwidth measured while link-bound

	fbAt    time.Time
	fbWire  uint64
	fbRate  float64 // receive rate from feedback, bytes per second
	fbValid bool

	tcp      func() (tcpInfo, bool)
	loopback bool // both ends on this host's loopback: the link is memory

	set Estimate // SetRate's, when its Bandwidth > 0
	now func() time.Time
}

// notSentQueued is how many bytes waiting unsent in a TCP send buffer
// show that the link, not the writer, sets the pace.
const notSentQueued = 64 << 10

type tcpInfo struct {
	DeliveryRate float64 // bytes per second
	RTT          time.Duration
	NotSent      int
}

// NewLink returns an estimator with a configured bandwidth hint in bytes
// per second (0: none).
func NewLink(hint float64) *Link { return &Link{hint: hint, now: time.Now} }

// Restart starts the writer-side window again at frame seq: a new recipe
// sends at another pace, and the frames before it would blur the rate the
// link takes it at. The bandwidth measured so far is kept.
func (l *Link) Restart(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.from = seq
	l.frames = l.frames[:0]
}

// ObserveWrite records frame seq of n wire bytes whose Write took blocked.
func (l *Link) ObserveWrite(seq uint64, n int, blocked time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total += int64(n)
	if seq < l.from {
		return
	}
	now := l.now()
	l.frames = append(l.frames, sent{seq: seq, at: now, bytes: n, blocked: blocked})
	// Keep the window: the frames of the last linkWindow, at least
	// linkMinFrames and at most linkMaxFrames.
	drop := 0
	for drop < len(l.frames)-linkMinFrames && (len(l.frames)-drop > linkMaxFrames || now.Sub(l.frames[drop].at) > linkWindow) {
		drop++
	}
	l.frames = append(l.frames[:0], l.frames[drop:]...)
	if e, ok := l.writerEstimate(); ok && !e.Bound && e.Blocked >= blockedShare {
		l.known = e // only a rate measured while held back is kept
	}
}

// writerEstimate is the estimate from the window of writes: the rate the
// frames left at, which is the link's when the writer spent most of the
// window blocked.
func (l *Link) writerEstimate() (Estimate, bool) {
	if len(l.frames) < linkMinFrames {
		return Estimate{}, false
	}
	first, last := l.frames[0], l.frames[len(l.frames)-1]
	// The first frame's write ended the period before the window.
	span := last.at.Sub(first.at)
	var bytes int
	var blocked time.Duration
	for _, f := range l.frames[1:] {
		bytes += f.bytes
		blocked += f.blocked
	}
	if span <= 0 || bytes == 0 {
		return Estimate{}, false
	}
	rate := float64(bytes) / span.Seconds()
	share := blocked.Seconds() / span.Seconds()
	e := Estimate{Bandwidth: rate, Blocked: share, Source: "blocked writes", At: last.at}
	switch {
	case share >= blockedShare:
		// Held back most of the time: the link's rate.
	case share >= freeShare:
		// A writer slower than the link still waits while each frame
		// drains: the link drained the frames' bytes in the time it
		// waited (an over-estimate where buffers absorbed some).
		e.Bandwidth, e.Source = float64(bytes)/blocked.Seconds(), "blocked time"
	default:
		e.Bound = true
	}
	return e, true
}

// ObserveFeedback records the receiver's total of wire bytes received.
func (l *Link) ObserveFeedback(wire uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.fbAt.IsZero() && wire > l.fbWire {
		if dt := now.Sub(l.fbAt); dt > 0 {
			r := float64(wire-l.fbWire) / dt.Seconds()
			if l.fbValid {
				r = 0.5*l.fbRate + 0.5*r
			}
			l.fbRate, l.fbValid = r, true
		}
	}
	if wire >= l.fbWire {
		l.fbAt, l.fbWire = now, wire
	}
}

// Estimate returns the current estimate. On TCP, bytes queued unsent in
// the kernel mean the link is the bottleneck, at the kernel's delivery
// rate. Otherwise the writer's own blocking is the most direct evidence; a rate measured while link-bound is kept while the
// writer sends no faster than it; otherwise what was sent is a lower bound,
// raised by the kernel's delivery rate or the receiver's rate when those
// are higher; a configured hint above all that is taken as the bandwidth.
func (l *Link) Estimate() Estimate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loopback {
		// Sender and receiver share this host's cores and the "link" is
		// a memory copy: no compression can pay for itself.
		return Estimate{Bandwidth: math.Inf(1), Source: "loopback", At: l.now()}
	}
	if l.set.Bandwidth > 0 {
		return l.set
	}
	var rtt time.Duration
	var ti tcpInfo
	haveTCP := false
	if l.tcp != nil {
		ti, haveTCP = l.tcp()
		rtt = ti.RTT
	}
	if haveTCP && ti.NotSent >= notSentQueued && ti.DeliveryRate > 0 {
		// Data waits in the kernel's send buffer: the link is the
		// bottleneck even while writes return at once (the buffer hides
		// it for its first megabytes), and the kernel measures its rate.
		e := Estimate{Bandwidth: ti.DeliveryRate, Source: "tcp_info", RTT: rtt, At: l.now()}
		l.known = e
		return e
	}
	if haveTCP && l.total < linkStartBytes {
		// Nothing known yet: the writes so far went into the socket's
		// buffers, and a receiver's rate is that of the few frames it
		// had. The hint, or none (the Tuner's initial guess).
		if l.hint > 0 {
			return Estimate{Bandwidth: l.hint, Source: "hint", RTT: rtt, At: l.now()}
		}
		return Estimate{RTT: rtt, At: l.now()}
	}
	e, ok := l.writerEstimate()
	switch {
	case ok && !e.Bound:
		e.RTT = rtt
		return e
	case l.known.Bandwidth > 0 && (!ok || e.Bandwidth <= 1.25*l.known.Bandwidth):
		// Not enough frames since a restart, or sending no faster than
		// the rate measured before: that rate still holds.
		k := l.known
		k.RTT, k.Kept = rtt, true
		return k
	}
	if !ok {
		e = Estimate{Bound: true, At: l.now()}
	}
	if haveTCP && ti.DeliveryRate > e.Bandwidth {
		e.Bandwidth, e.Source = ti.DeliveryRate, "tcp_info"
	}
	if l.fbValid && l.fbRate > e.Bandwidth {
		e.Bandwidth, e.Source = l.fbRate, "receiver feedback"
	}
	if l.hint > e.Bandwidth {
		e.Bandwidth, e.Bound, e.Source = l.hint, false, "hint"
	}
	e.RTT = rtt
	return e
}

// SetRate sets the link's bandwidth, in bytes per second, as the caller
// measured it (source says how, for the estimate's Source) or was told:
// Estimate returns it from now on, whatever the writes and the kernel
// show, until the next SetRate; 0 goes back to the estimator's own
// measurements. It is meant for writers whose writes never block on the
// link, such as messages handed to gRPC, whose rate the receiver measures
// (a proxy's hop). A loopback connection (UseConn) still counts as
// unlimited.
func (l *Link) SetRate(bw float64, source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !(bw > 0) || math.IsInf(bw, 0) {
		l.set = Estimate{}
		return
	}
	l.set = Estimate{Bandwidth: bw, Source: source, At: l.now()}
}

// UseConn tells the estimator which connection it measures: on Linux TCP
// it reads TCP_INFO (UseTCPInfo), and a connection whose two ends are
// loopback addresses is taken as a link of unlimited bandwidth (a memory
// copy on shared cores, where storing raw is always fastest).
func (l *Link) UseConn(c net.Conn) {
	if loopback.Conn(c) {
		l.mu.Lock()
		l.loopback = true
		l.mu.Unlock()
	}
	l.UseTCPInfo(c)
}

func (l *Link) isLoopback() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loopback
}
