package natsfan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
)

// Hierarchical FedAvg: each relay sums the uploads of its own clients
// (hub.RunPartial) and leaves one partial sum per round in a bucket of
// its own beside the versions' (OpenSumStore), as object "ROUND.RELAY":
// the float32 sums as tensorpress frames, lossless (rpc.ByClass: the sum
// of a few sparse updates is mostly zeros, and codes small), each
// tensor's count, weight and peers in its tags (SumCountTag,
// SumWeightTag, SumPeersTag). The origin waits for every relay's
// (WaitSums), adds them,
// and steps the model (hub.FedAvgConfig.Source): it receives one sum per
// relay and round instead of one update per client.

// The tags of a partial sum's tensors: the updates counted, their total
// weight, and the peers whose updates they are (comma-separated).
const (
	SumCountTag  = "tp.sum.count"
	SumWeightTag = "tp.sum.weight"
	SumPeersTag  = "tp.sum.peers"
)

// SumBucketSuffix is appended to the versions' bucket name for the sums'.
const SumBucketSuffix = "-sums"

// maxSumObject bounds a partial sum the origin reads.
const maxSumObject = 1 << 31

// OpenSumStore creates (or opens) the bucket of the partial sums beside
// cfg's bucket of versions.
func OpenSumStore(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.ObjectStore, error) {
	return openBucket(ctx, js, cfg, SumBucketSuffix, "tensorpress partial sums of federated rounds, one object per round and relay")
}

func sumName(round uint64, relay string) string { return strconv.FormatUint(round, 10) + "." + relay }

// PublishSum leaves relay's partial sum of round in store. The relay's
// name must be a plain name (letters, digits, '-', '_').
func PublishSum(ctx context.Context, store jetstream.ObjectStore, round uint64, relay string, sum hub.RoundSum) (int, error) {
	if relay == "" || strings.ContainsFunc(relay, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return 0, fmt.Errorf("natsfan: relay name %q: want letters, digits, '-' and '_'", relay)
	}
	ts := make([]*codec.Tensor, len(sum.Tensors))
	for i, t := range sum.Tensors {
		c := *t
		c.Tags.Extra = append(slices.Clip(t.Tags.Extra),
			codec.Tag{Key: SumCountTag, Value: strconv.Itoa(sum.Counts[t.Name])},
			codec.Tag{Key: SumWeightTag, Value: strconv.FormatFloat(sum.Weights[t.Name], 'g', -1, 64)},
			codec.Tag{Key: SumPeersTag, Value: strings.Join(sum.Peers[t.Name], ",")})
		ts[i] = &c
	}
	var b bytes.Buffer
	if err := encode(&b, Slice(ts)); err != nil {
		return 0, fmt.Errorf("natsfan: the sum of round %d: %w", round, err)
	}
	if _, err := store.PutBytes(ctx, sumName(round, relay), b.Bytes()); err != nil {
		return 0, fmt.Errorf("natsfan: the sum of round %d: %w", round, err)
	}
	return b.Len(), nil
}

