package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/profile"
)

// round is the accumulator of one round's uploads: per tensor name, the
// weighted sum of the updates counted so far.
type round struct {
	mu      sync.Mutex
	closed  bool                     // by CloseRound: no more updates
	sums    map[string]*codec.Tensor // float32 sums
	counts  map[string]int
	weight  map[string]float64
	from    map[peerTensor]counted // the updates counted, by peer (when named)
	charges []*budget.Charge       // the sums' memory, until DropRound
}

// peerTensor names one peer's update of one tensor.
type peerTensor struct{ peer, tensor string }

// counted is what the round counted of a peer's update: its frame's
// SHA-256 and its weight, to tell the same update sent again (a retry
// whose acknowledgement was lost) from another.
type counted struct {
	sum    [sha256.Size]byte
	weight float32
}

// errRepeated is add's answer to a peer's update that the round already
// counted, the same frame with the same weight: it is acknowledged again
// and not counted again.
var errRepeated = errors.New("hub: the same update is already counted in the round")

// ErrDuplicate is wrapped by the error of a second, different update of
// a tensor from the same peer in a round (AlreadyExists on the wire): the
// first is counted, this one is not. A client that died after sending an
// update and before reading its acknowledgement learns so that it was
// counted. The same update sent again (the same frame and weight: a
// retry, from the residual, of an upload whose acknowledgement was lost)
// is acknowledged again and not counted twice.
var ErrDuplicate = errors.New("hub: the peer's update of this tensor is already counted in the round")

// ErrRoundClosed is wrapped by the error of an update to a round that
// CloseRound ended (FailedPrecondition on the wire): it was not counted,
// and its client keeps it in its residual for a later round.
var ErrRoundClosed = errors.New("hub: the round is closed")

func (h *Hub) round(id uint64) (*round, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id < h.closed {
		return nil, fmt.Errorf("%w: round %d (rounds before %d are)", ErrRoundClosed, id, h.closed)
	}
	if h.rounds == nil {
		h.rounds = map[uint64]*round{}
	}
	r := h.rounds[id]
	if r == nil {
		r = &round{sums: map[string]*codec.Tensor{}, counts: map[string]int{}, weight: map[string]float64{}, from: map[peerTensor]counted{}}
		h.rounds[id] = r
	}
	return r, nil
}

// add decodes frame, one tensor's update, and adds weight times it into
// the round's sum of that tensor: a sparse or quantized frame is added as
// it is decoded, without a dense copy. A new sum is charged to b. It
// returns the tensor's name. Once added, record (when not nil) is called
// before the round's lock is let go; when it fails, the update is taken
// out again and its error returned.
// A named peer's second update of a tensor in the round is refused
// (ErrDuplicate) before any of it is added, or, when it is the update
// counted (the same frame and weight), answered with errRepeated.
func (r *round) add(recv *gradient.Receiver, peer string, frame []byte, weight float32, b *budget.Budget, record func() error) (string, error) {
	var this counted
	if peer != "" {
		this = counted{sum: sha256.Sum256(frame), weight: weight}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", fmt.Errorf("%w: it ended while the update came", ErrRoundClosed)
	}
	var name string
	var created *budget.Charge // the sum this update made, taken out again when it is refused
	n, err := recv.Add(frame, weight, func(nm string, shape []int64) ([]float32, error) {
		name = nm
		if c, ok := r.from[peerTensor{peer, nm}]; peer != "" && ok {
			if c == this {
				return nil, errRepeated
			}
			return nil, fmt.Errorf("%w: %q from %q", ErrDuplicate, nm, peer)
		}
		s := r.sums[nm]
		if s == nil {
			var elems int64 = 1
			for _, d := range shape {
				elems *= d
			}
			if elems <= 0 || elems > codec.DefaultLimits().MaxTensorSize/4 {
				return nil, fmt.Errorf("%w: hub: tensor %q of shape %v", codec.ErrLimit, nm, shape)
			}
			ch, err := b.TryCharge(elems * 4)
			if err != nil {
				return nil, fmt.Errorf("hub: the sum of tensor %q: %w", nm, err)
			}
			r.charges = append(r.charges, ch)
			created = ch
			s = codec.FromFloat32(nm, make([]float32, elems), shape...)
			r.sums[nm] = s
		} else if !slices.Equal(s.Shape, shape) {
			return nil, fmt.Errorf("%w: hub: tensor %q: update of shape %v for a sum of shape %v", codec.ErrCorrupt, nm, shape, s.Shape)
		}
		v, _ := codec.View[float32](s)
		return v, nil
	})
	if err != nil {
		if created != nil {
			delete(r.sums, name)
			r.charges = slices.DeleteFunc(r.charges, func(c *budget.Charge) bool { return c == created })
			created.Release()
		}
		return name, err
	}
	if n != len(frame) {
		return name, fmt.Errorf("%w: hub: an upload message holds %d bytes after its frame", codec.ErrCorrupt, len(frame)-n)
	}
	if record != nil {
		if err := record(); err != nil {
			// Take it out: the client is told it was not counted.
			recv.Add(frame, -weight, func(nm string, _ []int64) ([]float32, error) {
				v, _ := codec.View[float32](r.sums[nm])
				return v, nil
			})
			return name, err
		}
	}
	r.counts[name]++
	r.weight[name] += float64(weight)
	if peer != "" {
		r.from[peerTensor{peer, name}] = this
	}
	return name, nil
}

