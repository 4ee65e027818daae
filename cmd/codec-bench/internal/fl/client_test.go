package fl

import (
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// TestClientMatchesRun checks that clients trained apart, their updates
// summed by weight, give the model Run gives after the same rounds: the
// federation of processes trains the same problem as the simulator.
func TestClientMatchesRun(t *testing.T) {
	train, test := synthetic(300, 1), synthetic(100, 2)
	for _, hidden := range [][2]int{{}, {24, 12}} {
		cfg := Config{Mode: FedAvg, Clients: 3, Rounds: 2, Batch: 16, LR: 0.05, Momentum: 0.9, Seed: 7,
			Split: Dirichlet, Alpha: 0.5, Hidden: hidden}
		res, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		var clients []*Client
		for c := range cfg.Clients {
			cl, err := NewClient(cfg, train, c)
			if err != nil {
				t.Fatal(err)
			}
			if cl.Samples() != res.ShardSizes[c] {
				t.Fatalf("client %d: %d samples, Run's shard %d", c, cl.Samples(), res.ShardSizes[c])
			}
			clients = append(clients, cl)
		}
		global := clients[0].NewModel(cfg.Seed)
		for range cfg.Rounds {
			sum := make([]float32, global.NumParams())
			for _, cl := range clients {
				up, _, err := cl.Train(global)
				if err != nil {
					t.Fatal(err)
				}
				off := 0
				for _, x := range up {
					v, _ := codec.View[float32](x)
					axpy(cl.Weight(), v, sum[off:off+len(v)])
					off += len(v)
				}
			}
			axpy(1, sum, global.w)
		}
		for i, w := range res.Model.w {
			if global.w[i] != w {
				t.Fatalf("hidden %v: weight %d: clients give %v, Run %v", hidden, i, global.w[i], w)
			}
		}
	}
	if _, err := NewClient(Config{Mode: FedAvg, Clients: 2, Rounds: 1, Batch: 1, LR: 1, Hidden: [2]int{-1, 3}}, train, 0); err == nil {
		t.Error("negative width accepted")
	}
	if _, err := NewClient(Config{Mode: FedAvg, Clients: 2, Rounds: 1, Batch: 1, LR: 1}, train, 2); err == nil {
		t.Error("client 2 of 2 accepted")
	}
}
