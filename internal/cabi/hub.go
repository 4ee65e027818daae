package cabi

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/profile"
)

// hubConn is a client connection to a hub, with the cancel functions of
// its calls in flight (HubCancel).
type hubConn struct {
	addr   string
	secure bool // TLS on
	conn   *grpc.ClientConn
	c      hubpb.HubClient

	mu       sync.Mutex
	next     uint64
	inflight map[uint64]context.CancelFunc
	rtt      time.Duration // the shortest Versions call seen (0: none yet)

	// The density chooser of uploads with a time (UploadRequest.WithinMS):
	// its link is this connection's uplink, as the uploads measure it.
	tuneMu  sync.Mutex
	tuner   *autotune.Tuner
	tuneKey string // the spec and densities it was made for
}

// sawRTT records the time a Versions call took: the shortest is the
// connection's round trip.
func (hc *hubConn) sawRTT(d time.Duration) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.rtt == 0 || d < hc.rtt {
		hc.rtt = d
	}
}

// HubAuth is tp_auth, its strings read by the caller of HubDial: a CA
// (TLS on), a client certificate and key (mutual TLS), the name the
// server's certificate is checked for, a token file.
type HubAuth struct {
	CAFile, CertFile, KeyFile, ServerName, TokenFile string
}

// HubDial makes a client of the hub at addr, an address as gRPC users
// write it (hub.ParseAddr): host:port, dns:///host:port, unix:///path,
// http:// (plain text) or https:// (TLS with the system's roots unless a
// CA is given). It connects at the first call.
func HubDial(addr string, a HubAuth) (h uint64, code int32, msg string) {
	defer guard(&code, &msg)
	t, err := hub.ParseAddr(addr)
	if err != nil {
		return 0, EARG, fmt.Sprintf("tensorpress: hub address %v", err)
	}
	cfg := auth.Config{CAFile: a.CAFile, CertFile: a.CertFile, KeyFile: a.KeyFile, ServerName: a.ServerName, TokenFile: a.TokenFile}
	if t.Plain && cfg.ClientTLS() {
		return 0, EARG, fmt.Sprintf("tensorpress: hub address %s is plain text (http://), but a CA or a certificate asks for TLS: write https:// or host:port", addr)
	}
	if err := cfg.Check(); err != nil {
		return 0, EARG, "tensorpress: " + err.Error()
	}
	opts, err := cfg.DialOptions()
	if err != nil {
		return 0, EARG, "tensorpress: " + err.Error()
	}
	if t.TLS && !cfg.ClientTLS() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	}
	opts = append(opts, grpc.WithStatsHandler(wireCount{}))
	conn, err := grpc.NewClient(t.Target, opts...)
	if err != nil {
		return 0, EARG, fmt.Sprintf("tensorpress: hub address %s: %v", addr, err)
	}
	hc := &hubConn{addr: strings.Clone(addr), secure: t.TLS || cfg.ClientTLS(), conn: conn, c: hubpb.NewHubClient(conn), inflight: map[uint64]context.CancelFunc{}}
	return newHandle(hc), OK, ""
}

// counter holds the gRPC wire bytes of the calls whose context carries it.
type counter struct{ in, out atomic.Int64 }

type counterKey struct{}

// wireCount is a stats.Handler adding each message's wire length (with
// gRPC's framing) to the counter of its call's context.
type wireCount struct{}

func (wireCount) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (wireCount) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (wireCount) HandleConn(context.Context, stats.ConnStats)                       {}
func (wireCount) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(counterKey{}).(*counter)
	if c == nil {
		return
	}
	switch p := s.(type) {
	case *stats.InPayload:
		c.in.Add(int64(p.WireLength))
	case *stats.OutPayload:
		c.out.Add(int64(p.WireLength))
	}
}

// callCtx is the context of one hub call on hc: a deadline timeoutMS from
// now (0: none), a wire byte counter, and a cancel function that
// HubCancel calls too while the call is in flight. The caller calls the
// returned function when the call ends.
func (hc *hubConn) callCtx(timeoutMS int64) (context.Context, *counter, func()) {
	c := new(counter)
	base := context.WithValue(context.Background(), counterKey{}, c)
	ctx, cancel := context.WithCancel(base)
	if timeoutMS > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(base, time.Duration(timeoutMS)*time.Millisecond)
	}
	hc.mu.Lock()
	hc.next++
	id := hc.next
	hc.inflight[id] = cancel
	hc.mu.Unlock()
	return ctx, c, func() {
		hc.mu.Lock()
		delete(hc.inflight, id)
		hc.mu.Unlock()
		cancel()
	}
}

