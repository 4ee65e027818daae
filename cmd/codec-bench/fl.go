package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/tensorfile"
)

const flText = `fl trains a 784-128-64-10 MLP on Fashion-MNIST (Debian's
dataset-fashion-mnist package) in a simulated federation and measures, per
gradient compressor, the test accuracy it keeps against the bytes its
clients send upstream. Every byte is counted from the real frames (headers
and indices included); the compressors keep error feedback per client.

--mode fedavg: every round each of --clients clients trains --local-epochs
over its shard starting from the server model and sends its update
(w_local - w); the server adds the weighted sum. --mode sgd: synchronous
data-parallel SGD with momentum; every step each of --clients workers sends
the gradient of its minibatch (DGC applies the momentum on the workers and
the server then steps without it).

Every compressor runs on the same --seeds (the same split, initial weights
and minibatch order per seed), and "none" (dense float32) is the baseline:
reduction is the baseline's upstream bytes over the compressor's. Results:
a table, --json rows (compressor, mode, accuracy, baseline_accuracy,
upstream_bytes, baseline_bytes, reduction, seeds, accuracy_sd, and for
warm-up schedules reduction_after_warmup, the reduction over the steps after
the warm-up), and --plot, accuracy against upstream bytes (SVG or PNG by
the file's extension). Accuracies are means over the seeds (sd: sample
standard deviation), in percent in the table and as fractions in JSON.

--compressors takes specs separated by ';' (see 'gradient.Parse'):
  none  topk(0.01)  topk(0.01,ef=off)  randk(0.01)  thresh(0.001)
  dgc(0.001,warmup=1)  powersgd(4)  efsign  qsgd(127)  int8(4096)
  and a tail recipe after '|': 'topk(0.01) | idx:delta,bitpack | val:fp16 | *:huff0'.
`

// Default compressor lists.
var (
	flFedAvgDefault = "none; topk(0.01) | *:raw; topk(0.01); topk(0.01,ef=off); " +
		"topk(0.01) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0; " +
		"bloom(0.01) | val:polyfit | val.perm:bitpack | *:huff0; powersgd(4); int8(4096)"
	flSGDDefault = "none; dgc(0.001,warmup=1); topk(0.001)"
)

type flRow struct {
	Compressor           string   `json:"compressor"`
	Mode                 string   `json:"mode"`
	Accuracy             float64  `json:"accuracy"`
	BaselineAccuracy     float64  `json:"baseline_accuracy"`
	UpstreamBytes        float64  `json:"upstream_bytes"`
	BaselineBytes        float64  `json:"baseline_bytes"`
	Reduction            float64  `json:"reduction"`
	Seeds                []uint64 `json:"seeds"`
	AccuracySD           float64  `json:"accuracy_sd"`
	ReductionAfterWarmup *float64 `json:"reduction_after_warmup,omitempty"`

	accs      []float64
	bytes     []float64
	stepBytes []float64 // mean bytes per step after the warm-up, per seed
	warmSteps int
	steps     int
}

