package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/netns"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/internal/rateplot"
	"github.com/tensorpress/tensorpress/tensorfile"
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
  tp:SPEC     uploads through gradient compressor SPEC; fetches the first version exactly, then lossy
              deltas (--down-recipe) the hub takes from the copy a client that followed holds
  auto:SPEC   SPEC at the density the autotuner chooses from the uplink each client measures, for an
              upload to arrive within --within (densities --densities); fetches as tp: rows
  py:dense    Python clients (numpy, the package's tensorpress.Hub; make python first) as the dense row
  py:SPEC     Python clients as the tp:SPEC row (a tensorpress.Sender's error feedback); their links
              are relays in this process, simulated as the Go clients' are; no sum check (the
              Python client sees no frames) and no faults, relays or tc (--rate-drop applies)
  py:auto:SPEC  Python clients as the auto:SPEC row (Hub.upload's within=: the library measures
              the uplink and chooses the density)
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
	Row        string    `json:"row"`
	Seed       uint64    `json:"seed"`
	Accuracy   float64   `json:"accuracy"`   // final
	Times      []float64 `json:"times"`      // seconds from the start to each version's publication (version 1: 0)
	Accuracies []float64 `json:"accuracies"` // each version's test accuracy
	BytesUp    int64     `json:"bytes_up"`   // all clients, all rounds
	BytesDown  int64     `json:"bytes_down"`
	HubCPU     float64   `json:"hub_cpu_seconds"`
	HubPeakRSS int64     `json:"hub_peak_rss"`
	Late       int       `json:"late_updates"` // client rounds whose update came after the round closed
	// Faults: processes killed and started again.
	HubRestarts    int `json:"hub_restarts,omitempty"`
	ClientRestarts int `json:"client_restarts,omitempty"`
	// What the hub (the origin, in a hierarchical run) received: the
	// updates' frames, or the relays' partial sums; and the relays' peak
	// RSS and the updates' bytes each received.
	OriginBytesIn int64   `json:"origin_bytes_in"`
	Relays        int     `json:"relays,omitempty"`
	RelayPeakRSS  []int64 `json:"relay_peak_rss,omitempty"`
	RelayBytesIn  []int64 `json:"relay_bytes_in,omitempty"`
	// The sum check (fedCheckSums): the updates the hub counted (tensors
	// of all rounds), those the clients saw acknowledged (fewer only
	// where a killed client never read the acknowledgement), and the
	// largest difference of the sums, relative to the largest value.
	CountedUpdates   int         `json:"counted_updates"`
	CommittedUpdates int         `json:"committed_updates"`
	SumError         float64     `json:"sum_relative_error"`
	Wall             float64     `json:"wall_seconds"`
	Densities        [][]float64 `json:"densities,omitempty"` // auto: per round, each client's density
	UpRates          [][]float64 `json:"uplink_estimates,omitempty"`
	PhaseMeans       [3]float64  `json:"phase_seconds"` // mean fetch, train, upload per client round
	clientLines      [][]fedClientLine
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
	densities := f.String("densities", "0.003,0.01,0.03,0.1,0.3,1", "auto rows: the `densities` the autotuner chooses among (1: the update whole, dense float32, where the link is not the bottleneck)")
	downRecipe := f.String("down-recipe", "int8(4096) | q:huff0", "tp: and auto: rows: the hub's `recipe` for the deltas it sends")
	target := f.Float64("target", 0, "target test accuracy in `percent` (0: the first row's final accuracy less 1)")
	link := f.String("link", "sim", "`link`s of the clients: sim (simulated in each client process) or tc (as root: a veth pair per client between network namespaces, shaped both ways by tc)")
	relaysN := f.Int("relays", 0, "hierarchical: `relays` on a 3-node NATS cluster (Debian's nats-server), each summing its share of the clients' uploads and leaving one partial sum per round for the hub, the origin")
	hubKill := f.Int("kill-hub", 0, "the fault: kill the hub once `round` R is done, and start it again on its directory")
	clientKill := f.String("kill-client", "", "the fault: client `C:R` kills itself in the middle of its upload of round R and is started again")
	drop := f.String("rate-drop", "", "`C:FROM-TO:F`: the links of clients 0..C-1 are F times slower in rounds FROM to TO")
	trainLimit := f.Int("train-limit", 0, "use the first `n` training images (0: all 60000)")
	testLimit := f.Int("test-limit", 0, "evaluate on the first `n` test images (0: all 10000)")
	data := f.String("data", fl.DefaultDir, "`directory` of the Fashion-MNIST IDX files")
	jsonOut := f.String("json", "", "write JSON rows (one per row and seed) to `file` ('-': stdout instead of the table)")
	plotOut := f.String("plot", "", "write accuracy against wall time to `file` (.svg or .png)")
	pyDir := f.String("python", "python", "py: rows: the `directory` of the Python package (python/ in the source tree, built by make python)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if ext := strings.ToLower(filepath.Ext(*plotOut)); *plotOut != "" && ext != ".svg" && ext != ".png" {
		return usagef("--plot %q: want a .svg or .png file", *plotOut)
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
	cfg.HubKill = *hubKill
	switch *link {
	case "sim":
	case "tc":
		if cfg.TC = true; *hubKill > 0 || *relaysN > 0 {
			return usagef("--link tc: without --kill-hub or --relays")
		}
		if os.Geteuid() != 0 {
			return usagef("--link tc needs root (network namespaces, tc)")
		}
	default:
		return usagef("--link %q: want sim or tc", *link)
	}
	if cfg.Relays = *relaysN; cfg.Relays < 0 || cfg.Relays > 0 && (cfg.Clients%cfg.Relays != 0 || cfg.HubKill > 0 || *clientKill != "" || cfg.Quorum != cfg.Clients) {
		return usagef("--relays %d: want a divisor of --clients, without --kill-hub, --kill-client or --quorum", cfg.Relays)
	}
	if *clientKill != "" {
		if n, err := fmt.Sscanf(*clientKill, "%d:%d", &cfg.Kill.Client, &cfg.Kill.Round); err != nil || n != 2 ||
			cfg.Kill.Client < 0 || cfg.Kill.Client >= cfg.Clients || cfg.Kill.Round < 1 || cfg.Kill.Round > cfg.Rounds {
			return usagef("--kill-client %q: want CLIENT:ROUND, a client of the run in one of its rounds", *clientKill)
		}
	}
	if cfg.HubKill < 0 || cfg.HubKill >= cfg.Rounds {
		return usagef("--kill-hub %d: want a round before the last", cfg.HubKill)
	}
	ds, err := parseDensities(*densities)
	if err != nil {
		return err
	}
	rows, err := parseFedRows(*rowsFlag, *downRecipe, ds)
	if err != nil {
		return err
	}
	cfg.Python = *pyDir
	if slices.ContainsFunc(rows, func(r fedRow) bool { return r.Python }) {
		if cfg.TC || cfg.Relays > 0 || cfg.HubKill > 0 || cfg.Kill.Round > 0 {
			return usagef("py: rows run on the simulated link, without --link tc, --relays, --kill-hub or --kill-client")
		}
		if err := checkFedPython(cfg.Python); err != nil {
			return err
		}
	}
	if *testLimit < 0 || *trainLimit < 0 {
		return usagef("--train-limit and --test-limit must not be negative")
	}
	_, test, err := fl.LoadFashionMNISTHead(cfg.Data, 1, *testLimit)
	if err != nil {
		return err
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
		if cfg.Drop.Factor > 0 {
			writeFedDrop(stdout, results, cfg)
		}
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
		case p == "py:dense":
			r = fedRow{Name: p, Base: true, Up: "none", Python: true}
		case strings.HasPrefix(p, "py:auto:"):
			r = fedRow{Name: p, Base: true, Down: downRecipe, Up: strings.TrimSpace(p[8:]), Python: true, Auto: true, Densities: densities}
		case strings.HasPrefix(p, "py:"):
			r = fedRow{Name: p, Base: true, Down: downRecipe, Up: strings.TrimSpace(p[3:]), Python: true}
		case strings.HasPrefix(p, "auto:"):
			r = fedRow{Name: p, Base: true, Down: downRecipe, Up: strings.TrimSpace(p[5:]), Auto: true, Densities: densities}
		default:
			return nil, usagef("--rows: %q: want rpc, dense, flare-int8, flare-fp16, tp:SPEC, auto:SPEC, py:dense, py:SPEC or py:auto:SPEC", p)
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
	stderr = &lockedWriter{w: stderr} // the clients' goroutines write too
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
	self, err := childExe()
	if err != nil {
		return nil, err
	}
	res := &fedResult{Row: cfg.Row.Name, Seed: cfg.Seed, Times: []float64{0}, clientLines: make([][]fedClientLine, cfg.Clients)}
	hubLines := make(chan fedHubLine, 2*cfg.Rounds+16)
	hubs := &fedHubs{self: self, lines: hubLines}
	defer hubs.kill()
	if cfg.Relays > 0 {
		nd := filepath.Join(dir, "nats")
		if err := os.Mkdir(nd, 0o755); err != nil {
			return nil, err
		}
		nc, err := startNATSCluster(nd, 3)
		if err != nil {
			return nil, err
		}
		defer nc.stop()
		cfg.NATS = strings.Join(nc.urls, ",")
	}
	if cfg.TC {
		// A veth pair per client, shaped both ways by tc.
		netns.Cleanup()
		for range cfg.Clients {
			p, err := netns.New()
			if err != nil {
				return nil, err
			}
			defer p.Close()
			err = p.ShapeLink(8*cfg.Up, 8*cfg.Down, cfg.RTT/2)
			if errors.Is(err, netns.ErrNoNetem) {
				// tc shapes the rates; the clients add the delay.
				if !cfg.SimDelay {
					fmt.Fprintf(stderr, "  %v: tc shapes the rates, each client process delays its link by %v each way\n", err, cfg.RTT/2)
				}
				cfg.SimDelay = true
				err = p.ShapeLink(8*cfg.Up, 8*cfg.Down, 0)
			}
			if err != nil {
				return nil, err
			}
			cfg.Pairs = append(cfg.Pairs, *p)
		}
	}
	if err := hubs.start(cfg); err != nil {
		return nil, err
	}
	cfg.Addr = hubs.addr
	cfg.Addrs = hubs.pairAddrs
	relays, err := fedStartRelays(self, cfg)
	if err != nil {
		return nil, err
	}
	defer relays.kill()
	var pyLinks []*fedPyLink
	var pyWeights []float32
	if cfg.Row.Python {
		if pyWeights, err = fedPyShards(cfg); err != nil {
			return nil, err
		}
		for i := range cfg.Clients {
			up, down := cfg.rates(i, 1)
			l, err := startFedPyLink(cfg.Addr, up, down, cfg.RTT)
			if err != nil {
				return nil, err
			}
			defer l.close()
			pyLinks = append(pyLinks, l)
		}
	}
	var start time.Time // when every client is ready
	var wg sync.WaitGroup
	errs := make([]error, cfg.Clients)
	var ready sync.WaitGroup
	ready.Add(cfg.Clients)
	gate := make(chan struct{}) // closed at the start
	var procs sync.Mutex
	var running []*exec.Cmd
	for i := range cfg.Clients {
		wg.Go(func() {
			c := cfg
			if cfg.Relays > 0 {
				c.Addr = relays.addrs[i/(cfg.Clients/cfg.Relays)]
			}
			if cfg.TC {
				c.Addr = cfg.Addrs[i]
			}
			for attempt := 0; ; attempt++ {
				var cmd *exec.Cmd
				var in io.WriteCloser
				var out *bufio.Reader
				var err error
				if c.Row.Python {
					cmd, in, out, err = fedStartPy(c, i, pyLinks[i].addr(), pyWeights[i])
				} else {
					cmd, in, out, err = fedStart(self, fmt.Sprint("client ", i), c)
				}
				if err != nil {
					errs[i] = err
					if attempt == 0 {
						ready.Done()
					}
					return
				}
				procs.Lock()
				running = append(running, cmd)
				procs.Unlock()
				dec := json.NewDecoder(out)
				var l fedClientLine
				if err := dec.Decode(&l); err != nil || !l.Ready {
					errs[i] = fmt.Errorf("client %d did not get ready (%v)", i, err)
					if attempt == 0 {
						ready.Done()
					}
					cmd.Wait()
					return
				}
				if attempt == 0 {
					ready.Done()
					<-gate
				}
				in.Write([]byte("go\n"))
				in.Close()
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
				err = cmd.Wait()
				if err == nil {
					return
				}
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL &&
					c.Kill.Round > 0 && c.Kill.Client == i && !c.Resume {
					// The fault: killed in the middle of its upload. Start
					// it again.
					fmt.Fprintf(stderr, "  client %d killed in the middle of its upload of round %d: started again\n", i, c.Kill.Round)
					res.ClientRestarts++
					c.Resume = true
					continue
				}
				errs[i] = fmt.Errorf("client %d: %w", i, err)
				return
			}
		})
	}
	defer func() {
		procs.Lock()
		for _, c := range running {
			c.Process.Kill()
		}
		procs.Unlock()
	}()
	ready.Wait()
	start = time.Now()
	close(gate)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var last fedHubLine
	progress := func(l fedHubLine) {
		t := time.Unix(0, l.End).Sub(start).Seconds()
		res.Times = append(res.Times, t)
		fmt.Fprintf(stderr, "  round %d: %d updates, %.1f s\n", l.Round, l.Updates, t)
		for i, pl := range pyLinks {
			// The next round's rates (--rate-drop): a Go client sets its
			// own; a Python client's link is here.
			pl.links.setRates(cfg.rates(i, int(l.Round)+1))
		}
		if cfg.HubKill > 0 && l.Round == uint64(cfg.HubKill) && res.HubRestarts == 0 {
			// The fault: the hub killed between rounds, started again on
			// its directory.
			res.HubRestarts++
			fmt.Fprintf(stderr, "  hub killed after round %d: started again\n", l.Round)
			c := cfg
			c.Listen = hubs.addr
			if err := hubs.restart(c); err != nil {
				hubs.err = err
			}
		}
	}
	var lastRound uint64
	for running := true; running; {
		select {
		case l := <-hubLines:
			switch {
			case hubs.died(l):
				return nil, fmt.Errorf("the hub process ended in round %d (its error is above)", lastRound+1)
			case l.ended != 0:
			case l.Done:
				last = l
			default:
				progress(l)
				lastRound = l.Round
			}
		case <-done:
			running = false
		}
	}
	// The clients are done; the hub may still be closing the last round
	// (in a hierarchical run, waiting for the relays' sums).
	for wait := time.After(2 * time.Minute); lastRound < uint64(cfg.Rounds); {
		select {
		case l := <-hubLines:
			switch {
			case hubs.died(l):
				return nil, fmt.Errorf("the hub process ended in round %d (its error is above)", lastRound+1)
			case l.ended == 0 && !l.Done:
				progress(l)
				lastRound = l.Round
			}
		case <-wait:
			return nil, fmt.Errorf("the hub did not close round %d within 2 minutes of the clients' end", lastRound+1)
		}
	}
	hubs.stop()
	if err := relays.stop(res); err != nil {
		return nil, err
	}
	for l := range hubLines {
		switch {
		case l.ended != 0:
		case l.Done:
			last = l
		default:
			progress(l)
		}
	}
	if hubs.err != nil {
		return nil, fmt.Errorf("the hub process: %w", hubs.err)
	}
	res.Wall = time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	res.HubCPU, res.HubPeakRSS = hubs.cpu, last.PeakRSS
	res.OriginBytesIn = last.BytesIn
	if cfg.Relays > 0 {
		res.OriginBytesIn = last.SumBytes
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
	for _, l := range pyLinks {
		down, up := l.bytes()
		res.BytesDown += down
		res.BytesUp += up
	}
	if !cfg.Row.Python { // a Python client keeps no log of its frames
		if err := fedCheckSums(dir, cfg.Clients, res); err != nil {
			return nil, err
		}
	}
	// Every version's accuracy, read back from the hub's directory.
	vs, err := hub.Versions(dir)
	if err != nil {
		return nil, err
	}
	m := m0
	for _, v := range vs {
		ts, err := hub.ReadVersion(dir, v)
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
	check := fmt.Sprintf("sum check: %d updates counted, %d committed, relative error %.1e", res.CountedUpdates, res.CommittedUpdates, res.SumError)
	if cfg.Row.Python {
		check = "no sum check (Python clients log no frames)"
	}
	fmt.Fprintf(stderr, "  %.2f%% in %.1f s; %s up, %s down; hub %.1f s CPU, %s peak RSS; %s\n",
		100*res.Accuracy, res.Wall, humanBytes(float64(res.BytesUp)), humanBytes(float64(res.BytesDown)), res.HubCPU, humanBytes(float64(res.HubPeakRSS)), check)
	return res, nil
}

// fedRelays are the relay processes of a hierarchical run.
type fedRelays struct {
	cmds  []*exec.Cmd
	ins   []io.WriteCloser
	outs  []*bufio.Reader
	addrs []string
}

func fedStartRelays(self string, cfg fedConfig) (*fedRelays, error) {
	r := &fedRelays{}
	for i := range cfg.Relays {
		cmd, in, out, err := fedStart(self, fmt.Sprint("relay ", i), cfg)
		if err != nil {
			r.kill()
			return nil, err
		}
		r.cmds, r.ins, r.outs = append(r.cmds, cmd), append(r.ins, in), append(r.outs, out)
		addr, err := out.ReadString('\n')
		if err != nil {
			r.kill()
			return nil, fmt.Errorf("relay %d: %w", i, err)
		}
		r.addrs = append(r.addrs, strings.TrimSpace(addr))
	}
	return r, nil
}

// stop ends the relays and records their counters in res.
func (r *fedRelays) stop(res *fedResult) error {
	for i, in := range r.ins {
		in.Close()
		var l fedHubLine
		err := json.NewDecoder(r.outs[i]).Decode(&l)
		if werr := r.cmds[i].Wait(); err == nil {
			err = werr
		}
		if err != nil {
			return fmt.Errorf("relay %d: %w", i, err)
		}
		res.Relays++
		res.RelayPeakRSS = append(res.RelayPeakRSS, l.PeakRSS)
		res.RelayBytesIn = append(res.RelayBytesIn, l.BytesIn)
	}
	r.cmds = nil
	return nil
}

func (r *fedRelays) kill() {
	for _, c := range r.cmds {
		c.Process.Kill()
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// fedHubs is the hub process of a run, and those that take its place
// when it is killed; their lines go to lines.
type fedHubs struct {
	self  string
	lines chan fedHubLine
	addr  string
	// pairAddrs are its listeners in the clients' veth pairs (--link tc).
	pairAddrs []string
	cmd       *exec.Cmd
	in        io.WriteCloser
	read      chan error // the current process's lines read
	cpu       float64    // CPU seconds of the processes ended
	err       error
	// gen numbers the processes started; stopping is set by stop.
	gen      int
	stopping bool
}

func (h *fedHubs) start(cfg fedConfig) error {
	cmd, in, out, err := fedStart(h.self, "hub", cfg)
	if err != nil {
		return err
	}
	addr, err := out.ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("the hub process: %w", err)
	}
	addrs := strings.Fields(addr)
	if len(addrs) == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("the hub process printed no address")
	}
	h.gen++
	h.cmd, h.in, h.addr, h.pairAddrs, h.read = cmd, in, addrs[0], addrs[1:], make(chan error, 1)
	go func(read chan error, gen int) {
		dec := json.NewDecoder(out)
		for {
			var l fedHubLine
			if err := dec.Decode(&l); err != nil {
				if err == io.EOF {
					err = nil
				}
				h.lines <- fedHubLine{ended: gen}
				read <- err
				return
			}
			h.lines <- l
		}
	}(h.read, h.gen)
	return nil
}

// died reports whether l says that the current hub process ended, on its
// own: the run cannot go on.
func (h *fedHubs) died(l fedHubLine) bool { return l.ended != 0 && l.ended == h.gen && !h.stopping }

// wait waits for the current process's end and adds its CPU time.
func (h *fedHubs) wait() error {
	rerr := <-h.read
	err := h.cmd.Wait()
	if ru, ok := h.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		h.cpu += rusageSeconds(*ru)
	}
	if err == nil {
		err = rerr
	}
	return err
}

// restart kills the hub process and starts another on the same address
// and directory.
func (h *fedHubs) restart(cfg fedConfig) error {
	h.cmd.Process.Kill()
	h.wait() // killed: its status is no error of the run
	return h.start(cfg)
}

// stop ends the hub process (stdin closed: it prints its counters) and
// closes lines.
func (h *fedHubs) stop() {
	h.stopping = true
	h.in.Close()
	if err := h.wait(); err != nil && h.err == nil {
		h.err = err
	}
	close(h.lines)
	h.cmd = nil
}

func (h *fedHubs) kill() {
	if h.cmd != nil {
		h.cmd.Process.Kill()
	}
}

// fedSumTolerance bounds the sum check's relative error: the hub adds a
// round's updates in float32 in the order they come, the check in
// float64.
const fedSumTolerance = 1e-5

// fedCheckSums checks that the hub counted every update the clients
// committed, once, and nothing else. The hub's round sums (sums/ROUND)
// name the peers whose update of each tensor they counted; each client's
// log holds the frames it sent and those acknowledged. Every
// acknowledged frame must be counted (none lost); every update counted
// must be a frame its client sent, acknowledged or, for a client killed
// before the acknowledgement came, the last it sent of that tensor in
// that round and the hub did not refuse (the hub counts one per peer,
// tensor and round: never twice); and the sums of those frames, decoded, must be the hub's, to
// float32 rounding. A mismatch is the run's error.
func fedCheckSums(dir string, clients int, res *fedResult) error {
	type key struct {
		round  uint64
		tensor string
	}
	logs := make([]map[key]fedRecord, clients)
	for id := range clients {
		recs, err := readFedLog(fedLogPath(dir, id))
		if err != nil {
			return fmt.Errorf("sum check: %w", err)
		}
		m := map[key]fedRecord{}
		cands := map[key][][]byte{}
		for _, r := range recs {
			k := key{r.round, r.name}
			if old, ok := m[k]; ok && old.kind == 'c' {
				if r.kind == 'c' {
					return fmt.Errorf("sum check: client %d committed %q of round %d twice", id, r.name, r.round)
				}
				continue
			}
			if r.kind == 'c' {
				res.CommittedUpdates++
				m[k] = r
				continue
			}
			// Not acknowledged (yet): the last frame sent and not refused.
			cands[k] = sentCandidates(cands[k], r)
			if c := cands[k]; len(c) > 0 {
				m[k] = fedRecord{kind: 's', round: r.round, weight: r.weight, frame: c[len(c)-1], name: r.name}
			} else {
				delete(m, k)
			}
		}
		logs[id] = m
	}
	recv, err := gradient.NewReceiver()
	if err != nil {
		return err
	}
	var buf []float32
	decode := func(r fedRecord) ([]float32, error) {
		_, err := recv.Add(r.frame, r.weight, func(_ string, shape []int64) ([]float32, error) {
			n := int64(1)
			for _, d := range shape {
				n *= d
			}
			buf = slices.Grow(buf[:0], int(n))[:n]
			clear(buf)
			return buf, nil
		})
		return buf, err
	}
	ents, err := os.ReadDir(filepath.Join(dir, "sums"))
	if err != nil {
		return fmt.Errorf("sum check: %w", err)
	}
	var maxDiff, maxVal float64
	var worstRound uint64 // where maxDiff is
	var worstTensor, worstPeers string
	counted := map[key]map[int]bool{}
	for _, e := range ents {
		var round uint64
		if n, _ := fmt.Sscanf(e.Name(), "%d.safetensors", &round); n != 1 {
			continue
		}
		f, err := tensorfile.OpenSafetensorsFile(filepath.Join(dir, "sums", e.Name()))
		if err != nil {
			return fmt.Errorf("sum check: %w", err)
		}
		meta := f.Metadata()
		for _, info := range f.Tensors() {
			t, err := f.Read(info.Name)
			if err != nil {
				f.Close()
				return fmt.Errorf("sum check: %w", err)
			}
			hub, _ := codec.View[float32](t)
			sum := make([]float64, len(hub))
			k := key{round, t.Name}
			counted[k] = map[int]bool{}
			for _, p := range strings.Split(meta["peers."+t.Name], ",") {
				var id int
				if n, _ := fmt.Sscanf(p, "client%d", &id); n != 1 || id < 0 || id >= clients || counted[k][id] {
					f.Close()
					return fmt.Errorf("sum check: round %d, %q: counted from peer %q", round, t.Name, p)
				}
				counted[k][id] = true
				r, ok := logs[id][k]
				if !ok {
					f.Close()
					return fmt.Errorf("sum check: round %d: the hub counted client %d's %q, which the client never sent", round, id, t.Name)
				}
				v, err := decode(r)
				if err != nil || len(v) != len(sum) {
					f.Close()
					return fmt.Errorf("sum check: round %d, client %d's %q: %v", round, id, t.Name, err)
				}
				for i, x := range v {
					sum[i] += float64(x)
				}
				res.CountedUpdates++
			}
			for i, x := range hub {
				if d := math.Abs(float64(x) - sum[i]); d > maxDiff {
					maxDiff, worstRound, worstTensor, worstPeers = d, round, t.Name, meta["peers."+t.Name]
				}
				maxVal = max(maxVal, math.Abs(sum[i]))
			}
		}
		f.Close()
	}
	for id, m := range logs {
		for k, r := range m {
			if r.kind == 'c' && !counted[k][id] {
				return fmt.Errorf("sum check: round %d: client %d's %q was acknowledged and is not in the hub's sum (lost)", k.round, id, k.tensor)
			}
		}
	}
	if maxVal > 0 {
		res.SumError = maxDiff / maxVal
	}
	if res.SumError > fedSumTolerance {
		return fmt.Errorf("sum check: the hub's sums differ from the updates counted by %.2e of the largest value (the most at round %d, %q, peers %s)", res.SumError, worstRound, worstTensor, worstPeers)
	}
	return nil
}

// fedStart starts this program as role, with cfg on its stdin's first
// line; its stderr is this process's.
func fedStart(self, role string, cfg fedConfig) (*exec.Cmd, io.WriteCloser, *bufio.Reader, error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fedEnv+"="+role)
	in, out, err := startPiped(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	b, _ := json.Marshal(cfg)
	if _, err := in.Write(append(b, '\n')); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, nil, err
	}
	return cmd, in, out, nil
}

// startPiped starts cmd with pipes to its stdin and from its stdout; its
// stderr is this process's.
func startPiped(cmd *exec.Cmd) (io.WriteCloser, *bufio.Reader, error) {
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return in, bufio.NewReader(out), nil
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
			100*s.Accuracy, 100*s.AccuracySD, humanBytes(float64(int64(s.BytesUp/rounds))), humanBytes(float64(int64(s.BytesDown/rounds))),
			s.Phases[0], s.Phases[1], s.Phases[2], s.HubCPU, humanBytes(float64(s.HubPeakRSS)), s.Wall, s.Late)
	}
	tw.Flush()
}

