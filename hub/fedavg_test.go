package hub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// fedClient runs one client of TestFedAvg for rounds: it waits for the
// round's version, fetches it and uploads the model's every value times
// add, weighted w.
func fedClient(ctx context.Context, c hubpb.HubClient, rounds []uint64, add, w float32) error {
	ob := gradient.NewOutbox(nil)
	for _, r := range rounds {
		var got []*codec.Tensor
		for {
			res, err := Fetch(ctx, c, Request{Version: r}, func(t *codec.Tensor) error { got = append(got, t); return nil })
			if err == nil && res.Version == r {
				break
			}
			if status.Code(err) != codes.NotFound {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		for _, t := range got {
			v, _ := codec.View[float32](t)
			for i := range v {
				v[i] = add
			}
		}
		if err := Upload(ctx, c, ob, UploadRequest{Round: r, Weight: w}, got); err != nil {
			return err
		}
	}
	return nil
}

// TestFedAvg runs two rounds of two clients through RunFedAvg: each
// version is the one before plus the weighted mean of the round's
// updates, written to the directory; an update to a closed round is
// refused (FailedPrecondition) and kept in the client's residual; an
// aggregator started again on the directory goes on from its newest
// version.
func TestFedAvg(t *testing.T) {
	dir := t.TempDir()
	m := model(3, 1)
	if err := WriteVersionDir(dir, 1, m); err != nil {
		t.Fatal(err)
	}
	if err := WriteVersionDir(dir, 1, m); err == nil {
		t.Fatal("version 1 written twice")
	}
	h, _ := New()
	c, _ := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var results []RoundResult
	done := make(chan error, 1)
	go func() {
		done <- RunFedAvg(ctx, h, FedAvgConfig{Dir: dir, Clients: 2, Rounds: 2, OnRound: func(r RoundResult) {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}})
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, add := range []float32{0.1, 0.2} {
		wg.Go(func() { errs <- fedClient(ctx, c, []uint64{1, 2}, add, float32(i+1)) })
	}
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(results) != 2 || results[0].Round != 1 || results[1].Version != 3 || results[0].Updates != 2 || results[1].ByDeadline {
		t.Fatalf("rounds: %+v", results)
	}
	v3, err := ReadVersion(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	const mean = (1*0.1 + 2*0.2) / 3.0
	for i, x := range v3 {
		want, _ := codec.View[float32](m[i])
		got, _ := codec.View[float32](x)
		for j := range got {
			if d := got[j] - (want[j] + 2*mean); d > 1e-6 || d < -1e-6 {
				t.Fatalf("%s[%d] = %v, want %v", x.Name, j, got[j], want[j]+2*mean)
			}
		}
	}

	// Round 2 is closed: an update for it is refused and stays whole in
	// the residual.
	ob := gradient.NewOutbox(nil)
	spec, _ := gradient.Parse("topk(0.5)")
	err = Upload(ctx, c, ob, UploadRequest{Round: 2, Spec: spec}, model(3, 2))
	if status.Code(err) != codes.FailedPrecondition || h.Stats().LateUpdates == 0 {
		t.Fatalf("update to a closed round: %v, %d late", err, h.Stats().LateUpdates)
	}
	if ob.Pending() != 0 {
		t.Fatalf("%d updates pending after a refused upload", ob.Pending())
	}

	// Started again on the directory: it serves version 3 (and 2, for
	// deltas) and aggregates round 3.
	h2, _ := New()
	c2, _ := serve(t, h2)
	done = make(chan error, 1)
	go func() { done <- RunFedAvg(ctx, h2, FedAvgConfig{Dir: dir, Clients: 1, Rounds: 3}) }()
	if err := fedClient(ctx, c2, []uint64{3}, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if vs, _ := Versions(dir); !slices.Equal(vs, []uint64{1, 2, 3, 4}) {
		t.Fatalf("versions %v", vs)
	}
	if vs := h2.Versions(); len(vs) != 3 || vs[2].Version != 2 {
		t.Fatalf("hub started again holds %+v", vs)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 5 || ents[0].Name() != ".journal-4" {
		t.Errorf("directory holds %v, want the 4 versions and the journal of round 4", ents)
	}
	if err := RunFedAvg(ctx, h2, FedAvgConfig{Dir: filepath.Join(dir, "none"), Clients: 1}); err == nil {
		t.Error("a missing directory: no error")
	}
	empty := t.TempDir()
	if err := RunFedAvg(ctx, h2, FedAvgConfig{Dir: empty, Clients: 1}); err == nil {
		t.Error("an empty directory: no error")
	}
	if err := RunFedAvg(ctx, h2, FedAvgConfig{Dir: dir}); err == nil {
		t.Error("no clients: no error")
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	h3, _ := New()
	if err := RunFedAvg(cctx, h3, FedAvgConfig{Dir: dir, Clients: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}

// fixedDensity is a DensityChooser that always chooses d and records the
// frames it is told of.
type fixedDensity struct {
	d      float64
	frames []int
	within []time.Duration
}

func (f *fixedDensity) Density(_ string, _ codec.DType, _ int64, _ codec.Tags, within time.Duration) (float64, bool) {
	f.within = append(f.within, within)
	return f.d, true
}
func (f *fixedDensity) ObserveDensity(_ float64, _ int64, n int) { f.frames = append(f.frames, n) }

// TestUploadDensities: a DensityChooser sets each update's density, and
// learns each frame's size.
func TestUploadDensities(t *testing.T) {
	h, _ := New()
	c, _ := serve(t, h)
	spec, _ := gradient.Parse("topk(0.01)")
	sent := func(ch DensityChooser) int64 {
		before := h.Stats().UpdateBytes
		var committed int64
		req := UploadRequest{Round: 1, Spec: spec, Densities: ch, Within: time.Second, OnCommit: func(f []byte) { committed += int64(len(f)) }}
		if err := Upload(context.Background(), c, gradient.NewOutbox(nil), req, grads(1)); err != nil {
			t.Fatal(err)
		}
		if n := h.Stats().UpdateBytes - before; n != committed {
			t.Fatalf("the hub counted %d bytes, OnCommit saw %d", n, committed)
		}
		return committed
	}
	own := sent(nil)
	fd := &fixedDensity{d: 0.2}
	dense := sent(fd)
	// 819 elements kept of 4096: too few for the frame to say what an
	// element costs (its header is most of it), so not observed.
	if dense < 10*own || len(fd.frames) != 0 {
		t.Fatalf("at density 0.2: %d bytes against %d at the compressor's 0.01; %d frames observed", dense, own, len(fd.frames))
	}
	// Density 1: the updates whole, float32, each observed.
	fd = &fixedDensity{d: 1}
	if whole := sent(fd); whole < 5*4096*4 || whole > 5*(4096*4+512) || len(fd.frames) != 5 {
		t.Fatalf("at density 1: %d bytes for 5 float32 updates of 4096, %d observed", whole, len(fd.frames))
	}
	// The 5 updates share the second: each of the same size has a fifth.
	if len(fd.within) != 5 || slices.ContainsFunc(fd.within, func(d time.Duration) bool { return d != 200*time.Millisecond }) {
		t.Errorf("the updates' times: %v, want 5 of 200ms", fd.within)
	}
}

// TestFedAvgJournal: an aggregator killed in the middle of a round (two of
// three updates acknowledged) and started again on its directory counts
// the two again from its journal, a torn record at the journal's end
// aside, and the round's sum is that of the three updates, each once.
func TestFedAvgJournal(t *testing.T) {
	dir := t.TempDir()
	m := model(3, 1)
	if err := WriteVersionDir(dir, 1, m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, _ := New()
	c, _ := serve(t, h)
	actx, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- RunFedAvg(actx, h, FedAvgConfig{Dir: dir, Clients: 3, Rounds: 1, KeepSums: true}) }()
	for i, add := range []float32{1, 2} {
		if err := fedClient(ctx, c, []uint64{1}, add, float32(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	kill()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The process died writing a third record.
	f, err := os.OpenFile(journalPath(dir, 1), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3, 4, 5})
	f.Close()

	h2, _ := New()
	c2, _ := serve(t, h2)
	go func() { done <- RunFedAvg(ctx, h2, FedAvgConfig{Dir: dir, Clients: 3, Rounds: 1, KeepSums: true}) }()
	if err := fedClient(ctx, c2, []uint64{1}, 3, 3); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	v2, err := ReadVersion(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	const mean = (1*1 + 2*2 + 3*3) / 6.0
	for i, x := range v2 {
		want, got := f32s(m[i]), f32s(x)
		for j := range got {
			if d := got[j] - (want[j] + mean); d > 1e-5 || d < -1e-5 {
				t.Fatalf("%s[%d] = %v, want %v", x.Name, j, got[j], want[j]+mean)
			}
		}
	}
	if vs, _ := Versions(dir); !slices.Equal(vs, []uint64{1, 2}) {
		t.Fatalf("versions %v", vs)
	}
	sf, err := tensorfile.OpenSafetensorsFile(filepath.Join(dir, "sums", "1.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	for _, x := range m {
		s, err := sf.Read(x.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range f32s(s) {
			if v != 14 {
				t.Fatalf("%s: sum %v, want 14", x.Name, v)
			}
		}
		if meta := sf.Metadata(); meta["count."+x.Name] != "3" || meta["weight."+x.Name] != "6" {
			t.Fatalf("metadata %v", meta)
		}
	}
	if _, err := os.Stat(journalPath(dir, 1)); !os.IsNotExist(err) {
		t.Errorf("the journal of round 1 is still there: %v", err)
	}
}

// TestUploadDuplicate: a peer's second, different update of a tensor in
// a round is refused (AlreadyExists) and not counted; the same update
// again (a retry) is acknowledged and not counted again; in another
// round, or from another peer, an update is counted.
func TestUploadDuplicate(t *testing.T) {
	h, _ := New()
	c, _ := serve(t, h)
	up := func(round uint64, peer string, ts []*codec.Tensor) error {
		return Upload(context.Background(), c, gradient.NewOutbox(nil), UploadRequest{Round: round, Peer: peer}, ts)
	}
	g, other := grads(1), grads(2)
	if err := up(1, "a", g[:2]); err != nil {
		t.Fatal(err)
	}
	if err := up(1, "a", []*codec.Tensor{other[1], g[2]}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a second update from the same peer: %v", err)
	}
	for _, err := range []error{up(1, "a", g[1:2]), up(1, "b", g[1:3]), up(2, "a", g[1:3]), up(1, "", g[:1]), up(1, "", g[:1])} {
		if err != nil {
			t.Fatal(err)
		}
	}
	sum, _ := h.Sum(1)
	st := h.Stats()
	if sum.Counts[g[0].Name] != 3 || sum.Counts[g[1].Name] != 2 || sum.Counts[g[2].Name] != 1 || st.DuplicateUpdates != 1 || st.RepeatedUpdates != 1 {
		t.Fatalf("counts %v, %d duplicates, %d repeated", sum.Counts, st.DuplicateUpdates, st.RepeatedUpdates)
	}
}

// TestUploadRetry: an upload whose acknowledgement was lost (the hub
// counted the update, the client's Outbox put it back in the residual)
// sent again from the residual, zeros as the new update, is acknowledged
// and counted once: the client commits it, and its residual is what the
// frame left out.
func TestUploadRetry(t *testing.T) {
	h, _ := New()
	c, _ := serve(t, h)
	ctx := context.Background()
	spec, _ := gradient.Parse("topk(0.1)")
	ob := gradient.NewOutbox(nil)
	g := grads(3)[0]
	frame, err := ob.Append(nil, g, spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt: counted, but the acknowledgement never reads.
	st, err := c.Upload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&hubpb.UploadMessage{Round: 1, Peer: "a", Frame: frame}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	ob.Abort()
	zeros := codec.FromFloat32(g.Name, make([]float32, 4096), g.Shape...)
	if err := Upload(ctx, c, ob, UploadRequest{Round: 1, Peer: "a", Spec: spec}, []*codec.Tensor{zeros}); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	sum, _ := h.Sum(1)
	if sum.Counts[g.Name] != 1 || h.Stats().RepeatedUpdates != 1 {
		t.Fatalf("counted %d times, %d repeated", sum.Counts[g.Name], h.Stats().RepeatedUpdates)
	}
	// What the residual holds now is what the frame left out: the sum
	// counted and the residual add up to the update.
	none, _ := gradient.Parse("none")
	rest, err := ob.Append(nil, zeros, none, 0)
	if err != nil {
		t.Fatal(err)
	}
	recv, _ := gradient.NewReceiver()
	res := make([]float32, 4096)
	if _, err := recv.Add(rest, 1, func(string, []int64) ([]float32, error) { return res, nil }); err != nil {
		t.Fatal(err)
	}
	counted, want := f32(t, sum.Tensors[0]), f32(t, g)
	for i := range want {
		if d := counted[i] + res[i] - want[i]; d > 1e-6 || d < -1e-6 {
			t.Fatalf("element %d: counted %v + residual %v, update %v", i, counted[i], res[i], want[i])
		}
	}
}

// TestUploadModelTopK: an upload through topk(r,model=on), by a spec or
// a profile's rule, ranks the updates together: the small tensor of
// large values goes whole, the large one keeps the rest of the model's k.
func TestUploadModelTopK(t *testing.T) {
	h, _ := New()
	c, _ := serve(t, h)
	prof, err := profile.Load([]byte("version: 1\nname: m\nrules:\n  - match: {dtype: f32}\n    gradient: [\"topk(0.01,model=on)\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := gradient.Parse("topk(0.01,model=on)")
	for round, req := range []UploadRequest{{Round: 1, Spec: spec}, {Round: 2, Profile: prof}} {
		big, small := make([]float32, 4096), make([]float32, 16)
		for i := range big {
			big[i] = 0.01 + float32(i)*1e-7
		}
		for i := range small {
			small[i] = 1
		}
		ob := gradient.NewOutbox(nil)
		ups := []*codec.Tensor{codec.FromFloat32("w", big, 64, 64), codec.FromFloat32("out", small, 4, 4)}
		if err := Upload(context.Background(), c, ob, req, ups); err != nil {
			t.Fatal(err)
		}
		// k = ceil(0.01*4112) = 42: out's 16 and 26 of w's.
		for name, want := range map[string]int{"w": 26, "out": 16} {
			sent := 0
			for _, r := range ob.Memory().Get(name).Residual() {
				if r == 0 {
					sent++
				}
			}
			if sent != want {
				t.Errorf("upload %d: %d elements of %s sent, want %d", round+1, sent, name, want)
			}
		}
	}
}

// TestStepTinyWeight: a round whose one update has a tiny weight steps
// the model by that update: lr over the total weight passes float32's
// range, so the step is taken in float64.
func TestStepTinyWeight(t *testing.T) {
	const w = 1e-40
	model := []*codec.Tensor{codec.FromFloat32("w", []float32{1, 2, 3, 4}, 4)}
	sum := RoundSum{
		Tensors: []*codec.Tensor{codec.FromFloat32("w", []float32{w * 0.5, w * -1, 0, w * 2}, 4)},
		Weights: map[string]float64{"w": float64(float32(w))},
	}
	got := f32(t, step(model, sum, 1)[0])
	for i, want := range []float32{1.5, 1, 3, 6} {
		if d := got[i] - want; d > 0.01 || d < -0.01 {
			t.Fatalf("stepped model %v, want about [1.5 1 3 6]", got)
		}
	}
}
