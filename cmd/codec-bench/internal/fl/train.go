package fl

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/stat/distuv"
)

// Uplink carries each client's (worker's) update to the server. Send encodes
// update (one slice per parameter, in Params order; Send must not keep or modify
// them), adds weight times the update as the server decodes it into sum (same layout), and
// returns the bytes that went upstream.
//
// step is the 0-based round (FedAvg) or optimizer step (SyncSGD); within a
// step Run calls Send for clients 0, 1, ... in order, from one goroutine.
type Uplink interface {
	Send(client, step int, update [][]float32, weight float32, sum [][]float32) (bytes int64, err error)
}

// MomentumCorrector is implemented by uplinks that apply momentum on the
// workers before compressing, like Deep Gradient Compression's momentum
// correction. When CorrectsMomentum returns true, the SyncSGD server step
// is plain SGD on the sum (w -= lr·sum) instead of SGD with momentum.
// FedAvg ignores it.
type MomentumCorrector interface {
	CorrectsMomentum() bool
}

// EpochSetter is implemented by uplinks whose compressors follow a
// schedule (DGC's warm-up): Run calls SetEpoch before each step with the
// epoch reached so far, fractional within a SyncSGD epoch, the round
// number for FedAvg.
type EpochSetter interface {
	SetEpoch(epoch float64)
}

// Exact is the lossless baseline Uplink: it adds the update exactly and
// counts 4 bytes (one float32) per element.
type Exact struct{}

// Send adds weight×update to sum.
func (Exact) Send(client, step int, update [][]float32, weight float32, sum [][]float32) (int64, error) {
	if len(update) != len(sum) {
		return 0, fmt.Errorf("fl: exact uplink: %d update tensors for %d sums", len(update), len(sum))
	}
	var n int64
	for i, u := range update {
		s := sum[i]
		if len(s) != len(u) {
			return 0, fmt.Errorf("fl: exact uplink: tensor %d has %d elements, sum %d", i, len(u), len(s))
		}
		axpy(weight, u, s)
		n += 4 * int64(len(u))
	}
	return n, nil
}

// Mode selects the training algorithm.
type Mode int

const (
	// FedAvg is federated averaging (McMahan et al.): every round each
	// client trains locally from the server weights and uploads its change
	// in weights; the server adds their weighted mean.
	FedAvg Mode = iota + 1
	// SyncSGD is synchronous data-parallel SGD: every step each worker
	// uploads the gradient of one minibatch; the server takes an SGD step
	// with their mean.
	SyncSGD
)

