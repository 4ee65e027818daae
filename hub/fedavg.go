package hub

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// FedAvgConfig is how RunFedAvg aggregates a federation.
type FedAvgConfig struct {
	// Dir is the versions directory: its newest version (1, 2, ...) is
	// the global model the next round trains from, and each round's
	// result is written there as the next version (a .safetensors file,
	// in place once whole), so that an aggregator started again goes on
	// from the last round it finished.
	Dir string
	// Clients is the quorum: a round ends once every tensor of the model
	// has this many updates counted.
	Clients int
	// Deadline, if positive, also ends a round that long after its
	// version was published, once every tensor has MinUpdates updates
	// (default 1): the clients that missed it carry their updates into a
	// later round through their residuals.
	Deadline   time.Duration
	MinUpdates int
	// ServerLR is the server's step on the round's mean update (the
	// weighted sum over the total weight counted; default 1).
	ServerLR float32
	// Rounds, if positive, ends the run once version Rounds+1 is
	// published.
	Rounds int
	// KeepSums writes each round's sum to Dir/sums/ROUND.safetensors (its
	// counts, weights and peers in the metadata: "count.T", "weight.T",
	// "peers.T" for tensor T): what the round counted, to check against
	// what the clients committed.
	KeepSums bool
	// Poll is how often the round's counts are looked at (default 5 ms).
	Poll time.Duration
	// OnRound, if not nil, is called after each round's version is
	// published, with the round's sum.
	OnRound func(RoundResult)
	// OnPublish, if not nil, is called with each version RunFedAvg
	// publishes, the first included, once it is in the hub: to publish it
	// further (to the NATS relays of a hierarchical federation).
	OnPublish func(v uint64, model []*codec.Tensor) error
	// Source, if not nil, gives each round's sum instead of the hub's own
	// uploads: the partial sums of relays that aggregate their clients
	// (hierarchical FedAvg), waited for until the source has them all.
	Source func(ctx context.Context, round uint64) (RoundSum, error)
	Log    *slog.Logger
}

// RoundResult is one round of RunFedAvg.
type RoundResult struct {
	Round      uint64 // the version the round's updates were trained from
	Version    uint64 // the version published with the round's step (Round+1)
	Updates    int    // the fewest updates of a tensor counted
	ByDeadline bool   // the deadline, not the quorum, ended the round
	Start      time.Time
	End        time.Time // when the version was published
	Sum        RoundSum
}