// WaitSums waits until store, reached through js, holds the partial sums
// of round from n relays, polling every poll (default 20 ms), and returns
// them added together (counts, weights and peers merged) and their
// objects' bytes.
// A tensor whose shape differs between relays, or a peer counted by two,
// is an error.
func WaitSums(ctx context.Context, js jetstream.JetStream, store jetstream.ObjectStore, round uint64, n int, poll time.Duration) (hub.RoundSum, int64, error) {
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	prefix := strconv.FormatUint(round, 10) + "."
	var names []string
	for {
		infos, err := store.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			return hub.RoundSum{}, 0, fmt.Errorf("natsfan: sums of round %d: %w", round, err)
		}
		names = names[:0]
		for _, in := range infos {
			if strings.HasPrefix(in.Name, prefix) && !in.Deleted {
				names = append(names, in.Name)
			}
		}
		if len(names) >= n {
			break
		}
		select {
		case <-ctx.Done():
			return hub.RoundSum{}, 0, ctx.Err()
		case <-time.After(poll):
		}
	}
	slices.Sort(names)
	out := hub.RoundSum{Counts: map[string]int{}, Weights: map[string]float64{}, Peers: map[string][]string{}}
	sums := map[string]*codec.Tensor{}
	var total int64
	for _, name := range names {
		b, err := getListed(ctx, js, store, name, poll)
		if err != nil {
			return out, total, fmt.Errorf("natsfan: sum %s: %w", name, err)
		}
		total += int64(len(b))
		if err := addSum(&out, sums, b); err != nil {
			return out, total, fmt.Errorf("natsfan: sum %s: %w", name, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		out.Tensors = append(out.Tensors, sums[k])
	}
	for _, ps := range out.Peers {
		slices.Sort(ps)
		for i := 1; i < len(ps); i++ {
			if ps[i] == ps[i-1] {
				return out, total, fmt.Errorf("%w: natsfan: peer %q counted by two relays in round %d", codec.ErrCorrupt, ps[i], round)
			}
		}
	}
	return out, total, nil
}

// getListed gets an object a listing just showed: a replica that has not
// caught up may not have it yet (JetStream's direct gets are served by
// any replica), so "not found" is tried again for a while. Its size is
// checked against maxSumObject before a byte is read; the read ends with
// ctx, or after StallTimeout without a chunk (ObjectStore.GetBytes gave
// a context without a deadline 5 s for the whole object).
func getListed(ctx context.Context, js jetstream.JetStream, store jetstream.ObjectStore, name string, poll time.Duration) ([]byte, error) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		o, err := getObject(ctx, js, store, name)
		if err == nil {
			defer o.Close()
			if o.size > maxSumObject {
				return nil, fmt.Errorf("%w: a sum of %d bytes", codec.ErrLimit, o.size)
			}
			b := make([]byte, o.size)
			if _, err := io.ReadFull(o, b); err != nil {
				return nil, err
			}
			if _, err := o.Read(make([]byte, 1)); err != io.EOF { // the digest
				return nil, err
			}
			return b, nil
		}
		if !errors.Is(err, jetstream.ErrObjectNotFound) || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// addSum adds one relay's sum, tensorpress frames, into out (getListed
// bounded its size by maxSumObject before reading it).
func addSum(out *hub.RoundSum, sums map[string]*codec.Tensor, b []byte) error {
	ts, err := Decode(bytes.NewReader(b), codec.Limits{})
	if err != nil {
		return err
	}
	for _, t := range ts {
		v, err := codec.View[float32](t)
		if err != nil {
			return err
		}
		if s := sums[t.Name]; s == nil {
			c := *t
			c.Tags = codec.Tags{}
			sums[t.Name] = &c
		} else {
			if !slices.Equal(s.Shape, t.Shape) {
				return fmt.Errorf("%w: tensor %q of shape %v, %v in another sum", codec.ErrCorrupt, t.Name, t.Shape, s.Shape)
			}
			acc, _ := codec.View[float32](s)
			for i, x := range v {
				acc[i] += x
			}
		}
		tag := func(k string) string {
			for _, tg := range t.Tags.Extra {
				if tg.Key == k {
					return tg.Value
				}
			}
			return ""
		}
		c, err := strconv.Atoi(tag(SumCountTag))
		if err != nil || c < 0 {
			return fmt.Errorf("%w: tensor %q: count %q", codec.ErrCorrupt, t.Name, tag(SumCountTag))
		}
		w, err := strconv.ParseFloat(tag(SumWeightTag), 64)
		if err != nil || !(w >= 0) || math.IsInf(w, 1) {
			return fmt.Errorf("%w: tensor %q: weight %q", codec.ErrCorrupt, t.Name, tag(SumWeightTag))
		}
		out.Counts[t.Name] += c
		out.Weights[t.Name] += w
		if ps := tag(SumPeersTag); ps != "" {
			out.Peers[t.Name] = append(out.Peers[t.Name], strings.Split(ps, ",")...)
		}
	}
	return nil
}

// PruneSums deletes the partial sums of rounds before round.
func PruneSums(ctx context.Context, store jetstream.ObjectStore, round uint64) error {
	infos, err := store.List(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			return nil
		}
		return err
	}
	for _, in := range infos {
		r, _, ok := strings.Cut(in.Name, ".")
		if v, err := strconv.ParseUint(r, 10, 64); ok && err == nil && v < round && !in.Deleted {
			if err := store.Delete(ctx, in.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return err
			}
		}
	}
	return nil
}