func (m Mode) String() string {
	switch m {
	case FedAvg:
		return "FedAvg"
	case SyncSGD:
		return "SyncSGD"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Split selects how the training set is divided among clients.
type Split int

const (
	// IID shuffles the training set and cuts it into equal shards (sizes
	// differ by at most one).
	IID Split = iota
	// Dirichlet gives each client, for each class, a share of that class's
	// samples drawn from a symmetric Dirichlet(Alpha) distribution over the
	// clients: a small Alpha makes the clients' label histograms skewed.
	Dirichlet
)

func (s Split) String() string {
	switch s {
	case IID:
		return "IID"
	case Dirichlet:
		return "Dirichlet"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}

// Config describes a training run.
type Config struct {
	Mode    Mode
	Clients int // clients (FedAvg) or workers (SyncSGD)

	Rounds      int // FedAvg: communication rounds
	LocalEpochs int // FedAvg: local passes over the client's shard per round; 0 means 1
	Epochs      int // SyncSGD: passes over the largest shard

	Batch    int     // minibatch size per client or worker
	LR       float32 // learning rate
	ServerLR float32 // FedAvg: w += ServerLR * (the round's weighted sum of updates); 0 means 1
	// ServerMomentum is FedAvgM's: m = ServerMomentum*m + (the round's
	// weighted sum), w += ServerLR * m (0: none, plain FedAvg).
	ServerMomentum float32
	Momentum       float32 // SGD momentum in [0, 1), PyTorch semantics
	Nesterov       bool    // Nesterov momentum (PyTorch's nesterov=True)
	WeightDecay    float32 // L2 penalty added to the gradient

	Split Split
	Alpha float64 // Dirichlet concentration, for Split == Dirichlet

	// Hidden is the widths of the model's hidden layers ({0, 0}: 128 and
	// 64; Large: a model 12x that).
	Hidden [2]int

	// Seed fixes the split, the initial weights and every client's
	// minibatch order, each from its own PCG stream: runs with the same
	// Seed and different uplinks are paired.
	Seed uint64

	TrainLimit int // use only the first TrainLimit training samples; 0 means all
	TestLimit  int // evaluate on the first TestLimit test samples; 0 means all

	EvalEvery int // evaluate every EvalEvery rounds or epochs (and after the last); 0 means 1

	// Progress, if not nil, is called after every round or epoch.
	Progress func(Progress)
}

// Point records the state after one round (FedAvg) or epoch (SyncSGD).
type Point struct {
	Round         int     // 1-based round or epoch
	Steps         int     // uplink steps so far
	Evaluated     bool    // whether Accuracy was measured after this round
	Accuracy      float64 // test accuracy, when Evaluated
	Loss          float64 // mean training loss over this round's minibatches (before each step)
	UpstreamBytes int64   // cumulative bytes sent upstream
}

// Progress is passed to Config.Progress after every round or epoch.
type Progress struct {
	Point
	Rounds  int           // rounds or epochs in the run
	Elapsed time.Duration // since Run started
	// Model is the server's model after the round: read it during the
	// call only (Params copies it).
	Model *MLP
}

// Result is the outcome of a run.
type Result struct {
	Accuracy      float64 // final test accuracy
	History       []Point // one per round or epoch
	UpstreamBytes int64   // total bytes sent upstream
	// StepBytes[s] is the bytes all clients sent at step s: one entry per
	// round for FedAvg, per optimizer step for SyncSGD.
	StepBytes     []int64
	Steps         int   // len(StepBytes)
	StepsPerEpoch int   // SyncSGD: optimizer steps per epoch; FedAvg: 1
	Params        int   // number of model parameters
	ShardSizes    []int // training samples per client
	Model         *MLP  // final server model (see MLP.Snapshot)
}

// Stream identifiers of the PCG generators derived from Config.Seed.
const (
	streamSplit uint64 = iota + 1
	streamInit
	streamShuffle
)

// newRand returns a PCG generator for one use (stream, index) of seed.
func newRand(seed, stream, index uint64) *rand.Rand {
	return rand.New(rand.NewPCG(mix(seed^mix(stream)), mix(stream<<32^index)))
}

// mix is the splitmix64 finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("fl: config: "+format, args...)
	}
	switch c.Mode {
	case FedAvg:
		if c.Rounds <= 0 {
			return bad("FedAvg needs Rounds > 0, got %d", c.Rounds)
		}
		if c.LocalEpochs < 0 {
			return bad("LocalEpochs must not be negative, got %d", c.LocalEpochs)
		}
		if c.Epochs != 0 {
			return bad("Epochs is for SyncSGD; FedAvg runs Rounds of LocalEpochs")
		}
		if !(c.ServerLR >= 0 && c.ServerLR <= 10) {
			return bad("ServerLR must be in [0, 10], got %v", c.ServerLR)
		}
		if !(c.ServerMomentum >= 0 && c.ServerMomentum < 1) {
			return bad("ServerMomentum must be in [0, 1), got %v", c.ServerMomentum)
		}
	case SyncSGD:
		if c.Epochs <= 0 {
			return bad("SyncSGD needs Epochs > 0, got %d", c.Epochs)
		}
		if c.Rounds != 0 || c.LocalEpochs != 0 || c.ServerLR != 0 || c.ServerMomentum != 0 {
			return bad("Rounds, LocalEpochs, ServerLR and ServerMomentum are for FedAvg; SyncSGD runs Epochs")
		}
	default:
		return bad("Mode must be FedAvg or SyncSGD, got %v", c.Mode)
	}
	if c.Clients <= 0 {
		return bad("Clients must be positive, got %d", c.Clients)
	}
	if c.Batch <= 0 {
		return bad("Batch must be positive, got %d", c.Batch)
	}
	if !(c.LR > 0) || math.IsInf(float64(c.LR), 0) {
		return bad("LR must be positive and finite, got %v", c.LR)
	}
	if !(c.Momentum >= 0 && c.Momentum < 1) {
		return bad("Momentum must be in [0, 1), got %v", c.Momentum)
	}
	if !(c.WeightDecay >= 0) || math.IsInf(float64(c.WeightDecay), 0) {
		return bad("WeightDecay must be non-negative and finite, got %v", c.WeightDecay)
	}
	switch c.Split {
	case IID:
		if c.Alpha != 0 {
			return bad("Alpha is for the Dirichlet split")
		}
	case Dirichlet:
		if !(c.Alpha > 0) || math.IsInf(c.Alpha, 0) {
			return bad("Dirichlet split needs a positive, finite Alpha, got %v", c.Alpha)
		}
	default:
		return bad("Split must be IID or Dirichlet, got %v", c.Split)
	}
	if c.TrainLimit < 0 || c.TestLimit < 0 {
		return bad("TrainLimit and TestLimit must not be negative, got %d and %d", c.TrainLimit, c.TestLimit)
	}
	if c.EvalEvery < 0 {
		return bad("EvalEvery must not be negative, got %d", c.EvalEvery)
	}
	for _, h := range c.Hidden {
		if c.Hidden != ([2]int{}) && (h <= 0 || h > maxHidden) {
			return bad("Hidden widths %v: each must be in 1..%d", c.Hidden, maxHidden)
		}
	}
	return nil
}

// limit returns the first n samples of d (all when n is 0).
func limit(d *Dataset, n int, what string) (*Dataset, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%w (%s set)", err, what)
	}
	if n > d.N {
		return nil, fmt.Errorf("fl: config: %s limit %d exceeds the %d samples", what, n, d.N)
	}
	if n > 0 {
		d = d.head(n)
	}
	if d.N == 0 {
		return nil, fmt.Errorf("fl: empty %s set", what)
	}
	return d, nil
}