// RunFedAvg runs federated averaging on h: it publishes Dir's newest
// version (and the one before, for clients that fetch deltas against
// it), waits for the round's updates (uploaded with that version as
// their round), steps the model by ServerLR times their weighted mean,
// writes and publishes the result as the next version, and so on until
// Rounds or ctx ends. A tensor no update reached is kept as it was; a
// tensor that is not float32 is never stepped.
//
// Every update counted is first recorded in a journal in Dir (before the
// client is told), so that an aggregator started again on Dir, after a
// crash or a kill, counts again the updates its open round had
// acknowledged: an acknowledged update is never lost, nor counted twice.
func RunFedAvg(ctx context.Context, h *Hub, c FedAvgConfig) error {
	if c.Clients <= 0 && c.Source == nil {
		return fmt.Errorf("hub: fedavg: %d clients", c.Clients)
	}
	if c.MinUpdates <= 0 {
		c.MinUpdates = 1
	}
	if c.ServerLR == 0 {
		c.ServerLR = 1
	}
	if c.Poll <= 0 {
		c.Poll = 5 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	vs, err := Versions(c.Dir)
	if err != nil {
		return fmt.Errorf("hub: fedavg: %w", err)
	}
	if len(vs) == 0 {
		return fmt.Errorf("hub: fedavg: %s holds no version (1, 2, ...) to start from", c.Dir)
	}
	v := vs[len(vs)-1]
	if err := removeJournals(c.Dir, v); err != nil {
		return err
	}
	replayed, err := h.openJournal(journalPath(c.Dir, v), v)
	if err != nil {
		return err
	}
	defer h.closeJournalFile()
	if len(vs) > 1 {
		prev, err := ReadVersion(c.Dir, vs[len(vs)-2])
		if err != nil {
			return err
		}
		if err := h.Publish(vs[len(vs)-2], prev); err != nil {
			return err
		}
	}
	model, err := ReadVersion(c.Dir, v)
	if err != nil {
		return err
	}
	if err := h.Publish(v, model); err != nil {
		return err
	}
	if c.OnPublish != nil {
		if err := c.OnPublish(v, model); err != nil {
			return err
		}
	}
	c.Log.Info("fedavg: serving", "version", v, "tensors", len(model), "updates replayed", replayed)
	for c.Rounds <= 0 || v <= uint64(c.Rounds) {
		res := RoundResult{Round: v, Version: v + 1, Start: time.Now()}
		var sum RoundSum
		if c.Source != nil {
			if sum, err = c.Source(ctx, v); err != nil {
				return err
			}
			res.Updates = math.MaxInt
			for _, x := range model {
				res.Updates = min(res.Updates, sum.Counts[x.Name])
			}
		} else {
			names := make([]string, len(model))
			for i, x := range model {
				names[i] = x.Name
			}
			rc := roundWait{clients: c.Clients, deadline: c.Deadline, minUpdates: c.MinUpdates, poll: c.Poll}
			if err := rc.wait(ctx, h, names, &res); err != nil {
				return err
			}
			sum, _ = h.CloseRound(v)
		}
		res.Sum = sum
		if c.KeepSums {
			if err := writeSum(c.Dir, v, sum); err != nil {
				return err
			}
		}
		model = step(model, sum, c.ServerLR)
		if _, err := h.openJournal(journalPath(c.Dir, v+1), v+1); err != nil {
			return err
		}
		if err := WriteVersionDir(c.Dir, v+1, model); err != nil {
			return err
		}
		if err := os.Remove(journalPath(c.Dir, v)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("hub: fedavg: %w", err)
		}
		if err := h.Publish(v+1, model); err != nil {
			return err
		}
		if c.OnPublish != nil {
			if err := c.OnPublish(v+1, model); err != nil {
				return err
			}
		}
		res.End = time.Now()
		c.Log.Info("fedavg: round", "round", v, "updates", res.Updates, "deadline", res.ByDeadline,
			"took", res.End.Sub(res.Start).Round(time.Millisecond))
		if c.OnRound != nil {
			c.OnRound(res)
		}
		v++
	}
	return nil
}

// roundWait is when a round ends: at its quorum of updates of every
// tensor (clients), or at its deadline once every tensor has minUpdates.
type roundWait struct {
	clients, minUpdates int
	deadline, poll      time.Duration
}

// wait returns once round res.Round has its quorum of updates of every
// tensor named, or its deadline has passed with minUpdates of each, or
// ctx ends (its error).
func (c *roundWait) wait(ctx context.Context, h *Hub, names []string, res *RoundResult) error {
	if c.poll <= 0 {
		c.poll = 5 * time.Millisecond
	}
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for {
		counts := h.Counts(res.Round)
		least := math.MaxInt
		for _, n := range names {
			least = min(least, counts[n])
		}
		res.Updates = least
		if least >= c.clients {
			return nil
		}
		if c.deadline > 0 && least >= max(c.minUpdates, 1) && time.Since(res.Start) >= c.deadline {
			res.ByDeadline = true
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// PartialConfig is how RunPartial sums a relay's rounds.
type PartialConfig struct {
	// Clients is a round's quorum: updates of every tensor of its version.
	Clients int
	// Deadline, if positive, also ends a round that long after its
	// version came, once every tensor has MinUpdates updates (default 1).
	Deadline   time.Duration
	MinUpdates int
	// From is the first round (default 1); Rounds, if positive, the last.
	From, Rounds uint64
	// Forward receives each round's sum once the round is closed: to
	// send it on to the origin. An error ends the run.
	Forward func(ctx context.Context, round uint64, sum RoundSum) error
	Poll    time.Duration // default 5 ms
}

// RunPartial sums rounds on h for a relay of a hierarchical federation:
// for each round, in turn, it waits for the round's version (round N
// trains from version N, published into h by whoever relays the origin's
// versions), then for its quorum of uploads (or its deadline), closes it
// (CloseRound: late updates are refused, kept by their clients) and hands
// the sum to Forward. Sparse and quantized updates are added as they
// come, without a dense copy, as in any round of the hub.
func RunPartial(ctx context.Context, h *Hub, c PartialConfig) error {
	if c.Clients <= 0 {
		return fmt.Errorf("hub: partial sums: %d clients", c.Clients)
	}
	if c.Forward == nil {
		return fmt.Errorf("hub: partial sums: no Forward")
	}
	if c.From == 0 {
		c.From = 1
	}
	rw := roundWait{clients: c.Clients, deadline: c.Deadline, minUpdates: c.MinUpdates, poll: c.Poll}
	if rw.poll <= 0 {
		rw.poll = 5 * time.Millisecond
	}
	for v := c.From; c.Rounds == 0 || v <= c.Rounds; v++ {
		var names []string
		for {
			if ver, err := h.get(v); err == nil {
				for _, t := range ver.tensors {
					names = append(names, t.Name)
				}
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(rw.poll):
			}
		}
		res := RoundResult{Round: v, Start: time.Now()}
		if err := rw.wait(ctx, h, names, &res); err != nil {
			return err
		}
		sum, _ := h.CloseRound(v)
		if err := c.Forward(ctx, v, sum); err != nil {
			return err
		}
	}
	return nil
}

// step returns new tensors: model plus lr times the round's weighted mean
// update, per float32 tensor that has one.
func step(model []*codec.Tensor, sum RoundSum, lr float32) []*codec.Tensor {
	out := make([]*codec.Tensor, len(model))
	for i, x := range model {
		y := *x
		y.Data = slices.Clone(x.Data)
		out[i] = &y
		w := sum.Weights[x.Name]
		if x.DType != codec.F32 || !(w > 0) {
			continue
		}
		j := slices.IndexFunc(sum.Tensors, func(s *codec.Tensor) bool { return s.Name == x.Name })
		if j < 0 || !slices.Equal(sum.Tensors[j].Shape, x.Shape) {
			continue
		}
		d, _ := codec.View[float32](sum.Tensors[j])
		v, _ := codec.View[float32](&y)
		a := float64(lr) / w // in float64: a tiny total weight makes it pass float32's range
		for k := range v {
			v[k] += float32(a * float64(d[k]))
		}
	}
	return out
}

// journalPath is the journal of round v in dir.
func journalPath(dir string, v uint64) string {
	return filepath.Join(dir, fmt.Sprintf(".journal-%d", v))
}

// removeJournals removes the journals of rounds other than v: their
// versions are written, or they were opened for a version never written.
func removeJournals(dir string, v uint64) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("hub: fedavg: %w", err)
	}
	for _, e := range ents {
		var r uint64
		if n, _ := fmt.Sscanf(e.Name(), ".journal-%d", &r); n == 1 && r != v && !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("hub: fedavg: %w", err)
			}
		}
	}
	return nil
}