func cmdFL(args []string, stdout, stderr io.Writer) error {
	f := newFlags("fl", "fl [flags]", flText, stderr)
	mode := f.String("mode", "fedavg", "`mode`: fedavg or sgd")
	comps := f.String("compressors", "", "compressor `specs` separated by ';' (default: a set per mode)")
	rounds := f.Int("rounds", 20, "FedAvg communication `rounds`")
	epochs := f.Int("epochs", 5, "SyncSGD `epochs`")
	clients := f.Int("clients", 0, "clients (fedavg, default 10) or workers (sgd, default 4)")
	localEpochs := f.Int("local-epochs", 1, "FedAvg local `epochs` per round")
	batch := f.Int("batch", 0, "minibatch `size` per client (default 64 for fedavg, 32 for sgd)")
	lr := f.Float64("lr", 0.05, "learning `rate`")
	momentum := f.Float64("momentum", 0.9, "SGD `momentum`")
	serverLR := f.Float64("server-lr", 1, "FedAvg: the server's step `size` on the round's weighted sum of updates")
	serverMom := f.Float64("server-momentum", 0, "FedAvg: the server's `momentum` (FedAvgM: the step is --server-lr times the sums' running momentum; 0: none)")
	nesterov := f.Bool("nesterov", false, "Nesterov momentum (clients in fedavg, the server in sgd; compare with dgc(...,nesterov=on))")
	split := f.String("split", "iid", "data `split`: iid or dirichlet")
	alpha := f.Float64("alpha", 0.5, "Dirichlet concentration for --split dirichlet")
	seeds := f.Int("seeds", 3, "`number` of seeds (1, 2, ...); every compressor runs on each")
	trainLimit := f.Int("train-limit", 0, "use the first `n` training images (0: all 60000)")
	testLimit := f.Int("test-limit", 0, "evaluate on the first `n` test images (0: all 10000)")
	data := f.String("data", fl.DefaultDir, "`directory` of the Fashion-MNIST IDX files")
	jsonOut := f.String("json", "", "write JSON rows to `file` ('-': stdout instead of the table)")
	plotOut := f.String("plot", "", "write the accuracy/bytes plot to `file` (.svg or .png)")
	snapshot := f.String("snapshot", "", "write the baseline's final weights (weights.safetensors) and client 0's last update (update.safetensors) of seed 1 to `directory`")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	cfg := fl.Config{
		Clients: *clients, Rounds: *rounds, Epochs: *epochs, LocalEpochs: *localEpochs, Batch: *batch,
		LR: float32(*lr), Momentum: float32(*momentum), Nesterov: *nesterov,
		TrainLimit: *trainLimit, TestLimit: *testLimit,
	}
	defComps, err := flSetMode(&cfg, *mode, *split, *alpha)
	if err != nil {
		return err
	}
	if err := flCheckFlags(f, cfg, *seeds); err != nil {
		return err
	}
	if cfg.Mode == fl.FedAvg {
		cfg.ServerLR, cfg.ServerMomentum = float32(*serverLR), float32(*serverMom)
	}
	if !f.isSet("compressors") {
		*comps = defComps
	}
	specs, err := parseSpecs(*comps)
	if err != nil {
		return usagef("--compressors: %v", err)
	}
	train, test, err := fl.LoadFashionMNIST(*data)
	if err != nil {
		return err
	}
	rows, err := flRun(cfg, specs, *seeds, train, test, *snapshot, stderr)
	if err != nil {
		return err
	}
	return writeFLOutputs(stdout, rows, cfg, *jsonOut, *plotOut)
}

// flSetMode sets the mode's and the split's settings and defaults in cfg
// and returns the mode's default compressors.
func flSetMode(cfg *fl.Config, mode, split string, alpha float64) (string, error) {
	defComps := flFedAvgDefault
	switch mode {
	case "fedavg":
		cfg.Mode = fl.FedAvg
		cfg.Epochs = 0
		cfg.Clients = orDefault(cfg.Clients, 10)
		cfg.Batch = orDefault(cfg.Batch, 64)
	case "sgd":
		cfg.Mode = fl.SyncSGD
		cfg.Rounds, cfg.LocalEpochs = 0, 0
		cfg.Clients = orDefault(cfg.Clients, 4)
		cfg.Batch = orDefault(cfg.Batch, 32)
		defComps = flSGDDefault
	default:
		return "", usagef("--mode %q: want fedavg or sgd", mode)
	}
	switch split {
	case "iid":
		cfg.Split = fl.IID
	case "dirichlet":
		cfg.Split, cfg.Alpha = fl.Dirichlet, alpha
	default:
		return "", usagef("--split %q: want iid or dirichlet", split)
	}
	return defComps, nil
}

// flCheckFlags refuses flags that do not go with the mode or split, and
// a number of seeds outside [1, 100].
// warmupOf is the epochs of c's density warm-up (DGC's, TopK's); 0: none.
func warmupOf(c gradient.Compressor) float64 {
	switch c := c.(type) {
	case *gradient.DGC:
		return c.Warmup
	case gradient.TopK:
		return c.Warmup
	}
	return 0
}