// Shards returns the indices into train of each client's samples, as Run
// splits them (after TrainLimit), each in increasing order. Every client
// gets at least one sample.
func Shards(cfg Config, train *Dataset) ([][]int, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	train, err := limit(train, cfg.TrainLimit, "training")
	if err != nil {
		return nil, err
	}
	return shards(&cfg, train)
}

func shards(cfg *Config, train *Dataset) ([][]int, error) {
	n, k := train.N, cfg.Clients
	if n < k {
		return nil, fmt.Errorf("fl: %d training samples cannot give each of %d clients one", n, k)
	}
	r := newRand(cfg.Seed, streamSplit, 0)
	var s [][]int
	switch cfg.Split {
	case IID:
		s = splitIID(n, k, r)
	case Dirichlet:
		s = splitDirichlet(train.Y, k, cfg.Alpha, r)
	}
	for _, sh := range s {
		slices.Sort(sh)
	}
	return s, nil
}

func splitIID(n, k int, r *rand.Rand) [][]int {
	perm := r.Perm(n)
	s := make([][]int, k)
	lo := 0
	for c := range s {
		hi := lo + n/k
		if c < n%k {
			hi++
		}
		s[c] = perm[lo:hi:hi]
		lo = hi
	}
	return s
}

func splitDirichlet(y []uint8, k int, alpha float64, r *rand.Rand) [][]int {
	var byClass [NumClasses][]int
	for i, c := range y {
		byClass[c] = append(byClass[c], i)
	}
	s := make([][]int, k)
	p := make([]float64, k)
	gamma := distuv.Gamma{Alpha: alpha, Beta: 1, Src: r}
	for _, idx := range byClass {
		if len(idx) == 0 {
			continue
		}
		r.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		var sum float64
		for c := range p {
			p[c] = gamma.Rand()
			sum += p[c]
		}
		if !(sum > 0) || math.IsInf(sum, 0) { // every draw underflowed (tiny alpha)
			clear(p)
			p[r.IntN(k)], sum = 1, 1
		}
		// Client c gets the samples between the cumulative shares c-1 and c.
		var cum float64
		lo := 0
		for c := range p {
			cum += p[c]
			hi := int(cum / sum * float64(len(idx)))
			if c == k-1 {
				hi = len(idx)
			}
			hi = min(max(hi, lo), len(idx))
			s[c] = append(s[c], idx[lo:hi]...)
			lo = hi
		}
	}
	// Give every empty client one sample of the (first) largest client,
	// which has at least two since there are at least k samples.
	for c := range s {
		if len(s[c]) > 0 {
			continue
		}
		big := 0
		for j := range s {
			if len(s[j]) > len(s[big]) {
				big = j
			}
		}
		last := len(s[big]) - 1
		s[c] = append(s[c], s[big][last])
		s[big] = s[big][:last]
	}
	return s
}

// views cuts flat into one slice per parameter, in Params order.
func views(flat []float32) [][]float32 { return viewsOf(flat, widths) }

