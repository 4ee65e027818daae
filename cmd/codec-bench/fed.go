package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/internal/rateplot"
)

const fedText = `fed runs a federation of processes and measures the time each way of
moving the model and its updates takes to reach an accuracy: one hub
process, the aggregator (hub.RunFedAvg: each round's global model is a
version, the uploads are summed as they come, the model steps once the
quorum or the round's deadline is reached, and the version is written to
disk), and --clients client processes that each fetch the round's version
over their own link, train the MLP on their shard of Fashion-MNIST
(Debian's dataset-fashion-mnist) and upload their update through the row's
gradient compressor, with error feedback committed on the hub's
acknowledgement. Every part goes through the real gRPC hub on loopback;
each client's link is simulated (--down, --up, --rtt) in its process.

Rows (--rows, separated by ';'):
  rpc         dense float32, one RPC per tensor both ways (OpenFL before batching)
  dense       dense float32 through the hub: fetches as lossless deltas against the version held
  flare-int8  NVIDIA FLARE's blockwise int8 filter both ways (the whole model down, the update up; no error feedback)
  flare-fp16  FLARE's fp16 filter both ways
  tp:SPEC     uploads through gradient compressor SPEC, fetches as lossy deltas (--down-recipe)
  auto:SPEC   SPEC at the density the autotuner chooses from the uplink each client measures, for an
              update to arrive within --within (densities --densities); fetches as tp: rows
Per row and seed: the test accuracy of every version against the wall time
it was published, the time to the target (--target, default the first
row's final accuracy less 1 point), bytes up and down, and the hub
process's CPU time and peak RSS. --rate-drop divides the first clients'
links for some rounds, to show the autotuner follow.
`

const fedRowsDefault = "dense; rpc; flare-int8; tp:topk(0.01,warmup=12) | idx:delta,bitpack | val:nf4(64) | *:huff0; " +
	"auto:topk(0.01) | idx:delta,bitpack | val:nf4(64) | *:huff0"

// fedResult is one row on one seed.
type fedResult struct {
	Row         string      `json:"row"`
	Seed        uint64      `json:"seed"`
	Accuracy    float64     `json:"accuracy"`   // final
	Times       []float64   `json:"times"`      // seconds from the start to each version's publication (version 1: 0)
	Accuracies  []float64   `json:"accuracies"` // each version's test accuracy
	BytesUp     int64       `json:"bytes_up"`   // all clients, all rounds
	BytesDown   int64       `json:"bytes_down"`
	HubCPU      float64     `json:"hub_cpu_seconds"`
	HubPeakRSS  int64       `json:"hub_peak_rss"`
	Late        int         `json:"late_updates"` // client rounds whose update came after the round closed
	Wall        float64     `json:"wall_seconds"`
	Densities   [][]float64 `json:"densities,omitempty"` // auto: per round, each client's density
	UpRates     [][]float64 `json:"uplink_estimates,omitempty"`
	PhaseMeans  [3]float64  `json:"phase_seconds"` // mean fetch, train, upload per client round
	clientLines [][]fedClientLine
}