// writeFedDrop prints, for each auto row on its first seed, round by
// round, the uplink of a client whose link drops and of one whose link
// does not, each with the density its autotuner chose and the rate its
// last upload measured.
func writeFedDrop(w io.Writer, results []*fedResult, cfg fedConfig) {
	d := cfg.Drop
	for _, r := range results {
		if r.Seed != 1 || len(r.Densities) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: the links of clients 0-%d %gx slower in rounds %d-%d\n", r.Row, d.Clients-1, d.Factor, d.From, d.To)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		other := cfg.Clients - 1
		fmt.Fprintf(tw, "round\tclient 0 uplink\tdensity\tmeasured\tclient %d uplink\tdensity\tmeasured\t\n", other)
		for i := range r.Densities {
			row := fmt.Sprintf("%d\t", i+1)
			for _, c := range []int{0, other} {
				if c >= len(r.clientLines) || i >= len(r.clientLines[c]) {
					row += "-\t-\t-\t"
					continue
				}
				l := r.clientLines[c][i]
				row += fmt.Sprintf("%s\t%g\t%s\t", fmtRate(l.UpRateIs), l.Density, fmtRate(l.UpRate))
			}
			fmt.Fprintln(tw, row)
		}
		tw.Flush()
	}
}

func fmtRate(bytesPerSecond float64) string {
	if bytesPerSecond == 0 {
		return "unshaped"
	}
	bits := 8 * bytesPerSecond
	switch {
	case bits >= 1e9:
		return fmt.Sprintf("%.3g Gbit/s", bits/1e9)
	case bits >= 1e6:
		return fmt.Sprintf("%.3g Mbit/s", bits/1e6)
	}
	return fmt.Sprintf("%.3g kbit/s", bits/1e3)
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