// HubCancel cancels the calls in flight on hub h: they return ECANCELED.
// It reports how many there were.
func HubCancel(h uint64) (n int32, code int32, msg string) {
	defer guard(&code, &msg)
	hc, err := lookup[*hubConn](h, "hub")
	if err != nil {
		code, msg = fail(err)
		return 0, code, msg
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	for _, cancel := range hc.inflight {
		cancel()
	}
	return int32(len(hc.inflight)), OK, ""
}

// withHub runs f on hub connection h, writing the JSON of what it returns
// into out (spilled when it does not fit). A *hub.BaseError still writes
// the result, with the base error in it.
func withHub(h uint64, out unsafe.Pointer, cap int64, f func(hc *hubConn) (any, error)) (n int64, spill uint64, code int32, msg string) {
	defer guard(&code, &msg)
	hc, err := lookup[*hubConn](h, "hub")
	if err != nil {
		code, msg = fail(err)
		return 0, 0, code, msg
	}
	res, err := f(hc)
	if err != nil {
		code, msg = fail(hc.error(err))
	}
	if res != nil {
		b, jerr := json.Marshal(res)
		if jerr != nil {
			panic(jerr)
		}
		n, spill = finish(append(outSlice(out, cap), b...), out)
	}
	return n, spill, code, msg
}

// error gives err, from a call on hc, its code and a message naming the
// hub.
func (hc *hubConn) error(err error) error {
	addr := hc.addr
	var be *hub.BaseError
	st, isStatus := status.FromError(err)
	switch {
	case errors.As(err, &be):
		return &codeError{code: EBASE, msg: "tensorpress: " + err.Error(), err: err}
	case errors.Is(err, hub.ErrWeight):
		return &codeError{code: EARG, msg: "tensorpress: " + err.Error(), err: err}
	case errors.Is(err, hub.ErrStalled), errors.Is(err, context.DeadlineExceeded):
		return &codeError{code: ETIMEOUT, msg: fmt.Sprintf("tensorpress: hub at %s: %v", addr, err), err: err}
	case errors.Is(err, context.Canceled):
		return &codeError{code: ECANCELED, msg: fmt.Sprintf("tensorpress: hub at %s: canceled", addr), err: err}
	case errors.Is(err, errAlloc):
		return &codeError{code: ECANCELED, msg: "tensorpress: fetch canceled: the allocation callback returned NULL", err: err}
	case !isStatus:
		return fmt.Errorf("tensorpress: hub at %s: %w", addr, err)
	}
	code := map[codes.Code]int32{codes.NotFound: ENOTFOUND, codes.Unavailable: EUNAVAILABLE,
		codes.Unauthenticated: EAUTH, codes.PermissionDenied: EAUTH, codes.DeadlineExceeded: ETIMEOUT,
		codes.Canceled: ECANCELED, codes.ResourceExhausted: ELIMIT, codes.InvalidArgument: EARG,
		codes.FailedPrecondition: ESTATE, codes.AlreadyExists: ESTATE}[st.Code()]
	if code == 0 {
		code = EUNAVAILABLE
	}
	m := st.Message()
	switch {
	case code == EUNAVAILABLE && (strings.Contains(m, "certificate") || strings.Contains(m, "x509")):
		code = EAUTH // the TLS handshake refused a certificate, or its absence
	case code == EUNAVAILABLE && !hc.secure && strings.Contains(m, "server preface") && !strings.Contains(m, "refused"):
		m += " (a hub with TLS? give its CA)"
	case code == EUNAVAILABLE && hc.secure && (strings.Contains(m, "reset") || strings.Contains(m, "broken pipe") || strings.Contains(m, "EOF")):
		m += " (the hub closed the connection after the TLS handshake: with TLS 1.3 that is how it refuses a client certificate, or its absence)"
	}
	what := map[int32]string{ENOTFOUND: "not found", EUNAVAILABLE: "unreachable", EAUTH: "refused this client",
		ETIMEOUT: "no answer in time", ECANCELED: "canceled", ELIMIT: "over a limit", EARG: "refused the request"}[code]
	switch st.Code() {
	case codes.FailedPrecondition:
		what = "refused the update: its round is closed (the sender keeps it in its residual for a later round)"
	case codes.AlreadyExists:
		what = "refused the update: it already counted this peer's update of the tensor in the round"
	}
	return &codeError{code: code, msg: fmt.Sprintf("tensorpress: hub at %s: %s: %s", addr, what, m), err: err}
}

// HubVersions lists the hub's versions, newest first, as JSON
// [{"version":…,"tensors":…,"bytes":…}] in out.
func HubVersions(h uint64, timeoutMS int64, out unsafe.Pointer, cap int64) (n int64, spill uint64, code int32, msg string) {
	return withHub(h, out, cap, func(hc *hubConn) (any, error) {
		ctx, _, cancel := hc.callCtx(timeoutMS)
		defer cancel()
		t0 := time.Now()
		r, err := hc.c.Versions(ctx, &hubpb.VersionsRequest{})
		if err != nil {
			return nil, err
		}
		hc.sawRTT(time.Since(t0))
		type info struct {
			Version uint64 `json:"version"`
			Tensors uint32 `json:"tensors"`
			Bytes   uint64 `json:"bytes"`
		}
		vs := make([]info, 0, len(r.Versions))
		for _, v := range r.Versions {
			vs = append(vs, info{v.Version, v.Tensors, v.Bytes})
		}
		return vs, nil
	})
}

// FetchRequest is the JSON request of HubFetch.
type FetchRequest struct {
	Version         uint64   `json:"version"`
	Names           []string `json:"names"`
	RequireLossless *bool    `json:"require_lossless"` // default true
	Credit          int      `json:"credit"`
	Base            uint64   `json:"base"`
	Retries         int      `json:"retries"`
	StallMS         int64    `json:"stall_ms"`
	TimeoutMS       int64    `json:"timeout_ms"`
	FastDeltas      bool     `json:"fast_deltas"` // hub.Request.FastDeltas
}

// FetchResult is the JSON result of HubFetch.
type FetchResult struct {
	Version       uint64            `json:"version"`
	Deltas        int               `json:"deltas"`
	Full          int               `json:"full"`
	Resumed       int               `json:"resumed"`
	BaseNote      string            `json:"base_note"`
	Digests       map[string]string `json:"digests"`
	Lossy         []string          `json:"lossy"`
	Unchecked     []string          `json:"unchecked"`
	BytesReceived int64             `json:"bytes_received"`
	BaseError     *BaseError        `json:"base_error,omitempty"`
}

// BaseError is a *hub.BaseError in JSON: the base version and the
// tensors whose deltas did not give the version.
type BaseError struct {
	Base  uint64   `json:"base"`
	Names []string `json:"names"`
}

// AllocFunc returns the caller's memory for a tensor of nbytes bytes
// (nil: cancel the fetch); it must stay valid until the call returns.
type AllocFunc func(name string, dtype int32, shape []int64, nbytes int64) unsafe.Pointer

// errAlloc is the error of a fetch whose AllocFunc returned nil.
var errAlloc = errors.New("allocation refused")

// HubFetch fetches what the JSON request at rq selects from hub h, each
// tensor written into the memory alloc gives for it as its chunks arrive
// (one copy, from the decoded chunk into the caller's memory) and checked
// against the hub's digest by package hub. With a base version, the
// tensors of bases (the caller's copies, read only) are the base of the
// deltas. The JSON result goes into out; a *hub.BaseError is EBASE with
// the result still written, naming the tensors to fetch again whole.
func HubFetch(h uint64, rq []byte, lim *Limits, bases *Tensor, nbase int32, alloc AllocFunc, out unsafe.Pointer, cap int64) (n int64, spill uint64, code int32, msg string) {
	return withHub(h, out, cap, func(hc *hubConn) (any, error) {
		var fr FetchRequest
		if err := json.Unmarshal(rq, &fr); err != nil {
			return nil, argErrorf("fetch request: %v", err)
		}
		req, err := fr.request(lim, bases, nbase)
		if err != nil {
			return nil, err
		}
		ctx, cnt, cancel := hc.callCtx(fr.TimeoutMS)
		defer cancel()
		var dst []byte
		var cur string
		res, err := hub.FetchChunks(ctx, hc.c, req, func(t *codec.Tensor) error {
			if t.Offset == 0 {
				nb := t.NumBytes()
				p := alloc(t.Name, int32(t.DType), t.Shape, nb)
				if p == nil && nb > 0 {
					return errAlloc
				}
				dst, cur = mem(p, nb), t.Name
			}
			off := t.Offset * int64(t.DType.Size())
			if t.Name != cur || off < 0 || off+int64(len(t.Data)) > int64(len(dst)) {
				return fmt.Errorf("%w: chunk of %q at element %d out of place", codec.ErrCorrupt, t.Name, t.Offset)
			}
			copy(dst[off:], t.Data)
			return nil
		})
		r := &FetchResult{Version: res.Version, Deltas: res.Deltas, Full: res.Full, Resumed: res.Resumed,
			BaseNote: res.BaseNote, Digests: map[string]string{}, Lossy: res.Lossy, Unchecked: res.Unchecked,
			BytesReceived: cnt.in.Load()}
		for k, d := range res.Digests {
			r.Digests[k] = hex.EncodeToString(d[:])
		}
		var be *hub.BaseError
		if errors.As(err, &be) {
			r.BaseError = &BaseError{Base: be.Base, Names: be.Names}
		} else if err != nil {
			return nil, err
		}
		return r, err
	})
}

// request makes the hub.Request of fr, the base copies viewed in place.
func (fr *FetchRequest) request(lim *Limits, bases *Tensor, nbase int32) (hub.Request, error) {
	if nbase < 0 || (nbase > 0 && bases == nil) {
		return hub.Request{}, argErrorf("bad base tensors (%d)", nbase)
	}
	if fr.Credit < 0 || fr.Credit > 64 {
		return hub.Request{}, argErrorf("credit %d not in 0..64", fr.Credit)
	}
	byName := map[string]*codec.Tensor{}
	bs := unsafe.Slice(bases, int(nbase))
	for i := range bs {
		t, err := bs[i].view()
		if err != nil {
			return hub.Request{}, err
		}
		byName[t.Name] = t
	}
	req := hub.Request{Version: fr.Version, RequireLossless: fr.RequireLossless == nil || *fr.RequireLossless,
		Credit: fr.Credit, Limits: lim.limits(codec.Limits{}), Base: fr.Base, Retries: fr.Retries,
		Stall: time.Duration(fr.StallMS) * time.Millisecond, FastDeltas: fr.FastDeltas}
	if len(fr.Names) > 0 {
		req.Specs = []hub.Spec{{Names: fr.Names}}
	}
	if fr.Base != 0 {
		req.BaseTensor = func(name string) *codec.Tensor { return byName[name] }
	}
	return req, nil
}

// UploadRequest is the JSON request of HubUpload.
type UploadRequest struct {
	Round     uint64  `json:"round"`
	Weight    float32 `json:"weight"`
	Peer      string  `json:"peer"`
	Spec      string  `json:"spec"` // "": the sender's (none: dense float32)
	TimeoutMS int64   `json:"timeout_ms"`
	// WithinMS, if positive, chooses each update's density among
	// Densities (none: DefaultDensities) for the upload to reach the hub
	// within that many milliseconds, on the uplink this connection's
	// earlier uploads measured (hub.UploadRequest.Densities, an
	// autotune.Tuner): the spec must have a density (TopK, DGC, ...).
	WithinMS  int64     `json:"within_ms"`
	Densities []float64 `json:"densities"`
}

// DefaultDensities are the densities an upload with a time chooses among
// (1: the update whole, dense float32, where the link is not the
// bottleneck).
var DefaultDensities = []float64{0.003, 0.01, 0.03, 0.1, 0.3, 1}

// UploadResult is the JSON result of HubUpload.
type UploadResult struct {
	Updates   int   `json:"updates"`
	BytesSent int64 `json:"bytes_sent"`
	// With a time (WithinMS): the density chosen for each update, and
	// the uplink this upload measured (bytes per second; 0: too short to
	// tell), which the next upload's choice goes by.
	Densities map[string]float64 `json:"densities,omitempty"`
	Uplink    float64            `json:"uplink_bytes_per_second,omitempty"`
}

// HubUpload sends the updates ups (float32, whole) for a round to hub h
// through sender s's error feedback (0: a fresh one, dropped after),
// compressed with the request's spec, else the sender's. Each update is
// committed in the sender when the hub acknowledges it (package hub); the
// others are aborted back into its residuals.
func HubUpload(h, s uint64, rq []byte, ups *Tensor, nup int32, out unsafe.Pointer, cap int64) (n int64, spill uint64, code int32, msg string) {
	return withHub(h, out, cap, func(hc *hubConn) (any, error) {
		var ur UploadRequest
		if err := json.Unmarshal(rq, &ur); err != nil {
			return nil, argErrorf("upload request: %v", err)
		}
		if nup < 0 || (nup > 0 && ups == nil) {
			return nil, argErrorf("bad updates (%d)", nup)
		}
		ts := make([]*codec.Tensor, nup)
		us := unsafe.Slice(ups, int(nup))
		for i := range us {
			t, err := us[i].view()
			if err != nil {
				return nil, err
			}
			if t.DType != codec.F32 {
				return nil, argErrorf("update %q is %v; uploads take float32 (convert it)", t.Name, t.DType)
			}
			ts[i] = t
		}
		req := hub.UploadRequest{Round: ur.Round, Weight: ur.Weight, Peer: ur.Peer}
		ob := gradient.NewOutbox(gradient.NewMemory())
		if s != 0 {
			sd, err := lookup[*sender](s, "sender")
			if err != nil {
				return nil, err
			}
			sd.mu.Lock()
			defer sd.mu.Unlock()
			if p := sd.ob.Pending(); p > 0 {
				return nil, codeErrorf(ESTATE, "tensorpress: the sender has %d updates pending: commit or abort them before an upload", p)
			}
			ob, req.Spec = sd.ob, sd.spec
		} else {
			defer ob.Close()
		}
		if ur.Spec != "" {
			spec, err := gradient.Parse(ur.Spec)
			if err != nil {
				return nil, codeErrorf(ERECIPE, "tensorpress: spec %q: %v", ur.Spec, err)
			}
			req.Spec = spec
		}
		var ch *hub.Recorded
		var tu *autotune.Tuner
		if ur.WithinMS > 0 {
			var err error
			if tu, err = hc.densityTuner(req.Spec, ur.Densities); err != nil {
				return nil, err
			}
			ch = &hub.Recorded{DensityChooser: tu}
			req.Densities, req.Within = ch, time.Duration(ur.WithinMS)*time.Millisecond
		} else if ur.WithinMS < 0 || len(ur.Densities) > 0 {
			return nil, argErrorf("within_ms %d: densities are chosen for a positive time", ur.WithinMS)
		}
		ctx, cnt, cancel := hc.callCtx(ur.TimeoutMS)
		defer cancel()
		if ch != nil && hc.roundTrip() == 0 {
			// The uplink is the upload's bytes over its time less the
			// round trip its last acknowledgement took: know the round
			// trip first.
			for range 2 {
				t0 := time.Now()
				if _, err := hc.c.Versions(ctx, &hubpb.VersionsRequest{}); err != nil {
					return nil, err
				}
				hc.sawRTT(time.Since(t0))
			}
			cnt.out.Store(0)
		}
		t0 := time.Now()
		if err := hub.Upload(ctx, hc.c, ob, req, ts); err != nil {
			return nil, err
		}
		r := &UploadResult{Updates: len(ts), BytesSent: cnt.out.Load()}
		if ch != nil {
			r.Densities = ch.Chosen
			if net := time.Since(t0) - hc.roundTrip(); net > time.Millisecond && r.BytesSent > 0 {
				r.Uplink = float64(r.BytesSent) / net.Seconds()
				tu.Link().SetRate(r.Uplink, "upload")
			}
		}
		return r, nil
	})
}

func (hc *hubConn) roundTrip() time.Duration {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.rtt
}

// densityTuner returns hc's density chooser for spec and densities: the
// one made before when they are the same, else a new one that starts
// from the uplink measured so far.
func (hc *hubConn) densityTuner(spec *gradient.Spec, densities []float64) (*autotune.Tuner, error) {
	if spec == nil {
		return nil, argErrorf("within_ms: densities need a gradient compressor (a spec, or a sender with one)")
	}
	if _, ok := gradient.AtDensity(spec.Compressor, 0.5); !ok {
		return nil, argErrorf("within_ms: spec %q has no density to choose (topk, randk, dgc have)", spec)
	}
	if len(densities) == 0 {
		densities = DefaultDensities
	}
	for _, d := range densities {
		if !(d > 0 && d <= 1) {
			return nil, argErrorf("density %v not in (0, 1]", d)
		}
	}
	key := fmt.Sprint(spec, densities)
	hc.tuneMu.Lock()
	defer hc.tuneMu.Unlock()
	if hc.tuner != nil && hc.tuneKey == key {
		return hc.tuner, nil
	}
	p, err := profile.Densities(spec.String(), densities)
	if err != nil {
		return nil, codeErrorf(ERECIPE, "tensorpress: spec %q with densities: %v", spec, err)
	}
	tu, err := autotune.New(autotune.WithProfile(p))
	if err != nil {
		return nil, err
	}
	if hc.tuner != nil {
		if est := hc.tuner.Link().Estimate(); est.Bandwidth > 0 {
			tu.Link().SetRate(est.Bandwidth, "upload")
		}
	}
	hc.tuner, hc.tuneKey = tu, key
	return tu, nil
}