// writeSum writes round v's sum to dir/sums/v.safetensors.
func writeSum(dir string, v uint64, sum RoundSum) error {
	sd := filepath.Join(dir, "sums")
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return fmt.Errorf("hub: fedavg: %w", err)
	}
	meta := map[string]string{}
	for name, n := range sum.Counts {
		meta["count."+name] = strconv.Itoa(n)
		meta["weight."+name] = strconv.FormatFloat(sum.Weights[name], 'g', -1, 64)
		meta["peers."+name] = strings.Join(sum.Peers[name], ",")
	}
	tmp := filepath.Join(sd, fmt.Sprintf(".%d.tmp", v))
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("hub: fedavg: %w", err)
	}
	err = tensorfile.WriteSafetensors(f, sum.Tensors, meta)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(sd, fmt.Sprintf("%d.safetensors", v)))
	}
	if err != nil {
		return fmt.Errorf("hub: fedavg: round %d's sum: %w", v, err)
	}
	return nil
}

// ReadVersion reads version v of the versions directory dir, whole.
func ReadVersion(dir string, v uint64) ([]*codec.Tensor, error) {
	vd, err := OpenVersion(filepath.Join(dir, strconv.FormatUint(v, 10)))
	if err != nil {
		return nil, fmt.Errorf("hub: fedavg: %w", err)
	}
	var ts []*codec.Tensor
	for t, err := range vd.Tensors() {
		if err != nil {
			return nil, fmt.Errorf("hub: fedavg: version %d: %w", v, err)
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// WriteVersionDir writes tensors as version v of the versions directory
// dir (dir/v/model.safetensors): into a directory of its own that takes
// the version's name once the file is whole and synced, so that a reader
// (a Watcher, an aggregator started again) never sees half a version.
func WriteVersionDir(dir string, v uint64, tensors []*codec.Tensor) (err error) {
	name := strconv.FormatUint(v, 10)
	final := filepath.Join(dir, name)
	if _, err := os.Stat(final); err == nil {
		return fmt.Errorf("hub: version %d exists in %s", v, dir)
	}
	tmp, err := os.MkdirTemp(dir, "."+name+".")
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	f, err := os.Create(filepath.Join(tmp, "model.safetensors"))
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	err = tensorfile.WriteSafetensors(f, tensors, nil)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("hub: version %d: %w", v, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