func cmdFed(args []string, stdout, stderr io.Writer) error {
	f := newFlags("fed", "fed [flags]", fedText, stderr)
	rowsFlag := f.String("rows", fedRowsDefault, "`rows` separated by ';'")
	clients := f.Int("clients", 8, "client `processes`")
	rounds := f.Int("rounds", 20, "FedAvg `rounds`")
	seeds := f.Int("seeds", 1, "`number` of seeds (1, 2, ...); every row runs on each")
	model := f.String("model", "small", "`model`: small (784-128-64-10, 109386 parameters) or large (784-1024-512-10, 1333770)")
	split := f.String("split", "iid", "data `split`: iid or dirichlet")
	alpha := f.Float64("alpha", 0.5, "Dirichlet concentration for --split dirichlet")
	lr := f.Float64("lr", 0.05, "clients' learning `rate`")
	momentum := f.Float64("momentum", 0.9, "clients' SGD `momentum`")
	batch := f.Int("batch", 64, "minibatch `size`")
	localEpochs := f.Int("local-epochs", 1, "local `epochs` per round")
	serverLR := f.Float64("server-lr", 1.25, "the hub's `step` on the round's mean update")
	down := f.String("down", "10Mbit", "each client's downlink `rate` (bits per second; unshaped: none)")
	up := f.String("up", "2Mbit", "each client's uplink `rate`")
	rtt := f.Duration("rtt", 40*time.Millisecond, "each client's round-trip `time`")
	quorum := f.Int("quorum", 0, "updates that end a round (0: every client)")
	deadline := f.Duration("deadline", 0, "a round's `deadline` after its version is published (0: none; the quorum ends it)")
	within := f.Duration("within", time.Second, "auto rows: the `time` an update should take to reach the hub")
	densities := f.String("densities", "0.003,0.01,0.03,0.1,0.3,1", "auto rows: the `densities` the autotuner chooses among")
	downRecipe := f.String("down-recipe", "int8(4096) | q:huff0", "tp: and auto: rows: the hub's `recipe` for the deltas it sends")
	target := f.Float64("target", 0, "target test accuracy in `percent` (0: the first row's final accuracy less 1)")
	drop := f.String("rate-drop", "", "`C:FROM-TO:F`: the links of clients 0..C-1 are F times slower in rounds FROM to TO")
	trainLimit := f.Int("train-limit", 0, "use the first `n` training images (0: all 60000)")
	testLimit := f.Int("test-limit", 0, "evaluate on the first `n` test images (0: all 10000)")
	data := f.String("data", fl.DefaultDir, "`directory` of the Fashion-MNIST IDX files")
	jsonOut := f.String("json", "", "write JSON rows (one per row and seed) to `file` ('-': stdout instead of the table)")
	plotOut := f.String("plot", "", "write accuracy against wall time to `file` (.svg or .png)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	cfg := fedConfig{Clients: *clients, Rounds: *rounds, Split: *split, LR: float32(*lr), Momentum: float32(*momentum),
		Batch: *batch, LocalEpochs: *localEpochs, ServerLR: float32(*serverLR), TrainLimit: *trainLimit, Data: *data,
		Quorum: *quorum, Deadline: *deadline, Within: *within, RTT: *rtt}
	switch *model {
	case "small":
	case "large":
		cfg.Hidden = fl.Large
	default:
		return usagef("--model %q: want small or large", *model)
	}
	if *split == "dirichlet" {
		cfg.Alpha = *alpha
	} else if *split != "iid" {
		return usagef("--split %q: want iid or dirichlet", *split)
	}
	if *clients < 1 || *clients > 256 || *rounds < 1 || *seeds < 1 || *seeds > 100 {
		return usagef("--clients in 1..256, --rounds positive, --seeds in 1..100")
	}
	if cfg.Quorum == 0 {
		cfg.Quorum = cfg.Clients
	}
	if cfg.Quorum > cfg.Clients {
		return usagef("--quorum %d is more than the %d clients", cfg.Quorum, cfg.Clients)
	}
	var err error
	if cfg.Down, err = parseRate("--down", *down); err != nil {
		return err
	}
	if cfg.Up, err = parseRate("--up", *up); err != nil {
		return err
	}
	cfg.Down, cfg.Up = cfg.Down/8, cfg.Up/8
	if *drop != "" {
		if cfg.Drop, err = parseDrop(*drop); err != nil {
			return err
		}
	}
	ds, err := parseDensities(*densities)
	if err != nil {
		return err
	}
	rows, err := parseFedRows(*rowsFlag, *downRecipe, ds)
	if err != nil {
		return err
	}
	_, test, err := fl.LoadFashionMNIST(cfg.Data)
	if err != nil {
		return err
	}
	if *testLimit > 0 && *testLimit < test.N {
		idx := make([]int, *testLimit)
		for i := range idx {
			idx[i] = i
		}
		if test, err = test.Subset(idx); err != nil {
			return err
		}
	}
	var results []*fedResult
	for s := 1; s <= *seeds; s++ {
		for _, row := range rows {
			c := cfg
			c.Row, c.Seed = row, uint64(s)
			fmt.Fprintf(stderr, "fed: %s, seed %d: %d clients, %d rounds\n", row.Name, s, c.Clients, c.Rounds)
			res, err := fedRun(c, test, stderr)
			if err != nil {
				return fmt.Errorf("%s, seed %d: %w", row.Name, s, err)
			}
			results = append(results, res)
		}
	}
	sum := summarizeFed(results, rows, *target)
	if *jsonOut != "-" {
		writeFedTable(stdout, sum, cfg)
	}
	if *jsonOut != "" {
		all := make([]any, len(results))
		for i, r := range results {
			all[i] = r
		}
		if err := writeJSONRows(*jsonOut, stdout, all); err != nil {
			return err
		}
	}
	if *plotOut != "" {
		return plotFed(*plotOut, sum, cfg)
	}
	return nil
}