// RoundSum is what a round's uploads add up to.
type RoundSum struct {
	Tensors []*codec.Tensor     // the weighted sums, float32, by name
	Counts  map[string]int      // updates counted per tensor
	Weights map[string]float64  // their total weight per tensor
	Peers   map[string][]string // the named peers whose update of the tensor was counted, sorted
}

// Sum returns a copy of round id's sums so far (ok false when nothing was
// uploaded for it).
func (h *Hub) Sum(id uint64) (RoundSum, bool) {
	h.mu.Lock()
	r := h.rounds[id]
	h.mu.Unlock()
	if r == nil {
		return RoundSum{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sumLocked(true), true
}

// sumLocked returns the round's sums (copies of them with clone), its
// counts, weights and peers; r.mu is held.
func (r *round) sumLocked(clone bool) RoundSum {
	out := RoundSum{Counts: map[string]int{}, Weights: map[string]float64{}, Peers: map[string][]string{}}
	for pt := range r.from {
		out.Peers[pt.tensor] = append(out.Peers[pt.tensor], pt.peer)
	}
	for _, ps := range out.Peers {
		slices.Sort(ps)
	}
	for name, s := range r.sums {
		c := *s
		if clone {
			c.Data = slices.Clone(s.Data)
		}
		out.Tensors = append(out.Tensors, &c)
		out.Counts[name] = r.counts[name]
		out.Weights[name] = r.weight[name]
	}
	slices.SortFunc(out.Tensors, func(a, b *codec.Tensor) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Counts returns how many updates of each tensor round id has counted
// so far (nil when none).
func (h *Hub) Counts(id uint64) map[string]int {
	h.mu.Lock()
	r := h.rounds[id]
	h.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

// CloseRound ends round id and every round before it: their updates from
// now on are refused (ErrRoundClosed, FailedPrecondition on the wire: the
// client keeps them in its residual), and round id's sum, with every
// update counted before the close, is returned (ok false when it has
// none) and forgotten, its memory given back to the budget. An update is
// either in the sum or refused, never both.
func (h *Hub) CloseRound(id uint64) (RoundSum, bool) {
	h.mu.Lock()
	h.closed = max(h.closed, id+1)
	var rs []*round
	for k, r := range h.rounds {
		if k <= id {
			rs = append(rs, r)
			if k < id {
				delete(h.rounds, k)
			}
		}
	}
	h.mu.Unlock()
	for _, r := range rs {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
	}
	h.mu.Lock()
	r := h.rounds[id]
	delete(h.rounds, id)
	h.mu.Unlock()
	for _, r := range rs {
		r.release()
	}
	if r == nil {
		return RoundSum{}, false
	}
	// Closed and forgotten: its tensors are the caller's, uncopied.
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sumLocked(false), true
}

// release gives the round's memory back to the budget.
func (r *round) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.charges {
		ch.Release()
	}
	r.charges = nil
}

// DropRound forgets round id's sums, giving their memory back to the
// budget.
func (h *Hub) DropRound(id uint64) {
	h.mu.Lock()
	r := h.rounds[id]
	delete(h.rounds, id)
	h.mu.Unlock()
	if r != nil {
		r.release()
	}
}

// Upload implements hubpb.HubServer: each message's frame is added into
// its round's sum and acknowledged, in order.
func (s *Server) Upload(st hubpb.Hub_UploadServer) (err error) {
	s.h.uploads.Add(1)
	defer s.h.uploads.Add(-1)
	u := &uploadStream{start: time.Now()}
	defer func() { s.h.logUpload(st.Context(), u, err) }()
	recv, err := gradient.NewReceiver(codec.WithLimits(s.h.upload))
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	for seq := uint64(1); ; seq++ {
		m, err := st.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		u.round = m.Round
		if err := s.h.addUpdate(recv, seq, m); err != nil {
			return err
		}
		u.updates++
		u.bytes += int64(len(m.Frame))
		if err := st.Send(&hubpb.UploadAck{Seq: seq}); err != nil {
			return err
		}
	}
}

// uploadStream is what an Upload stream has done, for its log line.
type uploadStream struct {
	start          time.Time
	round          uint64
	updates, bytes int64
}

// addUpdate adds upload message seq, m, into its round's sum: first the
// decoded size its frames' checked headers claim is charged to the
// budget (ResourceExhausted when it does not fit, or is more than the
// one frame an update is may hold), then it is decoded and added, then
// the charge is released.
func (h *Hub) addUpdate(recv *gradient.Receiver, seq uint64, m *hubpb.UploadMessage) error {
	if len(m.Frame) == 0 {
		h.badUpdates[0].Add(1)
		return status.Errorf(codes.InvalidArgument, "hub: upload message %d holds no frame", seq)
	}
	if err := checkWeight(m.Weight); err != nil {
		return h.refuseUpdate(seq, err)
	}
	claim, err := codec.DecodedSize(bytes.NewReader(m.Frame), h.upload)
	if err != nil {
		return h.refuseUpdate(seq, err)
	}
	if max := h.upload.MaxDecodedSize; claim > max {
		return h.refuseUpdate(seq, fmt.Errorf("%w: hub: the frames claim %d bytes decoded, more than one frame holds (%d)", codec.ErrLimit, claim, max))
	}
	ch, err := h.budget.TryCharge(claim)
	if err != nil {
		return h.refuseUpdate(seq, err)
	}
	defer ch.Release()
	if err := oneFrame(m.Frame, h.upload); err != nil {
		return h.refuseUpdate(seq, err)
	}
	w := weightOf(m)
	r, err := h.round(m.Round)
	if err == nil {
		h.mu.Lock()
		j := h.journal
		h.mu.Unlock()
		var record func() error
		if j != nil {
			record = func() error { return j.record(m) }
		}
		_, err = r.add(recv, m.Peer, m.Frame, w, h.budget, record)
	}
	if errors.Is(err, errRepeated) {
		h.repeatedUpdates.Add(1)
		return nil // acknowledged again, counted once
	}
	if err != nil {
		return h.refuseUpdate(seq, err)
	}
	h.updates.Add(1)
	h.updateBytes.Add(int64(len(m.Frame)))
	return nil
}

// ErrWeight is wrapped by the error of an update's weight that would not
// make a weighted mean: a NaN, an infinity or a negative weight (0 means
// 1). The hub refuses it with InvalidArgument; Upload before sending.
var ErrWeight = errors.New("hub: weight")

func checkWeight(w float32) error {
	if w < 0 || w-w != 0 {
		return fmt.Errorf("%w %v: want a finite weight, 0 or more (0 means 1)", ErrWeight, w)
	}
	return nil
}

// weightOf is an upload message's weight in the sum: 0 means 1.
func weightOf(m *hubpb.UploadMessage) float32 {
	if m.Weight == 0 {
		return 1
	}
	return m.Weight
}

// oneFrame checks, from its header alone, that an upload message is one
// frame of one tensor: a message of several frames, or a frame of several
// tensors, is refused (InvalidArgument) before any of it is decoded.
func oneFrame(frame []byte, lim codec.Limits) error {
	r := bytes.NewReader(frame)
	h, _, err := codec.ReadFrameHeader(r, r, lim, nil)
	if err != nil {
		return err
	}
	if n := h.FrameLen(); n != int64(len(frame)) {
		return fmt.Errorf("%w: hub: an update is one frame; this message holds %d bytes, its first frame %d", codec.ErrCorrupt, len(frame), n)
	}
	if len(h.Entries) != 1 {
		// An entry refused after another was added would leave that one
		// in the sum, the update not counted.
		return fmt.Errorf("%w: hub: an update is one tensor; this frame holds %d", codec.ErrCorrupt, len(h.Entries))
	}
	return nil
}

// refuseUpdate counts a refused update and returns its status: over the
// limits or the budget ResourceExhausted, else InvalidArgument.
func (h *Hub) refuseUpdate(seq uint64, err error) error {
	if errors.Is(err, ErrRoundClosed) {
		h.lateUpdates.Add(1)
		return status.Errorf(codes.FailedPrecondition, "hub: upload message %d: %v", seq, err)
	}
	if errors.Is(err, ErrDuplicate) {
		h.dupUpdates.Add(1)
		return status.Errorf(codes.AlreadyExists, "hub: upload message %d: %v", seq, err)
	}
	if errors.Is(err, codec.ErrLimit) || errors.Is(err, budget.ErrExhausted) {
		h.badUpdates[1].Add(1)
		return status.Errorf(codes.ResourceExhausted, "hub: upload message %d: %v", seq, err)
	}
	h.badUpdates[0].Add(1)
	return status.Errorf(codes.InvalidArgument, "hub: upload message %d: %v", seq, err)
}

// logUpload logs an upload's end at info.
func (h *Hub) logUpload(ctx context.Context, u *uploadStream, err error) {
	h.log.Info("upload", append([]any{"peer", peerName(ctx), "round", u.round, "updates", u.updates, "bytes", u.bytes,
		"duration", time.Since(u.start).Round(time.Millisecond)}, outcome(err)...)...)
}

// The updates in flight, unacknowledged, are at most uploadWindow, and
// more than one only while they hold at most uploadWindowBytes: what the
// hub may have to buffer per client.
const (
	uploadWindow      = 8
	uploadWindowBytes = 4 << 20
)

// UploadRequest says how a client's updates go to the hub.
type UploadRequest struct {
	Round  uint64  // the round whose sum the updates go into
	Weight float32 // their weight in the sum (0: 1)
	// Peer names who sends them: the hub counts one update per peer and
	// tensor in a round (a second is refused, AlreadyExists).
	Peer string
	// Spec compresses every update. When it is nil, Profile picks each
	// update's compressor: the first gradient compressor of the rule its
	// tensor matches, dense float32 where that rule lists none (or there
	// is no profile either); and the profile's device says where
	// (gradient.UseDevice: device auto or cuda puts ob's updates on the GPU where the program links package gpu).
	Spec    *gradient.Spec
	Profile *profile.Profile
	// Densities, if not nil, chooses each update's density (the share of
	// elements a sparsifier keeps) for the updates to reach the hub within
	// Within, all of them: each tensor's update has the share of Within
	// that its elements are of the upload's. Densities is an
	// autotune.Tuner made with the profile, whose link
	// estimate is the client's uplink (autotune.Link.SetRate with the rate
	// the client measured). A density it does not choose, or a compressor
	// without one, keeps the compressor's own; a density of 1 sends the
	// update whole, dense float32 with its residual (where the link is
	// not the bottleneck, compressing only costs time).
	Densities DensityChooser
	Within    time.Duration
	// OnCommit, if not nil, is called with each update's frame once the
	// hub has acknowledged it (counted it in the round's sum), before the
	// next acknowledgement is read: a client's own record of what it
	// committed.
	OnCommit func(frame []byte)
	// OnSend, if not nil, is called with each update's frame before it is
	// sent: with OnCommit, a client's record of what the hub may have
	// counted when the client dies before the acknowledgement comes.
	OnSend func(frame []byte)
}

// Recorded is a DensityChooser that records in Chosen the density it
// chose last for each tensor (a client's record of its densities).
type Recorded struct {
	DensityChooser
	Chosen map[string]float64
}

// Density chooses as r's chooser does and records the choice.
func (r *Recorded) Density(name string, dtype codec.DType, elements int64, tags codec.Tags, within time.Duration) (float64, bool) {
	d, ok := r.DensityChooser.Density(name, dtype, elements, tags, within)
	if ok {
		if r.Chosen == nil {
			r.Chosen = map[string]float64{}
		}
		r.Chosen[name] = d
	}
	return d, ok
}

// DensityChooser chooses the density of gradient updates from the link
// (autotune.Tuner): Density returns the density of the next update of a
// tensor, the largest whose frame reaches the hub within the given time
// (ok false: the compressor's own), and ObserveDensity learns from each
// frame made.
type DensityChooser interface {
	Density(name string, dtype codec.DType, elements int64, tags codec.Tags, within time.Duration) (density float64, ok bool)
	ObserveDensity(density float64, elements int64, frameBytes int)
}

// minObserved is the elements an update must keep for its frame to teach
// the DensityChooser the bytes an element costs: in smaller frames the
// header is most of it.
const minObserved = 1024

// density returns the density of update t of n elements, share of the
// upload's (0: its compressor's own).
func (r *UploadRequest) density(t *codec.Tensor, n int64, share float64) float64 {
	if r.Densities == nil || r.Within <= 0 {
		return 0
	}
	within := max(time.Duration(share*float64(r.Within)), time.Microsecond)
	d, ok := r.Densities.Density(t.Name, t.DType, n, t.Tags, within)
	if !ok {
		return 0
	}
	return d
}

// dense sends an update whole: float32, with no error feedback to keep.
var dense = must(gradient.Parse("none"))

func checkSpec(s string) error { _, err := gradient.Parse(s); return err }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// spec returns the compressor of update t.
func (r *UploadRequest) spec(t *codec.Tensor) *gradient.Spec {
	if r.Spec != nil {
		return r.Spec
	}
	if r.Profile != nil {
		if rule := r.Profile.Match(t.Name, t.DType, int64(len(t.Data)), t.Tags); len(rule.Gradients) > 0 {
			return must(gradient.Parse(rule.Gradients[0].Text)) // Upload checked them
		}
	}
	return dense
}

// Upload sends updates (whole float32 tensors: gradients or weight
// deltas) for req.Round to the hub behind c, each through ob, the error
// feedback of this client toward the hub (gradient.Peers keeps it across
// connections), compressed as req says at its own density. All updates
// are compressed (staged in ob) before the first is sent; each is
// committed in ob when the hub acknowledges it, and when the stream
// breaks the others are aborted: their residual keeps them whole, and the
// next upload of those tensors carries them. To retry a broken upload in
// the same round, with a named Peer, call Upload again with ob and zeros
// as the updates: the residual gives the same frames, and the hub
// acknowledges again those it had counted (their acknowledgement was
// lost) without counting them twice, and counts the others.
func Upload(ctx context.Context, c hubpb.HubClient, ob *gradient.Outbox, req UploadRequest, updates []*codec.Tensor) error {
	if err := checkWeight(req.Weight); err != nil {
		return err
	}
	if req.Profile != nil && req.Spec == nil {
		if err := req.Profile.CheckGradients(checkSpec); err != nil {
			return fmt.Errorf("hub: upload: %w", err)
		}
		if err := gradient.UseDevice(ob, string(req.Profile.Device)); err != nil {
			return fmt.Errorf("hub: upload: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.Upload(ctx)
	if err != nil {
		return err
	}
	defer ob.Abort() // whatever was not acknowledged
	// Every update is compressed (and staged in ob) before the first is
	// sent, so that when the stream breaks each one is either counted or
	// back in the residual, whatever the point of the break.
	u := &uploader{st: st, ob: ob, frames: make([][]byte, len(updates)), onCommit: req.OnCommit}
	elems := make([]int64, len(updates))
	var total int64
	for i, x := range updates {
		elems[i] = int64(len(x.Data) / max(x.DType.Size(), 1))
		total += elems[i]
	}
	// topk(r,model=on): the updates of one spec ranked together; a density
	// the request chooses for a tensor (Within) replaces its planned one.
	if err := ob.PlanEach(updates, req.spec); err != nil {
		return fmt.Errorf("hub: upload: %w", err)
	}
	for i, x := range updates {
		n := elems[i]
		d, spec := req.density(x, n, float64(n)/float64(max(total, 1))), req.spec(x)
		if d >= 1 {
			spec = dense
		}
		if u.frames[i], err = ob.Append(nil, x, spec, d); err != nil {
			return err
		}
		if d > 0 && d*float64(n) >= minObserved {
			req.Densities.ObserveDensity(d, n, len(u.frames[i]))
		}
	}
	if err := u.sendAll(req); err != nil {
		return err
	}
	return u.finish()
}

// uploader is the client's side of one Upload stream: the frames staged,
// how many were sent and acknowledged.
type uploader struct {
	st          hubpb.Hub_UploadClient
	ob          *gradient.Outbox
	frames      [][]byte
	sent, acked int
	onCommit    func([]byte)
}

// inflight is the bytes sent and not acknowledged.
func (u *uploader) inflight() int {
	n := 0
	for _, f := range u.frames[u.acked:u.sent] {
		n += len(f)
	}
	return n
}

// recvAck takes the next acknowledgement and commits its update in ob.
func (u *uploader) recvAck() error {
	a, err := u.st.Recv()
	if err != nil {
		return err
	}
	if a.Seq != uint64(u.acked+1) {
		return fmt.Errorf("%w: hub: acknowledgement %d after %d", codec.ErrCorrupt, a.Seq, u.acked)
	}
	u.ob.Accept(1)
	if u.onCommit != nil {
		u.onCommit(u.frames[u.acked])
	}
	u.acked++
	return nil
}

// sendAll sends every frame, keeping the window: at most uploadWindow
// unacknowledged, and more than one only within uploadWindowBytes.
func (u *uploader) sendAll(req UploadRequest) error {
	for _, frame := range u.frames {
		for u.sent > u.acked && (u.sent-u.acked >= uploadWindow || u.inflight()+len(frame) > uploadWindowBytes) {
			if err := u.recvAck(); err != nil {
				return err
			}
		}
		if req.OnSend != nil {
			req.OnSend(frame)
		}
		msg := &hubpb.UploadMessage{Round: req.Round, Weight: req.Weight, Peer: req.Peer, Frame: frame}
		if err := u.st.Send(msg); err != nil {
			if err == io.EOF {
				// The hub ended the stream: take the acknowledgements it
				// sent, then its status.
				for err = u.recvAck(); err == nil; err = u.recvAck() {
				}
				if err == io.EOF {
					err = fmt.Errorf("hub: upload: the hub ended the stream after %d of %d updates", u.acked, len(u.frames))
				}
			}
			return err
		}
		u.sent++
	}
	return nil
}

// finish closes the sending side and takes the acknowledgements left,
// then the end of the stream.
func (u *uploader) finish() error {
	if err := u.st.CloseSend(); err != nil {
		return err
	}
	for u.acked < u.sent {
		if err := u.recvAck(); err != nil {
			if err == io.EOF {
				err = fmt.Errorf("hub: upload: %d of %d updates acknowledged", u.acked, u.sent)
			}
			return err
		}
	}
	if _, err := u.st.Recv(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: hub: an acknowledgement beyond the updates", codec.ErrCorrupt)
		}
		return err
	}
	return nil
}
