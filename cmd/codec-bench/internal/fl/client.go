package fl

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/tensorpress/tensorpress/codec"
)

// Client is one client of a FedAvg federation that runs apart from the
// server (its own process): given the round's global model it trains its
// shard and returns its update, exactly as Run's client of the same index
// does with the same Config (the same shard, minibatch order and steps),
// so that a federation of processes and Run train the same problem.
type Client struct {
	cfg    Config
	train  *Dataset
	perm   []int
	rng    *rand.Rand
	local  *MLP
	mom    []float32
	update []float32
	weight float32
}

// NewClient returns client c (0-based) of the federation cfg describes
// (Mode FedAvg) over train.
func NewClient(cfg Config, train *Dataset, c int) (*Client, error) {
	if cfg.Mode != FedAvg {
		return nil, fmt.Errorf("fl: client: mode %v, want FedAvg", cfg.Mode)
	}
	if cfg.LocalEpochs == 0 {
		cfg.LocalEpochs = 1
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if c < 0 || c >= cfg.Clients {
		return nil, fmt.Errorf("fl: client %d of %d", c, cfg.Clients)
	}
	train, err := limit(train, cfg.TrainLimit, "training")
	if err != nil {
		return nil, err
	}
	sh, err := shards(&cfg, train)
	if err != nil {
		return nil, err
	}
	local, err := newMLPHidden(cfg.Hidden)
	if err != nil {
		return nil, err
	}
	return &Client{
		cfg: cfg, train: train, perm: slices.Clone(sh[c]), rng: newRand(cfg.Seed, streamShuffle, uint64(c)),
		local: local, mom: make([]float32, len(local.w)), update: make([]float32, len(local.w)),
		weight: float32(float64(len(sh[c])) / float64(train.N)),
	}, nil
}

// Weight is the client's share of the training samples: its update's
// weight in the server's sum.
func (c *Client) Weight() float32 { return c.weight }

// Samples is the size of the client's shard.
func (c *Client) Samples() int { return len(c.perm) }

// NewModel returns a model of the federation's widths with weights from
// seed: the initial global model of a run with that seed.
func (c *Client) NewModel(seed uint64) *MLP {
	m := newMLPWidths(c.local.widths)
	m.Init(seed)
	return m
}

// Train runs the round's local epochs from the global model's weights and
// returns the update, w_local - w, as one float32 tensor per parameter
// (fresh tensors, named and shaped like the parameters), and the mean
// training loss over its minibatches.
func (c *Client) Train(global *MLP) ([]*codec.Tensor, float64, error) {
	if len(global.w) != len(c.local.w) || global.widths != c.local.widths {
		return nil, 0, fmt.Errorf("fl: client: a global model of widths %v, want %v", global.widths, c.local.widths)
	}
	cfg := &c.cfg
	c.local.CopyFrom(global)
	clear(c.mom)
	var loss float64
	var seen int
	p := c.perm
	for e := 0; e < cfg.LocalEpochs; e++ {
		c.rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		for lo := 0; lo < len(p); lo += cfg.Batch {
			idx := p[lo:min(lo+cfg.Batch, len(p))]
			loss += c.local.gradientOf(c.train, idx) * float64(len(idx))
			seen += len(idx)
			sgd(c.local.w, c.local.g, c.mom, cfg.LR, cfg.Momentum, cfg.WeightDecay, cfg.Nesterov)
		}
	}
	copy(c.update, c.local.w)
	axpy(-1, global.w, c.update)
	out := make([]*codec.Tensor, len(c.local.params))
	for i, v := range viewsOf(c.update, c.local.widths) {
		p := c.local.params[i]
		out[i] = codec.FromFloat32(p.Name, slices.Clone(v), slices.Clone(p.Shape)...)
	}
	return out, loss / float64(max(seen, 1)), nil
}