// parseFedRows reads the --rows list.
func parseFedRows(s, downRecipe string, densities []float64) ([]fedRow, error) {
	if _, err := codec.ParseRecipe(downRecipe); err != nil {
		return nil, usagef("--down-recipe: %v", err)
	}
	var rows []fedRow
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		var r fedRow
		switch {
		case p == "rpc":
			r = fedRow{Name: p, PerTensor: true, Up: "none"}
		case p == "dense":
			r = fedRow{Name: p, Base: true, Up: "none"}
		case p == "flare-int8":
			r = fedRow{Name: p, Down: "int8(4096)", Up: "int8(4096,ef=off)"}
		case p == "flare-fp16":
			r = fedRow{Name: p, Down: "fp16", Up: "fp16(ef=off)"}
		case strings.HasPrefix(p, "tp:"):
			r = fedRow{Name: p, Base: true, Down: downRecipe, Up: strings.TrimSpace(p[3:])}
		case strings.HasPrefix(p, "auto:"):
			r = fedRow{Name: p, Base: true, Down: downRecipe, Up: strings.TrimSpace(p[5:]), Auto: true, Densities: densities}
		default:
			return nil, usagef("--rows: %q: want rpc, dense, flare-int8, flare-fp16, tp:SPEC or auto:SPEC", p)
		}
		if _, err := gradient.Parse(r.Up); err != nil {
			return nil, usagef("--rows: %q: %v", p, err)
		}
		if r.Auto {
			if _, err := r.upload(); err != nil {
				return nil, usagef("--rows: %q: %v", p, err)
			}
		}
		if seen[r.Name] {
			return nil, usagef("--rows: %q twice", p)
		}
		seen[r.Name] = true
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, usagef("--rows: no row")
	}
	return rows, nil
}

func parseDensities(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(x > 0 && x <= 1) {
			return nil, usagef("--densities: %q: want numbers in (0, 1]", p)
		}
		out = append(out, x)
	}
	return out, nil
}

// parseDrop reads --rate-drop "C:FROM-TO:F".
func parseDrop(s string) (fedDrop, error) {
	var d fedDrop
	if n, err := fmt.Sscanf(s, "%d:%d-%d:%g", &d.Clients, &d.From, &d.To, &d.Factor); err != nil || n != 4 ||
		d.Clients < 1 || d.From < 1 || d.To < d.From || !(d.Factor >= 1) {
		return d, usagef("--rate-drop %q: want CLIENTS:FROM-TO:FACTOR, such as 2:6-10:10", s)
	}
	return d, nil
}