func flCheckFlags(f *flags, cfg fl.Config, seeds int) error {
	if cfg.Split != fl.Dirichlet && f.isSet("alpha") {
		return usagef("--alpha is for --split dirichlet")
	}
	if cfg.Mode == fl.SyncSGD && (f.isSet("rounds") || f.isSet("local-epochs")) {
		return usagef("--rounds and --local-epochs are for --mode fedavg; sgd runs --epochs")
	}
	if cfg.Mode == fl.FedAvg && f.isSet("epochs") {
		return usagef("--epochs is for --mode sgd; fedavg runs --rounds")
	}
	if cfg.Mode == fl.SyncSGD && (f.isSet("server-lr") || f.isSet("server-momentum")) {
		return usagef("--server-lr and --server-momentum are for --mode fedavg")
	}
	if seeds < 1 || seeds > 100 {
		return usagef("--seeds %d outside [1, 100]", seeds)
	}
	return nil
}

// writeFLOutputs writes the table (unless JSON goes to stdout), the JSON
// rows and the plot.
func writeFLOutputs(stdout io.Writer, rows []*flRow, cfg fl.Config, jsonOut, plotOut string) error {
	if jsonOut != "-" {
		writeFLTable(stdout, rows)
	}
	if jsonOut != "" {
		all := make([]any, len(rows))
		for i, r := range rows {
			all[i] = r
		}
		if err := writeJSONRows(jsonOut, stdout, all); err != nil {
			return err
		}
	}
	if plotOut != "" {
		if err := plotFL(plotOut, rows, cfg); err != nil {
			return err
		}
	}
	return nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// parseSpecs parses ';'-separated compressor specs and puts the baseline
// "none" first (adding it when missing).
func parseSpecs(s string) ([]*gradient.Spec, error) {
	var out []*gradient.Spec
	hasNone := false
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		sp, err := gradient.Parse(part)
		if err != nil {
			return nil, err
		}
		if sp.Compressor == (gradient.None{}) { // "none", "none(ef=off)": dense float32 either way
			if !hasNone {
				hasNone = true
				out = append([]*gradient.Spec{sp}, out...)
			}
			continue
		}
		out = append(out, sp)
	}
	if !hasNone {
		none, _ := gradient.Parse("none")
		out = append([]*gradient.Spec{none}, out...)
	}
	return out, nil
}

// flRun runs every spec on every seed, seeds in the outer loop so that a
// cut-short run has every compressor on the first seeds.
func flRun(cfg fl.Config, specs []*gradient.Spec, seeds int, train, test *fl.Dataset, snapshot string, stderr io.Writer) ([]*flRow, error) {
	rows := make([]*flRow, len(specs))
	for i, sp := range specs {
		rows[i] = &flRow{Compressor: sp.String(), Mode: cfg.Mode.String()}
	}
	total, done := seeds*len(specs), 0
	start := time.Now()
	for seed := 1; seed <= seeds; seed++ {
		for i, sp := range specs {
			c := cfg
			c.Seed = uint64(seed)
			var up fl.Uplink = fl.NewCompressed(sp, fl.NewMLP(0).Params())
			rec := &recorder{Compressed: up.(*fl.Compressed)}
			snap := snapshot != "" && seed == 1 && i == 0
			if snap {
				up = rec
			}
			res, err := fl.Run(c, train, test, up)
			if err != nil {
				return nil, fmt.Errorf("%s, seed %d: %w", sp, seed, err)
			}
			if snap {
				if err := writeSnapshot(snapshot, c, res, rec.last); err != nil {
					return nil, err
				}
			}
			done++
			r := rows[i]
			r.Seeds = append(r.Seeds, uint64(seed))
			r.accs = append(r.accs, res.Accuracy)
			r.bytes = append(r.bytes, float64(res.UpstreamBytes))
			r.steps = res.Steps
			if w := warmupOf(sp.Compressor); w > 0 {
				r.warmSteps = min(res.Steps, int(math.Ceil(w*float64(res.StepsPerEpoch))))
				var sum int64
				for _, b := range res.StepBytes[r.warmSteps:] {
					sum += b
				}
				if n := res.Steps - r.warmSteps; n > 0 {
					r.stepBytes = append(r.stepBytes, float64(sum)/float64(n))
				}
			}
			fmt.Fprintf(stderr, "fl: [%d/%d] seed %d %-40s accuracy %.2f%%  upstream %s  (%s)\n",
				done, total, seed, sp, 100*res.Accuracy, humanBytes(float64(res.UpstreamBytes)), time.Since(start).Round(time.Second))
		}
	}
	base := rows[0]
	baseAcc, _ := meanSD(base.accs)
	baseBytes, _ := meanSD(base.bytes)
	for _, r := range rows {
		r.Accuracy, r.AccuracySD = meanSD(r.accs)
		r.UpstreamBytes, _ = meanSD(r.bytes)
		r.BaselineAccuracy, r.BaselineBytes = baseAcc, baseBytes
		r.Reduction = baseBytes / r.UpstreamBytes
		if len(r.stepBytes) > 0 && r.steps > 0 {
			after, _ := meanSD(r.stepBytes)
			red := baseBytes / float64(r.steps) / after
			r.ReductionAfterWarmup = &red
		}
	}
	return rows, nil
}

