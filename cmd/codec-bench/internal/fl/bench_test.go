package fl

import (
	"flag"
	"testing"
	"time"
)

// BenchmarkStep is one SGD step (forward, backward, momentum update) on a
// minibatch of 64 Fashion-MNIST images; one epoch is 938 of them.
func BenchmarkStep(b *testing.B) {
	train, _ := fashion(b)
	const batch = 64
	m := NewMLP(1)
	mom := make([]float32, NumParams)
	idx := make([]int, batch)
	b.SetBytes(batch * ImageSize * 4)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range idx {
			idx[j] = (i*batch + j) % train.N
		}
		m.gradientOf(train, idx)
		sgd(m.w, m.g, mom, 0.05, 0.9, 0, false)
	}
}

// BenchmarkEvaluate is the test-set accuracy of the 10000 test images.
func BenchmarkEvaluate(b *testing.B) {
	_, test := fashion(b)
	m := NewMLP(1)
	b.SetBytes(int64(len(test.X)) * 4)
	b.ReportAllocs()
	for b.Loop() {
		m.evaluate(test)
	}
}

// BenchmarkLoad is LoadFashionMNIST: gunzip and convert both sets.
func BenchmarkLoad(b *testing.B) {
	fashion(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := LoadFashionMNIST(DefaultDir); err != nil {
			b.Fatal(err)
		}
	}
}

var full = flag.Bool("fl.full", false, "run the full-data training runs (a minute or so)")

// TestFullRuns trains on all of Fashion-MNIST and logs the accuracy and
// time: go test ./cmd/codec-bench/internal/fl -run FullRuns -fl.full -v
func TestFullRuns(t *testing.T) {
	if !*full {
		t.Skip("needs -fl.full")
	}
	if raceEnabled {
		t.Skip("too slow under the race detector")
	}
	train, test := fashion(t)
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"plain SGD, 1 epoch", Config{Mode: SyncSGD, Clients: 1, Epochs: 1, Batch: 64, LR: 0.05, Momentum: 0.9, Seed: 1}},
		{"FedAvg, 10 IID clients", Config{Mode: FedAvg, Clients: 10, Rounds: 5, LocalEpochs: 1, Batch: 64, LR: 0.05, Momentum: 0.9, Seed: 1}},
		{"FedAvg, 10 Dirichlet(0.5) clients", Config{Mode: FedAvg, Clients: 10, Rounds: 5, LocalEpochs: 1, Batch: 64, LR: 0.05, Momentum: 0.9, Split: Dirichlet, Alpha: 0.5, Seed: 1}},
		{"SyncSGD, 4 workers", Config{Mode: SyncSGD, Clients: 4, Epochs: 3, Batch: 32, LR: 0.05, Momentum: 0.9, Seed: 1}},
	} {
		cfg := c.cfg
		cfg.Progress = func(p Progress) {
			t.Logf("%s: %d/%d accuracy %.4f loss %.4f, %d steps, %.1f MB, %v", c.name, p.Round, p.Rounds,
				p.Accuracy, p.Loss, p.Steps, float64(p.UpstreamBytes)/1e6, p.Elapsed.Round(time.Millisecond))
		}
		start := time.Now()
		res, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: accuracy %.4f in %v (%d steps per epoch)", c.name, res.Accuracy, time.Since(start).Round(time.Millisecond), res.StepsPerEpoch)
	}
}