// fedRun runs one row on one seed: it writes the initial model as
// version 1, starts the hub and the clients, and evaluates every version
// once they are done.
func fedRun(cfg fedConfig, test *fl.Dataset, stderr io.Writer) (*fedResult, error) {
	dir, err := os.MkdirTemp("", "codec-bench-fed-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg.Dir = dir
	m0, err := fl.NewMLPHidden(cfg.Seed, cfg.Hidden)
	if err != nil {
		return nil, err
	}
	if err := hub.WriteVersionDir(dir, 1, m0.Snapshot()); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	hubCmd, hubIn, hubOut, err := fedStart(self, "hub", cfg)
	if err != nil {
		return nil, err
	}
	defer hubCmd.Process.Kill()
	addr, err := hubOut.ReadString('\n')
	if err != nil {
		hubCmd.Wait()
		return nil, fmt.Errorf("the hub process: %w", err)
	}
	cfg.Addr = strings.TrimSpace(addr)
	var start time.Time // when every client is ready
	res := &fedResult{Row: cfg.Row.Name, Seed: cfg.Seed, Times: []float64{0}, clientLines: make([][]fedClientLine, cfg.Clients)}
	hubLines := make(chan fedHubLine, cfg.Rounds+2)
	hubErr := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(hubOut)
		for {
			var l fedHubLine
			if err := dec.Decode(&l); err != nil {
				close(hubLines)
				if err == io.EOF {
					err = nil
				}
				hubErr <- err
				return
			}
			hubLines <- l
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, cfg.Clients)
	ins := make([]io.WriteCloser, cfg.Clients)
	var ready sync.WaitGroup
	ready.Add(cfg.Clients)
	for i := range cfg.Clients {
		cmd, in, out, err := fedStart(self, fmt.Sprint("client ", i), cfg)
		if err != nil {
			return nil, err
		}
		defer cmd.Process.Kill()
		ins[i] = in
		wg.Go(func() {
			dec := json.NewDecoder(out)
			var l fedClientLine
			if err := dec.Decode(&l); err != nil || !l.Ready {
				errs[i] = fmt.Errorf("client %d did not get ready (%v)", i, err)
				ready.Done()
				cmd.Wait()
				return
			}
			ready.Done()
			for {
				var l fedClientLine
				if err := dec.Decode(&l); err != nil {
					if err != io.EOF {
						errs[i] = err
					}
					break
				}
				res.clientLines[i] = append(res.clientLines[i], l)
			}
			if err := cmd.Wait(); err != nil && errs[i] == nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	ready.Wait()
	start = time.Now()
	for _, in := range ins {
		in.Write([]byte("go\n"))
		in.Close()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var last fedHubLine
	progress := func(l fedHubLine) {
		t := time.Unix(0, l.End).Sub(start).Seconds()
		res.Times = append(res.Times, t)
		fmt.Fprintf(stderr, "  round %d: %d updates, %.1f s\n", l.Round, l.Updates, t)
	}
	for running := true; running; {
		select {
		case l, ok := <-hubLines:
			if !ok {
				running = false
				break
			}
			progress(l)
		case <-done:
			running = false
		}
	}
	<-done
	hubIn.Close()
	for l := range hubLines {
		if l.Done {
			last = l
		} else {
			progress(l)
		}
	}
	if err := <-hubErr; err != nil {
		return nil, fmt.Errorf("the hub process: %w", err)
	}
	if err := hubCmd.Wait(); err != nil {
		return nil, fmt.Errorf("the hub process: %w", err)
	}
	res.Wall = time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	res.HubCPU, res.HubPeakRSS = last.CPU, last.PeakRSS
	if ru, ok := hubCmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.HubCPU = rusageSeconds(*ru) // all of it, after the last line
	}
	var phases [3]float64
	n := 0
	for r := range cfg.Rounds {
		var dens, rates []float64
		for _, ls := range res.clientLines {
			if r >= len(ls) {
				continue
			}
			l := ls[r]
			res.BytesUp += l.Up
			res.BytesDown += l.Down
			if l.Late {
				res.Late++
			}
			phases[0] += l.Fetch
			phases[1] += l.Train
			phases[2] += l.Upload
			n++
			dens = append(dens, l.Density)
			rates = append(rates, l.UpRate)
		}
		if cfg.Row.Auto {
			res.Densities = append(res.Densities, dens)
			res.UpRates = append(res.UpRates, rates)
		}
	}
	for i := range phases {
		res.PhaseMeans[i] = phases[i] / float64(max(n, 1))
	}
	// Every version's accuracy, read back from the hub's directory.
	vs, err := hub.Versions(dir)
	if err != nil {
		return nil, err
	}
	m := m0
	for _, v := range vs {
		ts, err := readVersionDir(dir, v)
		if err != nil {
			return nil, err
		}
		if err := m.Load(ts); err != nil {
			return nil, err
		}
		acc, err := m.Evaluate(test)
		if err != nil {
			return nil, err
		}
		res.Accuracies = append(res.Accuracies, acc)
	}
	if len(res.Accuracies) != len(res.Times) {
		return nil, fmt.Errorf("%d versions written, %d published", len(res.Accuracies), len(res.Times))
	}
	res.Accuracy = res.Accuracies[len(res.Accuracies)-1]
	fmt.Fprintf(stderr, "  %.2f%% in %.1f s; %s up, %s down; hub %.1f s CPU, %s peak RSS\n", 100*res.Accuracy, res.Wall,
		fmtBytes(res.BytesUp), fmtBytes(res.BytesDown), res.HubCPU, fmtBytes(res.HubPeakRSS))
	return res, nil
}

func readVersionDir(dir string, v uint64) ([]*codec.Tensor, error) {
	vd, err := hub.OpenVersion(filepath.Join(dir, strconv.FormatUint(v, 10)))
	if err != nil {
		return nil, err
	}
	var ts []*codec.Tensor
	for t, err := range vd.Tensors() {
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// fedStart starts this program as role, with cfg on its stdin's first
// line; its stderr is this process's.
func fedStart(self, role string, cfg fedConfig) (*exec.Cmd, io.WriteCloser, *bufio.Reader, error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fedEnv+"="+role)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	b, _ := json.Marshal(cfg)
	if _, err := in.Write(append(b, '\n')); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, nil, err
	}
	return cmd, in, bufio.NewReader(out), nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// fedSummary is a row over its seeds.
type fedSummary struct {
	Row                  string
	Accuracy, AccuracySD float64
	TimeToTarget         float64 // mean over the seeds that reached it; NaN: none did
	Reached              int     // seeds that reached the target
	BytesUp, BytesDown   float64 // means over seeds
	HubCPU               float64
	HubPeakRSS           int64
	Wall                 float64
	Late                 float64
	Phases               [3]float64
	Target               float64
	runs                 []*fedResult
}

// summarizeFed groups the results by row, in the rows' order, and finds
// each row's time to the target (0: the first row's final accuracy less a
// point).
func summarizeFed(results []*fedResult, rows []fedRow, target float64) []*fedSummary {
	by := map[string]*fedSummary{}
	var out []*fedSummary
	for _, r := range rows {
		s := &fedSummary{Row: r.Name}
		by[r.Name] = s
		out = append(out, s)
	}
	for _, r := range results {
		by[r.Row].runs = append(by[r.Row].runs, r)
	}
	for _, s := range out {
		var accs []float64
		for _, r := range s.runs {
			accs = append(accs, r.Accuracy)
			s.BytesUp += float64(r.BytesUp)
			s.BytesDown += float64(r.BytesDown)
			s.HubCPU += r.HubCPU
			s.HubPeakRSS = max(s.HubPeakRSS, r.HubPeakRSS)
			s.Wall += r.Wall
			s.Late += float64(r.Late)
			for i := range s.Phases {
				s.Phases[i] += r.PhaseMeans[i]
			}
		}
		k := float64(max(len(s.runs), 1))
		s.BytesUp, s.BytesDown, s.HubCPU, s.Wall, s.Late = s.BytesUp/k, s.BytesDown/k, s.HubCPU/k, s.Wall/k, s.Late/k
		for i := range s.Phases {
			s.Phases[i] /= k
		}
		s.Accuracy, s.AccuracySD = meanSD(accs)
	}
	if target <= 0 && len(out) > 0 {
		target = 100*out[0].Accuracy - 1
	}
	for _, s := range out {
		s.Target = target
		var sum float64
		for _, r := range s.runs {
			for i, a := range r.Accuracies {
				if 100*a >= target {
					sum += r.Times[i]
					s.Reached++
					break
				}
			}
		}
		s.TimeToTarget = math.NaN()
		if s.Reached > 0 {
			s.TimeToTarget = sum / float64(s.Reached)
		}
	}
	return out
}

func writeFedTable(w io.Writer, sum []*fedSummary, cfg fedConfig) {
	if len(sum) == 0 {
		return
	}
	fmt.Fprintf(w, "fed: %d clients, %d rounds, links %s down / %s up, RTT %v; target %.2f%%\n",
		cfg.Clients, cfg.Rounds, fmtRate(cfg.Down), fmtRate(cfg.Up), cfg.RTT, sum[0].Target)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tto target (s)\tvs first\taccuracy %\tsd\tup/round\tdown/round\tfetch s\ttrain s\tupload s\thub CPU s\thub RSS\twall s\tlate\t")
	first := sum[0].TimeToTarget
	for _, s := range sum {
		rounds := float64(cfg.Rounds * cfg.Clients)
		speed := "-"
		if !math.IsNaN(s.TimeToTarget) && !math.IsNaN(first) {
			speed = fmt.Sprintf("%.2fx", first/s.TimeToTarget)
		}
		tt := "not reached"
		if !math.IsNaN(s.TimeToTarget) {
			tt = fmt.Sprintf("%.1f", s.TimeToTarget)
			if n := len(s.runs); s.Reached < n {
				tt += fmt.Sprintf(" (%d of %d)", s.Reached, n)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t%s\t%.1f\t%.0f\t\n", s.Row, tt, speed,
			100*s.Accuracy, 100*s.AccuracySD, fmtBytes(int64(s.BytesUp/rounds)), fmtBytes(int64(s.BytesDown/rounds)),
			s.Phases[0], s.Phases[1], s.Phases[2], s.HubCPU, fmtBytes(s.HubPeakRSS), s.Wall, s.Late)
	}
	tw.Flush()
}

func fmtRate(bytesPerSecond float64) string {
	if bytesPerSecond == 0 {
		return "unshaped"
	}
	bits := 8 * bytesPerSecond
	switch {
	case bits >= 1e9:
		return fmt.Sprintf("%g Gbit/s", bits/1e9)
	case bits >= 1e6:
		return fmt.Sprintf("%g Mbit/s", bits/1e6)
	}
	return fmt.Sprintf("%g kbit/s", bits/1e3)
}

// plotFed draws each row's test accuracy against wall time (means over
// the seeds, version by version), the target as a dashed line.
func plotFed(path string, sum []*fedSummary, cfg fedConfig) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
	default:
		return usagef("--plot %q: want a .svg or .png file", path)
	}
	p := plot.New()
	size := "small MLP"
	if cfg.Hidden != ([2]int{}) {
		size = fmt.Sprintf("MLP 784-%d-%d-10", cfg.Hidden[0], cfg.Hidden[1])
	}
	p.Title.Text = fmt.Sprintf("FedAvg, %d client processes, %s, links %s down / %s up, RTT %v",
		cfg.Clients, size, fmtRate(cfg.Down), fmtRate(cfg.Up), cfg.RTT)
	p.X.Label.Text = "wall time (s)"
	p.Y.Label.Text = "test accuracy (%), mean over seeds"
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	xmax := 0.0
	for i, s := range sum {
		if len(s.runs) == 0 {
			continue
		}
		n := len(s.runs[0].Times)
		xys := make(plotter.XYs, n)
		for _, r := range s.runs {
			for j := range min(n, len(r.Times)) {
				xys[j].X += r.Times[j] / float64(len(s.runs))
				xys[j].Y += 100 * r.Accuracies[j] / float64(len(s.runs))
			}
		}
		xmax = max(xmax, xys[n-1].X)
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		p.Add(l)
		leg.Add(s.Row, l)
	}
	if len(sum) > 0 {
		t, err := plotter.NewLine(plotter.XYs{{X: 0, Y: sum[0].Target}, {X: xmax, Y: sum[0].Target}})
		if err != nil {
			return err
		}
		t.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(t)
		leg.Add(fmt.Sprintf("target %.2f%%", sum[0].Target), t)
	}
	p.Y.Min = 60
	if err := rateplot.SaveWithLegend(p, leg, 9*vg.Inch, 5.5*vg.Inch, 3.4*vg.Inch, path); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}