func meanSD(v []float64) (mean, sd float64) {
	if len(v) == 0 {
		return 0, 0
	}
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) > 1 {
		for _, x := range v {
			sd += (x - mean) * (x - mean)
		}
		sd = math.Sqrt(sd / float64(len(v)-1))
	}
	return mean, sd
}

func humanBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

func writeFLTable(w io.Writer, rows []*flRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPRESSOR\tACCURACY %\tSD\tΔ BASELINE\tUPSTREAM\tREDUCTION\tAFTER WARM-UP\tSEEDS\t")
	for _, r := range rows {
		after := "-"
		if r.ReductionAfterWarmup != nil {
			after = fmt.Sprintf("%.1fx", *r.ReductionAfterWarmup)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%+.2f\t%s\t%.1fx\t%s\t%d\t\n", r.Compressor, 100*r.Accuracy, 100*r.AccuracySD,
			100*(r.Accuracy-r.BaselineAccuracy), humanBytes(r.UpstreamBytes), r.Reduction, after, len(r.Seeds))
	}
	tw.Flush()
}

// recorder keeps a copy of client 0's latest update as it passes.
type recorder struct {
	*fl.Compressed
	last [][]float32
}

func (r *recorder) Send(client, step int, update [][]float32, weight float32, sum [][]float32) (int64, error) {
	if client == 0 {
		if r.last == nil {
			r.last = make([][]float32, len(update))
		}
		for i, u := range update {
			r.last[i] = append(r.last[i][:0], u...)
		}
	}
	return r.Compressed.Send(client, step, update, weight, sum)
}

// writeSnapshot saves the final weights and client 0's last update as
// safetensors files, with the run's settings in their metadata.
func writeSnapshot(dir string, cfg fl.Config, res *fl.Result, update [][]float32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	meta := map[string]string{
		"producer": "codec-bench fl", "dataset": "Fashion-MNIST (Debian dataset-fashion-mnist)",
		"model": "MLP 784-128-64-10, ReLU", "mode": cfg.Mode.String(), "split": cfg.Split.String(),
		"clients": fmt.Sprint(cfg.Clients), "rounds": fmt.Sprint(cfg.Rounds), "epochs": fmt.Sprint(cfg.Epochs),
		"batch": fmt.Sprint(cfg.Batch), "lr": fmt.Sprint(cfg.LR), "momentum": fmt.Sprint(cfg.Momentum),
		"seed": fmt.Sprint(cfg.Seed), "test_accuracy": fmt.Sprintf("%.4f", res.Accuracy),
	}
	weights := res.Model.Snapshot()
	upd := make([]*codec.Tensor, len(weights))
	for i, w := range weights {
		upd[i] = codec.FromFloat32(w.Name, update[i], w.Shape...)
	}
	what := "update"
	if cfg.Mode == fl.SyncSGD {
		what = "gradient"
	}
	for _, f := range []struct {
		name string
		ts   []*codec.Tensor
		desc string
	}{
		{"weights.safetensors", weights, "the server model after the last round"},
		{"update.safetensors", upd, "client 0's last " + what + " (uncompressed)"},
	} {
		m := maps.Clone(meta)
		m["content"] = f.desc
		var buf bytes.Buffer
		if err := tensorfile.WriteSafetensors(&buf, f.ts, m); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