// viewsOf is views for a model of the given layer widths.
func viewsOf(flat []float32, widths [4]int) [][]float32 {
	v := make([][]float32, 0, 6)
	off := 0
	for l := 0; l < 3; l++ {
		for _, n := range [2]int{widths[l] * widths[l+1], widths[l+1]} {
			v = append(v, flat[off:off+n:off+n])
			off += n
		}
	}
	return v
}

// sgd takes one PyTorch SGD step on w with gradient g and momentum buffer
// v: g += wd·w; v = m·v + g; w -= lr·v (w -= lr·g without momentum), in
// float32 and in PyTorch's order of operations. It overwrites g.
func sgd(w, g, v []float32, lr, m, wd float32, nesterov bool) {
	if wd != 0 {
		axpy(wd, w, g)
	}
	if m != 0 {
		axpy(m, v, g) // g + m·v = m·v + g, the new v
		if nesterov {
			// PyTorch's Nesterov step: w -= lr·(g + m·v_new), which is
			// (1+m)·v_new - m·v_old with g overwritten by v_new.
			axpy(-lr*(1+m), g, w)
			axpy(lr*m, v, w)
			copy(v, g)
			return
		}
		copy(v, g)
	}
	axpy(-lr, g, w) // w + (-lr)·g = w - lr·g
}

// axpy sets y += a·x, with gonum's vector kernel.
func axpy(a float32, x, y []float32) {
	blas32.Implementation().Saxpy(len(x), a, x, 1, y, 1)
}

// runner holds the state shared by both training loops.
type runner struct {
	cfg         Config
	train, test *Dataset
	up          Uplink
	perm        [][]int      // each client's current minibatch order
	rng         []*rand.Rand // each client's shuffle stream
	model       *MLP         // server model
	sum         []float32
	sumV        [][]float32
	res         *Result
	start       time.Time
}

// Run trains a model as cfg describes, on train, sending every client
// update through up, and evaluates it on test. A failing Send ends the run
// with its error.
func Run(cfg Config, train, test *Dataset, up Uplink) (*Result, error) {
	start := time.Now()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if up == nil {
		return nil, errors.New("fl: nil uplink")
	}
	if cfg.LocalEpochs == 0 && cfg.Mode == FedAvg {
		cfg.LocalEpochs = 1
	}
	if cfg.EvalEvery == 0 {
		cfg.EvalEvery = 1
	}
	train, err := limit(train, cfg.TrainLimit, "training")
	if err != nil {
		return nil, err
	}
	test, err = limit(test, cfg.TestLimit, "test")
	if err != nil {
		return nil, err
	}
	sh, err := shards(&cfg, train)
	if err != nil {
		return nil, err
	}
	model, err := NewMLPHidden(cfg.Seed, cfg.Hidden)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, train: train, test: test, up: up, start: start,
		model: model, sum: make([]float32, model.NumParams())}
	r.sumV = viewsOf(r.sum, model.widths)
	for c, s := range sh {
		r.perm = append(r.perm, slices.Clone(s))
		r.rng = append(r.rng, newRand(cfg.Seed, streamShuffle, uint64(c)))
	}
	r.res = &Result{Params: model.NumParams(), Model: r.model}
	for _, s := range sh {
		r.res.ShardSizes = append(r.res.ShardSizes, len(s))
	}
	if cfg.Mode == FedAvg {
		err = r.fedAvg()
	} else {
		err = r.syncSGD()
	}
	if err != nil {
		return nil, err
	}
	return r.res, nil
}

func (r *runner) shuffle(c int) {
	p := r.perm[c]
	r.rng[c].Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
}

