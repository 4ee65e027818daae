package natsfan

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
)

// openSums opens the sums' bucket, waiting for the cluster's JetStream.
func openSums(t *testing.T, js jetstream.JetStream) jetstream.ObjectStore {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := OpenSumStore(ctx, js, Config{Replicas: 3})
		cancel()
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHierarchicalFedAvg: an origin aggregates two rounds of 3 relays on
// a 3-node nats-server cluster, each relay summing 2 clients' uploads
// (TopK frames, added without densifying) and leaving one partial sum per
// round: the origin's sum of each round is the flat sum of the 6 clients'
// committed updates (to float32 rounding), made of 3 partial sums, and
// every version reaches the clients through the relays.
func TestHierarchicalFedAvg(t *testing.T) {
	nodes := startCluster(t, 3)
	onc, ojs := connect(t, urls(nodes))
	ost := openStore(t, ojs, 3)
	osums := openSums(t, ojs)
	pub := NewPublisher(onc, ost, 4, testLog())
	dir := t.TempDir()
	m := model(1, 3, 5000)
	if err := hub.WriteVersionDir(dir, 1, m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup // the relays' Run, until the end
	defer wg.Wait()
	defer cancel()
	var work sync.WaitGroup // the aggregator and the relays' sums

	origin, err := hub.New(hub.WithRetention(4))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var rounds []hub.RoundResult
	var sumBytes []int64
	work.Add(1)
	go func() {
		defer work.Done()
		err := hub.RunFedAvg(ctx, origin, hub.FedAvgConfig{Dir: dir, Rounds: 2, KeepSums: true,
			OnPublish: func(v uint64, model []*codec.Tensor) error { return pub.Publish(ctx, v, Slice(model)) },
			Source: func(ctx context.Context, round uint64) (hub.RoundSum, error) {
				s, n, err := WaitSums(ctx, ojs, osums, round, 3, 0)
				mu.Lock()
				sumBytes = append(sumBytes, n)
				mu.Unlock()
				return s, err
			},
			OnRound: func(r hub.RoundResult) { mu.Lock(); rounds = append(rounds, r); mu.Unlock() }})
		if err != nil {
			t.Error(err)
		}
	}()
	var relays []*relayHub
	for i := range 3 {
		nc, js := connect(t, nodes[i].url)
		r := startRelay(t, ctx, &wg, nc, openStore(t, js, 3))
		sums := openSums(t, js)
		relays = append(relays, r)
		work.Add(1)
		go func() {
			defer work.Done()
			err := hub.RunPartial(ctx, r.h, hub.PartialConfig{Clients: 2, Rounds: 2,
				Forward: func(ctx context.Context, round uint64, s hub.RoundSum) error {
					_, err := PublishSum(ctx, sums, round, fmt.Sprint("relay", i), s)
					return err
				}})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	// Six clients, two per relay; each keeps its committed frames.
	spec, _ := gradient.Parse("topk(0.1)")
	committed := make([][]committedFrame, 6)
	var cw sync.WaitGroup
	for c := range 6 {
		cw.Go(func() {
			r := relays[c/2]
			ob := gradient.NewOutbox(nil)
			for round := uint64(1); round <= 2; round++ {
				waitVersion(t, r, round)
				up := model(10+round*10+uint64(c), 3, 5000)
				w := float32(c + 1)
				req := hub.UploadRequest{Round: round, Weight: w, Peer: fmt.Sprint("client", c), Spec: spec,
					OnCommit: func(f []byte) { committed[c] = append(committed[c], committedFrame{round, w, f}) }}
				if err := hub.Upload(ctx, r.client, ob, req, up); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	cw.Wait()
	work.Wait()
	if t.Failed() {
		return
	}
	if len(rounds) != 2 || len(sumBytes) != 2 {
		t.Fatalf("%d rounds, %d sums read", len(rounds), len(sumBytes))
	}
	// The flat sum of every committed update, per round.
	recv, _ := gradient.NewReceiver()
	for round := uint64(1); round <= 2; round++ {
		flat := map[string][]float64{}
		for _, fs := range committed {
			for _, f := range fs {
				if f.round != round {
					continue
				}
				var buf []float32
				if _, err := recv.Add(f.frame, f.weight, func(name string, shape []int64) ([]float32, error) {
					buf = make([]float32, shape[0])
					return buf, nil
				}); err != nil {
					t.Fatal(err)
				}
				name, _ := frameName(f.frame)
				acc := flat[name]
				if acc == nil {
					acc = make([]float64, len(buf))
					flat[name] = acc
				}
				for i, x := range buf {
					acc[i] += float64(x)
				}
			}
		}
		sum := rounds[round-1].Sum
		var maxDiff, maxVal float64
		for _, s := range sum.Tensors {
			v, _ := codec.View[float32](s)
			for i, x := range v {
				maxDiff = math.Max(maxDiff, math.Abs(float64(x)-flat[s.Name][i]))
				maxVal = math.Max(maxVal, math.Abs(flat[s.Name][i]))
			}
			if sum.Counts[s.Name] != 6 || sum.Weights[s.Name] != 21 || len(sum.Peers[s.Name]) != 6 {
				t.Errorf("round %d, %s: %d updates of weight %v from %v", round, s.Name, sum.Counts[s.Name], sum.Weights[s.Name], sum.Peers[s.Name])
			}
		}
		t.Logf("round %d: the origin read 3 partial sums, %d bytes; its sum differs from the flat sum by %.1e of the largest value",
			round, sumBytes[round-1], maxDiff/maxVal)
		if len(sum.Tensors) != 3 || maxDiff > 1e-6*maxVal {
			t.Errorf("round %d: %d tensors, sum off the flat sum by %v (largest %v)", round, len(sum.Tensors), maxDiff, maxVal)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "3", "model.safetensors")); err != nil {
		t.Error(err)
	}
	if err := PruneSums(ctx, osums, 3); err != nil {
		t.Error(err)
	}
}

type committedFrame struct {
	round  uint64
	weight float32
	frame  []byte
}

func frameName(frame []byte) (string, error) {
	var name string
	recv, _ := gradient.NewReceiver()
	_, err := recv.Add(frame, 0, func(n string, shape []int64) ([]float32, error) {
		name = n
		return make([]float32, shape[0]), nil
	})
	return name, err
}

// FuzzAddSum: a partial sum of any bytes adds into the round's sum or
// fails with an error, never a panic.
func FuzzAddSum(f *testing.F) {
	var b bytes.Buffer
	ts := model(1, 2, 300)
	for _, t := range ts {
		t.Tags.Extra = []codec.Tag{{Key: SumCountTag, Value: "2"}, {Key: SumWeightTag, Value: "1.5"}, {Key: SumPeersTag, Value: "a,b"}}
	}
	if err := encode(&b, Slice(ts)); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:b.Len()/2])
	f.Fuzz(func(t *testing.T, in []byte) {
		out := hub.RoundSum{Counts: map[string]int{}, Weights: map[string]float64{}, Peers: map[string][]string{}}
		sums := map[string]*codec.Tensor{}
		if err := addSum(&out, sums, in); err != nil {
			return
		}
		if err := addSum(&out, sums, in); err != nil {
			return
		}
		for name, n := range out.Counts {
			if n < 0 || sums[name] == nil {
				t.Fatalf("%q: count %d", name, n)
			}
		}
	})
}
