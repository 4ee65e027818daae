package main

import (
	"os"
	"testing"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
)

// BenchmarkHubDeltasFL measures the hub's lossless deltas on the global
// models of a FedAvg run (Fashion-MNIST, the MLP, 10 clients, IID, 20
// rounds of one local epoch, batch 64, lr 0.05, momentum 0.9, seed 1: the
// testvectors/fl run): for rounds 10 to 19, the frames of version r+1 as
// deltas against version r, against the hub's full lossless frames of
// version r+1; and a fine-tune that freezes the first layer (92% of the
// bytes), where only fc2 and fc3 change. About a minute:
//
//	go test -run '^$' -bench HubDeltasFL -benchtime 1x ./cmd/codec-bench
func BenchmarkHubDeltasFL(b *testing.B) {
	if _, err := os.Stat(fl.DefaultDir); err != nil {
		b.Skip("Fashion-MNIST not installed (make test installs dataset-fashion-mnist)")
	}
	train, test, err := fl.LoadFashionMNIST(fl.DefaultDir)
	if err != nil {
		b.Fatal(err)
	}
	var models [][]*codec.Tensor // after rounds 10 to 20
	cfg := fl.Config{Mode: fl.FedAvg, Clients: 10, Rounds: 20, Batch: 64, LR: 0.05, Momentum: 0.9, Seed: 1,
		Progress: func(p fl.Progress) {
			if p.Round >= 10 {
				var ts []*codec.Tensor
				for _, prm := range p.Model.Params() {
					ts = append(ts, codec.FromFloat32(prm.Name, append([]float32(nil), prm.W...), prm.Shape...))
				}
				models = append(models, ts)
			}
		}}
	if _, err := fl.Run(cfg, train, test, fl.Exact{}); err != nil {
		b.Fatal(err)
	}
	var full, delta, frozen int64
	for b.Loop() {
		full, delta, frozen = 0, 0, 0
		for r := 0; r+1 < len(models); r++ {
			f, err := hub.FrameBytes(models[r+1], nil)
			if err != nil {
				b.Fatal(err)
			}
			d, err := hub.FrameBytes(models[r+1], models[r])
			if err != nil {
				b.Fatal(err)
			}
			full += f
			delta += d
			// Frozen backbone: fc1 as in version r, the rest as in r+1.
			ft := append([]*codec.Tensor(nil), models[r+1]...)
			for i, t := range ft {
				if t.Name == "fc1.weight" || t.Name == "fc1.bias" {
					ft[i] = models[r][i]
				}
			}
			fr, err := hub.FrameBytes(ft, models[r])
			if err != nil {
				b.Fatal(err)
			}
			frozen += fr
		}
	}
	b.ReportMetric(float64(full)/float64(delta), "full/delta")
	b.ReportMetric(float64(frozen)/float64(full), "frozen/full")
	b.Logf("rounds 10-20: full %d bytes, deltas %d (%.3fx smaller); frozen first layer: %d bytes, %.1f%% of full",
		full, delta, float64(full)/float64(delta), frozen, 100*float64(frozen)/float64(full))
}