// send passes one client's update to the uplink and accounts its bytes.
func (r *runner) send(c, step int, update [][]float32, weight float32) (int64, error) {
	what := "round"
	if r.cfg.Mode == SyncSGD {
		what = "step"
	}
	n, err := r.up.Send(c, step, update, weight, r.sumV)
	if err != nil {
		return 0, fmt.Errorf("fl: %s %d, client %d: uplink: %w", what, step, c, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("fl: %s %d, client %d: uplink reported %d bytes", what, step, c, n)
	}
	return n, nil
}

func (r *runner) setEpoch(e float64) {
	if es, ok := r.up.(EpochSetter); ok {
		es.SetEpoch(e)
	}
}

// endRound records the round's point, evaluating when due.
func (r *runner) endRound(round, rounds int, loss float64) {
	res := r.res
	pt := Point{Round: round, Steps: res.Steps, Loss: loss, UpstreamBytes: res.UpstreamBytes}
	if round%r.cfg.EvalEvery == 0 || round == rounds {
		pt.Evaluated = true
		pt.Accuracy = r.model.evaluate(r.test)
		res.Accuracy = pt.Accuracy
	}
	res.History = append(res.History, pt)
	if r.cfg.Progress != nil {
		r.cfg.Progress(Progress{Point: pt, Rounds: rounds, Elapsed: time.Since(r.start), Model: r.model})
	}
}

func (r *runner) fedAvg() error {
	cfg := &r.cfg
	local := newMLPWidths(r.model.widths)
	update := make([]float32, len(local.w))
	updateV := viewsOf(update, local.widths)
	mom := make([]float32, len(local.w))
	var serverMom []float32 // FedAvgM
	if cfg.ServerMomentum > 0 {
		serverMom = make([]float32, len(local.w))
	}
	total := float64(r.train.N)
	r.res.StepsPerEpoch = 1
	for round := 0; round < cfg.Rounds; round++ {
		clear(r.sum)
		r.setEpoch(float64(round))
		var bytes int64
		var loss float64
		var seen int
		for c, p := range r.perm {
			local.CopyFrom(r.model)
			clear(mom)
			for e := 0; e < cfg.LocalEpochs; e++ {
				r.shuffle(c)
				for lo := 0; lo < len(p); lo += cfg.Batch {
					idx := p[lo:min(lo+cfg.Batch, len(p))]
					loss += local.gradientOf(r.train, idx) * float64(len(idx))
					seen += len(idx)
					sgd(local.w, local.g, mom, cfg.LR, cfg.Momentum, cfg.WeightDecay, cfg.Nesterov)
				}
			}
			copy(update, local.w)
			axpy(-1, r.model.w, update) // w_local - w

			n, err := r.send(c, round, updateV, float32(float64(len(p))/total))
			if err != nil {
				return err
			}
			bytes += n
		}
		step := cfg.ServerLR
		if step == 0 {
			step = 1
		}
		if serverMom != nil {
			for i := range serverMom {
				serverMom[i] = cfg.ServerMomentum*serverMom[i] + r.sum[i]
			}
			axpy(step, serverMom, r.model.w)
		} else {
			axpy(step, r.sum, r.model.w)
		}
		r.res.StepBytes = append(r.res.StepBytes, bytes)
		r.res.UpstreamBytes += bytes
		r.res.Steps++
		r.endRound(round+1, cfg.Rounds, loss/float64(seen))
	}
	return nil
}

func (r *runner) syncSGD() error {
	cfg := &r.cfg
	m := r.model
	gradV := viewsOf(m.g, m.widths)
	// The server's momentum, unless the workers apply it.
	momentum := cfg.Momentum
	if mc, ok := r.up.(MomentumCorrector); ok && mc.CorrectsMomentum() {
		momentum = 0
	}
	var mom []float32
	if momentum != 0 {
		mom = make([]float32, len(m.w))
	}
	largest := 0
	pos := make([]int, len(r.perm))
	for c, p := range r.perm {
		largest = max(largest, len(p))
		pos[c] = len(p) // shuffle before the first step
	}
	steps := (largest + cfg.Batch - 1) / cfg.Batch
	r.res.StepsPerEpoch = steps
	weight := float32(1 / float64(len(r.perm)))
	for epoch := 0; epoch < cfg.Epochs; epoch++ {
		var loss float64
		var seen int
		for s := 0; s < steps; s++ {
			step := epoch*steps + s
			clear(r.sum)
			r.setEpoch(float64(epoch) + float64(s)/float64(steps))
			var bytes int64
			for c, p := range r.perm {
				if pos[c] == len(p) {
					r.shuffle(c)
					pos[c] = 0
				}
				idx := p[pos[c]:min(pos[c]+cfg.Batch, len(p))]
				pos[c] += len(idx)
				loss += m.gradientOf(r.train, idx) * float64(len(idx))
				seen += len(idx)
				if cfg.WeightDecay != 0 {
					axpy(cfg.WeightDecay, m.w, m.g)
				}
				n, err := r.send(c, step, gradV, weight)
				if err != nil {
					return err
				}
				bytes += n
			}
			sgd(m.w, r.sum, mom, cfg.LR, momentum, 0, cfg.Nesterov)
			r.res.StepBytes = append(r.res.StepBytes, bytes)
			r.res.UpstreamBytes += bytes
			r.res.Steps++
		}
		r.endRound(epoch+1, cfg.Epochs, loss/float64(seen))
	}
	return nil
}
