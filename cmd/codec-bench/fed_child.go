package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/netns"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/profile"
)

// fedEnv, when set, makes a re-executed codec-bench the hub ("hub") or a
// client ("client N") of 'fed'; the run's fedConfig is JSON on stdin's
// first line.
const fedEnv = "CODEC_BENCH_FED"

// fedChild runs this process as the hub or a client of 'fed' if the
// environment asks for one; ok is false if it does not.
func fedChild() (ok bool, err error) {
	role := os.Getenv(fedEnv)
	if role == "" {
		return false, nil
	}
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return true, fmt.Errorf("codec-bench fed %s: reading the configuration: %w", role, err)
	}
	var cfg fedConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return true, fmt.Errorf("codec-bench fed %s: %w", role, err)
	}
	var id int
	switch {
	case role == "hub":
		err = fedHub(cfg, in, os.Stdout)
	case fmtSscan(role, "client %d", &id):
		err = fedClient(cfg, id, in, os.Stdout)
	case fmtSscan(role, "relay %d", &id):
		err = fedRelay(cfg, id, in, os.Stdout)
	default:
		err = fmt.Errorf("%s=%q: want hub or client N", fedEnv, role)
	}
	if err != nil {
		return true, fmt.Errorf("codec-bench fed %s: %w", role, err)
	}
	return true, nil
}

func fmtSscan(s, format string, v *int) bool {
	n, err := fmt.Sscanf(s, format, v)
	return err == nil && n == 1
}

// fedConfig is one run of 'fed': a row on a seed. The coordinator passes
// it to the hub and every client.
type fedConfig struct {
	Row  fedRow `json:"row"`
	Seed uint64 `json:"seed"`

	Clients     int     `json:"clients"`
	Rounds      int     `json:"rounds"`
	Hidden      [2]int  `json:"hidden"`
	Split       string  `json:"split"`
	Alpha       float64 `json:"alpha"`
	LR          float32 `json:"lr"`
	Momentum    float32 `json:"momentum"`
	Batch       int     `json:"batch"`
	LocalEpochs int     `json:"local_epochs"`
	ServerLR    float32 `json:"server_lr"`
	TrainLimit  int     `json:"train_limit"`
	Data        string  `json:"data"`

	Dir      string        `json:"dir"`      // the hub's versions directory
	Quorum   int           `json:"quorum"`   // updates that end a round (0: every client)
	Deadline time.Duration `json:"deadline"` // a round's deadline (0: none)
	Within   time.Duration `json:"within"`   // auto: the time an upload should take

	Up   float64       `json:"up"`   // each client's uplink, bytes per second (0: unshaped)
	Down float64       `json:"down"` // downlink
	RTT  time.Duration `json:"rtt"`
	Drop fedDrop       `json:"drop"`

	// Faults: client Kill.Client kills itself in the middle of its
	// upload of round Kill.Round and is started again (Resume); the hub
	// is killed once version HubKill+1 is published and started again.
	Kill    fedKill `json:"kill"`
	HubKill int     `json:"hub_kill,omitempty"`
	Resume  bool    `json:"resume,omitempty"`
	Listen  string  `json:"listen,omitempty"` // the hub's address, when started again

	// Pairs, when set (--link tc, as root), are the clients' real links:
	// client i dials from Pairs[i].A to the hub listening in Pairs[i].B
	// (at Addrs[i]), the veth pair shaped by tc both ways.
	TC       bool         `json:"tc,omitempty"`
	SimDelay bool         `json:"sim_delay,omitempty"` // tc without netem: the clients add the delay
	Pairs    []netns.Pair `json:"pairs,omitempty"`
	Addrs    []string     `json:"addrs,omitempty"`

	// Hierarchical runs: Relays relay hubs on a NATS cluster (NATS: its
	// URLs), each summing the uploads of Clients/Relays clients.
	Relays int    `json:"relays,omitempty"`
	NATS   string `json:"nats,omitempty"`

	Addr string `json:"addr"` // the hub's, for the clients

	Python string `json:"python,omitempty"` // py: rows: the Python package's directory
}

// fedDrop divides the links of clients [0, Clients) by Factor in rounds
// From to To (1-based, inclusive).
type fedDrop struct {
	Clients int     `json:"clients"`
	From    int     `json:"from,omitempty"`
	To      int     `json:"to,omitempty"`
	Factor  float64 `json:"factor,omitempty"`
}

// fedKill names a client to kill in a round (Round 0: none).
type fedKill struct {
	Client int `json:"client"`
	Round  int `json:"round,omitempty"`
}

// rates returns client id's link rates in round r.
func (c *fedConfig) rates(id, r int) (up, down float64) {
	up, down = c.Up, c.Down
	if d := c.Drop; d.Factor > 0 && id < d.Clients && r >= d.From && r <= d.To {
		up, down = up/d.Factor, down/d.Factor
	}
	return up, down
}

func (c *fedConfig) flConfig() (fl.Config, error) {
	cfg := fl.Config{Mode: fl.FedAvg, Clients: c.Clients, Rounds: c.Rounds, LocalEpochs: c.LocalEpochs, Batch: c.Batch,
		LR: c.LR, Momentum: c.Momentum, ServerLR: c.ServerLR, Seed: c.Seed, Hidden: c.Hidden, TrainLimit: c.TrainLimit}
	switch c.Split {
	case "iid":
	case "dirichlet":
		cfg.Split, cfg.Alpha = fl.Dirichlet, c.Alpha
	default:
		return cfg, fmt.Errorf("split %q", c.Split)
	}
	return cfg, nil
}

// fedHubLine is what the hub prints: one line per round, then its end.
type fedHubLine struct {
	Round      uint64  `json:"round,omitempty"`
	Updates    int     `json:"updates,omitempty"`
	ByDeadline bool    `json:"by_deadline,omitempty"`
	End        int64   `json:"end,omitempty"` // Unix nanoseconds: the version published
	Done       bool    `json:"done,omitempty"`
	CPU        float64 `json:"cpu_seconds,omitempty"`
	PeakRSS    int64   `json:"peak_rss,omitempty"` // VmHWM: getrusage's maxrss counts the parent's pages before exec
	BytesSent  int64   `json:"bytes_sent,omitempty"`
	BytesIn    int64   `json:"update_bytes,omitempty"`
	SumBytes   int64   `json:"sum_bytes,omitempty"` // hierarchical: partial sums' bytes, read (origin) or written (relay)

	ended int   // not printed: set by the coordinator when hub process number ended stopped writing
	Late  int64 `json:"late_updates,omitempty"`
}

// fedHub is the hub process: it serves the row's hub on loopback, prints
// its address, aggregates the rounds (hub.RunFedAvg) printing a line per
// round, and serves until stdin closes; then it prints its counters.
func fedHub(cfg fedConfig, stdin io.Reader, stdout io.Writer) error {
	h, err := fedNewHub(cfg)
	if err != nil {
		return err
	}
	addr := cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lns := []net.Listener{ln}
	addrs := []string{ln.Addr().String()}
	for _, p := range cfg.Pairs {
		// The clients' real links: a listener in each pair's hub side.
		l, err := p.Listen(0)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return err
		}
		lns, addrs = append(lns, l), append(addrs, l.Addr().String())
	}
	served := make(chan error, len(lns))
	for _, l := range lns {
		// Off loopback: the link-local addresses of the run's own veth
		// pairs, which nothing else reaches.
		go func() {
			served <- hub.Serve(ctx, l, h, hub.ServeConfig{Drain: -1, Auth: auth.Config{Insecure: len(cfg.Pairs) > 0}})
		}()
	}
	enc := json.NewEncoder(stdout)
	fmt.Fprintln(stdout, strings.Join(addrs, " "))
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(stop)
	}()
	var sumBytes int64 // hierarchical: the partial sums read
	fc := hub.FedAvgConfig{Dir: cfg.Dir, Clients: max(cfg.Quorum, 1), Deadline: cfg.Deadline,
		ServerLR: cfg.ServerLR, Rounds: cfg.Rounds, KeepSums: true, OnRound: func(r hub.RoundResult) {
			enc.Encode(fedHubLine{Round: r.Round, Updates: r.Updates, ByDeadline: r.ByDeadline, End: r.End.UnixNano(), SumBytes: sumBytes})
		}}
	if cfg.Relays > 0 {
		closeNATS, err := fedOriginOptions(ctx, cfg, &fc, &sumBytes)
		if err != nil {
			return err
		}
		defer closeNATS()
	}
	agg := make(chan error, 1)
	go func() { agg <- hub.RunFedAvg(ctx, h, fc) }()
	select {
	case err = <-agg:
		if err == nil {
			<-stop
		}
	case <-stop:
	}
	cancel()
	for range lns {
		if serr := <-served; err == nil {
			err = serr
		}
	}
	if err != nil {
		return err
	}
	st := h.Stats()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return enc.Encode(fedHubLine{Done: true, CPU: rusageSeconds(ru), PeakRSS: peakRSS(),
		BytesSent: st.BytesSent, BytesIn: st.UpdateBytes, Late: st.LateUpdates, SumBytes: sumBytes})
}

// fedNewHub makes the hub of the row: lossy recipe for fetches as the
// row says.
func fedNewHub(cfg fedConfig) (*hub.Hub, error) {
	opts := []hub.Option{hub.WithRetention(4)}
	if cfg.Row.Down != "" {
		r, err := codec.ParseRecipe(cfg.Row.Down)
		if err != nil {
			return nil, err
		}
		opts = append(opts, hub.WithPolicy(codec.FixedPolicy{Recipe: r}))
	}
	return hub.New(opts...)
}

func rusageSeconds(ru syscall.Rusage) float64 {
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// fedClientLine is what a client prints per round.
type fedClientLine struct {
	Ready    bool    `json:"ready,omitempty"` // loaded and connected: waiting for the start
	Round    int     `json:"round"`
	Fetch    float64 `json:"fetch_seconds"`
	Train    float64 `json:"train_seconds"`
	Upload   float64 `json:"upload_seconds"`
	Down     int64   `json:"bytes_down"`
	Up       int64   `json:"bytes_up"`
	Density  float64 `json:"density,omitempty"`
	UpRate   float64 `json:"uplink_estimate,omitempty"` // bytes per second, measured on the upload
	Late     bool    `json:"late,omitempty"`            // the round closed before the update was counted
	Deltas   int     `json:"deltas,omitempty"`
	Loss     float64 `json:"loss"`
	UpRateIs float64 `json:"uplink,omitempty"` // the link's rate this round
}

// fedClient is client id's process: every round it waits for the round's
// version, fetches it over its link as the row says, trains its shard and
// uploads its update through the row's compressor, recording in its log
// (fedLog) each frame before it is sent and once it is acknowledged. Once
// its data is loaded and its connection up it prints a ready line and
// waits for a line on stdin: the start, the same for every client. A
// client started again after a kill (cfg.Resume) goes on from the hub's
// newest round, learning from the hub which of that round's updates it
// had already counted.
func fedClient(cfg fedConfig, id int, stdin *bufio.Reader, stdout io.Writer) error {
	flc, err := cfg.flConfig()
	if err != nil {
		return err
	}
	train, _, err := fl.LoadFashionMNISTHead(cfg.Data, cfg.TrainLimit, 1)
	if err != nil {
		return err
	}
	cl, err := fl.NewClient(flc, train, id)
	if err != nil {
		return err
	}
	log, err := openFedLog(fedLogPath(cfg.Dir, id))
	if err != nil {
		return err
	}
	defer log.close()
	global := cl.NewModel(cfg.Seed) // its weights come from the hub
	// The link: the connection gRPC dials, again after the hub's
	// restart, at the round's rates.
	var links fedLinks
	links.up, links.down = cfg.rates(id, 1)
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		if len(cfg.Pairs) > 0 {
			// The real link: dial from the client's namespace; tc shapes
			// it, the Duplex only counts.
			c, err := cfg.Pairs[id].Dial(addr)
			if err != nil {
				return nil, err
			}
			var rtt time.Duration
			if cfg.SimDelay {
				rtt = cfg.RTT
			}
			return links.add(c, rtt), nil
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return links.add(c, cfg.RTT), nil
	}
	if len(cfg.Pairs) > 0 {
		links.up, links.down = 0, 0
		links.pair = &cfg.Pairs[id]
		if !cfg.SimDelay {
			links.delay = cfg.RTT / 2 // else the Duplex delays
		}
		links.pairUp, links.pairDown = cfg.rates(id, 1)
	}
	conn, err := grpc.NewClient("passthrough:///"+cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := hubpb.NewHubClient(conn)
	ctx := context.Background()
	row := cfg.Row
	ob := gradient.NewOutbox(nil)
	up, err := row.upload()
	if err != nil {
		return err
	}
	var tuner *autotune.Tuner
	if row.Auto {
		if tuner, err = autotune.New(autotune.WithProfile(up.Profile)); err != nil {
			return err
		}
		up.Densities, up.Within = &hub.Recorded{DensityChooser: tuner}, cfg.Within
	}
	held := map[string]*codec.Tensor{}
	var heldV uint64
	enc := json.NewEncoder(stdout)
	conn.Connect()
	first := uint64(1)
	if cfg.Resume {
		if first, err = fedNewest(ctx, c); err != nil {
			return err
		}
	}
	rtt, err := fedAwait(ctx, c, first)
	if err != nil {
		return err
	}
	if err := enc.Encode(fedClientLine{Ready: true}); err != nil {
		return err
	}
	if _, err := stdin.ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the start: %w", err)
	}
	for r := int(first); r <= cfg.Rounds; r++ {
		line := fedClientLine{Round: r}
		ur, dr := cfg.rates(id, r)
		line.UpRateIs = ur
		links.setRates(ur, dr)
		took, err := fedAwait(ctx, c, uint64(r))
		if err != nil {
			return err
		}
		rtt = min(rtt, took)
		d0, u0 := links.bytes()
		t0 := time.Now()
		ts, deltas, err := row.fetch(ctx, c, uint64(r), held, heldV)
		if err != nil {
			return fmt.Errorf("round %d: fetch: %w", r, err)
		}
		line.Deltas = deltas
		t1 := time.Now()
		if err := global.Load(ts); err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		clear(held)
		for _, t := range ts {
			held[t.Name] = t
		}
		heldV = uint64(r)
		update, loss, err := cl.Train(global)
		if err != nil {
			return err
		}
		line.Loss = loss
		t2 := time.Now()
		d1, u1 := links.bytes()
		req := up
		req.Round, req.Weight, req.Peer = uint64(r), cl.Weight(), fmt.Sprint("client", id)
		ob.SetEpoch(float64(r - 1))
		kill := cfg.Kill.Client == id && cfg.Kill.Round == r && !cfg.Resume
		line.Late, err = fedUpload(ctx, c, ob, row, req, update, log, kill)
		if err != nil {
			return fmt.Errorf("round %d: upload: %w", r, err)
		}
		t3 := time.Now()
		if ch, ok := req.Densities.(*hub.Recorded); ok {
			line.Density = ch.Chosen[update[0].Name]
		}
		d2, u2 := links.bytes()
		line.Fetch, line.Train, line.Upload = t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), t3.Sub(t2).Seconds()
		line.Down, line.Up = (d1-d0)+(d2-d1), (u1-u0)+(u2-u1)
		if tuner != nil {
			// The uplink as this upload measured it: its bytes over its
			// time less the round trip it waited for the last
			// acknowledgement.
			if net := t3.Sub(t2) - rtt; net > time.Millisecond && u2 > u1 {
				line.UpRate = float64(u2-u1) / net.Seconds()
				tuner.Link().SetRate(line.UpRate, "upload")
			}
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

// fedUpload uploads round req.Round's update as the row says, logging
// every frame before it is sent and once it is acknowledged. When the hub
// goes away (Unavailable: restarted), it waits for it and sends what was
// not acknowledged again, from the residual; an update the hub says it
// already counted (AlreadyExists: sent by this client before a kill) is
// logged as committed from the log's record of what was sent. late is
// true when the round closed first: the rest stays in the residual. With
// kill set, the process kills itself after its first acknowledgement:
// the fault of a client killed in the middle of an upload.
func fedUpload(ctx context.Context, c hubpb.HubClient, ob *gradient.Outbox, row fedRow, req hub.UploadRequest, update []*codec.Tensor,
	log *fedLog, kill bool) (late bool, err error) {
	round := req.Round
	pending := slices.Clone(update)
	if done := log.committed(round); len(done) > 0 {
		// Started again: what the process before counted is done.
		pending = slices.DeleteFunc(pending, func(t *codec.Tensor) bool { return done[t.Name] })
	}
	for tries := 0; len(pending) > 0; tries++ {
		acked := 0
		var name string
		var sent [][]byte // this attempt's frames, in the order sent
		req.OnSend = func(f []byte) {
			log.write('s', round, req.Weight, f)
			sent = append(sent, f)
		}
		req.OnCommit = func(f []byte) {
			log.write('c', round, req.Weight, f)
			acked++
			if kill {
				log.close()
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		err := row.send(ctx, c, ob, req, pending)
		if err == nil {
			return false, nil
		}
		pending = pending[acked:]
		code := status.Code(err)
		if code == codes.FailedPrecondition || code == codes.AlreadyExists {
			// The hub refused the first frame not acknowledged and
			// read no further: none of those frames was counted.
			for _, f := range sent[acked:] {
				log.write('r', round, req.Weight, f)
			}
		}
		switch code {
		case codes.FailedPrecondition:
			return true, nil
		case codes.AlreadyExists:
			// pending[0] was counted before: the process that sent it
			// died before the acknowledgement came. What it sent is in
			// the log.
			name = pending[0].Name
			f, ok := log.sent(round, name)
			if !ok {
				return false, fmt.Errorf("the hub counted %q of round %d, which this client's log never sent: %w", name, round, err)
			}
			log.write('c', round, req.Weight, f)
			pending = pending[1:]
		case codes.Unavailable, codes.Canceled, codes.Aborted:
			if tries > 600 {
				return false, err
			}
			time.Sleep(50 * time.Millisecond)
		default:
			return false, err
		}
		// Send again what was not acknowledged: zero updates, with which
		// the residual (where the aborted frames went) goes. (The update
		// of a tensor the hub had counted from the process before stays
		// in the residual: it goes with the next round's.)
		for i, t := range pending {
			z := *t
			z.Data = make([]byte, len(t.Data))
			pending[i] = &z
		}
	}
	return false, nil
}

// fedLinks are a client's connections to the hub (one, and another after
// each restart of the hub), all at the same rates.
type fedLinks struct {
	mu       sync.Mutex
	up, down float64
	// pair, when set, is the real link: tc's rates (bytes per second)
	// and delay, set again when they change.
	pair             *netns.Pair
	pairUp, pairDown float64
	delay            time.Duration
	all              []*netsim.Duplex
}

func (l *fedLinks) add(c net.Conn, rtt time.Duration) *netsim.Duplex {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := netsim.NewDuplex(c, netsim.Link{Rate: l.up, Latency: rtt / 2}, netsim.Link{Rate: l.down, Latency: rtt / 2})
	l.all = append(l.all, d)
	return d
}

func (l *fedLinks) setRates(up, down float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pair != nil {
		if up != l.pairUp || down != l.pairDown {
			l.pairUp, l.pairDown = up, down
			l.pair.ShapeLink(8*up, 8*down, l.delay)
		}
		return
	}
	l.up, l.down = up, down
	for _, d := range l.all {
		d.SetRates(up, down)
	}
}

// bytes returns the bytes read and written on all the connections.
func (l *fedLinks) bytes() (read, written int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.all {
		r, w := d.Bytes()
		read, written = read+r, written+w
	}
	return read, written
}

// fedAwait waits until the hub holds version v, asking every 10 ms (and
// while the hub is away, restarting), and returns the shortest round trip
// of its questions.
func fedAwait(ctx context.Context, c hubpb.HubClient, v uint64) (time.Duration, error) {
	best := time.Duration(0)
	for away := 0; ; {
		t := time.Now()
		rep, err := c.Versions(ctx, &hubpb.VersionsRequest{})
		if status.Code(err) == codes.Unavailable && away < 600 {
			away++
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return 0, err
		}
		away = 0
		if d := time.Since(t); best == 0 || d < best {
			best = d
		}
		if slices.ContainsFunc(rep.Versions, func(x *hubpb.VersionInfo) bool { return x.Version == v }) {
			return best, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// fedRow is how one row moves the model and its updates.
type fedRow struct {
	Name      string    `json:"name"`
	PerTensor bool      `json:"per_tensor,omitempty"` // one RPC per tensor, both ways
	Base      bool      `json:"base,omitempty"`       // fetch deltas against the version held
	Down      string    `json:"down,omitempty"`       // the hub's recipe for fetches ("": lossless)
	Up        string    `json:"up"`                   // the gradient compressor of the updates
	Auto      bool      `json:"auto,omitempty"`       // Up's density chosen from the measured uplink
	Python    bool      `json:"python,omitempty"`     // Python clients (python/bench/fed_client.py over the package)
	Densities []float64 `json:"densities,omitempty"`
}

// upload returns the row's upload request (without round and weight).
func (row *fedRow) upload() (hub.UploadRequest, error) {
	spec, err := gradient.Parse(row.Up)
	if err != nil {
		return hub.UploadRequest{}, err
	}
	if !row.Auto {
		return hub.UploadRequest{Spec: spec}, nil
	}
	p, err := profile.Densities(row.Up, row.Densities)
	if err != nil {
		return hub.UploadRequest{}, err
	}
	return hub.UploadRequest{Profile: p}, nil
}

// fetch fetches version v as the row says; held is version heldV, the
// client's copy (deltas against it, where the row fetches them).
func (row *fedRow) fetch(ctx context.Context, c hubpb.HubClient, v uint64, held map[string]*codec.Tensor, heldV uint64) ([]*codec.Tensor, int, error) {
	var ts []*codec.Tensor
	got := func(t *codec.Tensor) error { ts = append(ts, t); return nil }
	// A fetch broken by the hub's restart resumes on the hub started
	// again.
	req := hub.Request{Version: v, RequireLossless: row.Down == "", Retries: 100, RetryWait: 50 * time.Millisecond,
		RetryMaxWait: time.Second}
	if row.Base && heldV == 0 {
		// The first version exactly, lossy deltas after it: the hub takes
		// them from the copy a client holds that followed the versions
		// (its shadow), so a copy that starts exact stays within a delta's
		// rounding of the model.
		req.RequireLossless = true
	}
	if row.PerTensor {
		// What a client of one RPC per tensor does: ask which tensors
		// there are, then fetch each alone, whole.
		names := slices.Sorted(maps.Keys(held))
		if len(names) == 0 {
			if _, err := hub.Fetch(ctx, c, req, got); err != nil {
				return nil, 0, err
			}
			return ts, 0, nil
		}
		for _, n := range names {
			r := req
			r.Specs = []hub.Spec{{Names: []string{n}}}
			if _, err := hub.Fetch(ctx, c, r, got); err != nil {
				return nil, 0, err
			}
		}
		return ts, 0, nil
	}
	if row.Base && heldV > 0 {
		req.Base = heldV
		req.BaseTensor = func(name string) *codec.Tensor { return held[name] }
	}
	res, err := hub.Fetch(ctx, c, req, got)
	var be *hub.BaseError
	if errors.As(err, &be) {
		// Fetch those again whole.
		keep := ts[:0]
		for _, t := range ts {
			if !slices.Contains(be.Names, t.Name) {
				keep = append(keep, t)
			}
		}
		ts = keep
		r := req
		r.Base, r.BaseTensor = 0, nil
		r.Specs = []hub.Spec{{Names: be.Names}}
		_, err = hub.Fetch(ctx, c, r, got)
	}
	return ts, res.Deltas, err
}

// send uploads the round's updates as the row says.
func (row *fedRow) send(ctx context.Context, c hubpb.HubClient, ob *gradient.Outbox, req hub.UploadRequest, update []*codec.Tensor) error {
	if !row.PerTensor {
		return hub.Upload(ctx, c, ob, req, update)
	}
	for i, t := range update {
		if err := hub.Upload(ctx, c, ob, req, []*codec.Tensor{t}); err != nil {
			// The tensors not sent go to the residual too, as they would
			// in one upload of them all: staged, then aborted.
			for _, u := range update[i+1:] {
				if _, serr := ob.Append(nil, u, req.Spec, 0); serr != nil {
					break
				}
			}
			ob.Abort()
			return err
		}
	}
	return nil
}

// fedNewest returns the newest version the hub holds, waiting for the hub
// while it is away.
func fedNewest(ctx context.Context, c hubpb.HubClient) (uint64, error) {
	for tries := 0; ; tries++ {
		rep, err := c.Versions(ctx, &hubpb.VersionsRequest{})
		if err == nil {
			var v uint64
			for _, x := range rep.Versions {
				v = max(v, x.Version)
			}
			if v > 0 {
				return v, nil
			}
		} else if status.Code(err) != codes.Unavailable || tries > 600 {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fedLogPath is client id's log in the run's directory.
func fedLogPath(dir string, id int) string {
	return filepath.Join(dir, "clients", fmt.Sprintf("%d.log", id))
}

// fedLog is a client's record of its updates: each frame when it is sent
// ('s'), when the hub acknowledged it ('c') and when the hub refused it
// ('r': the round had closed, or the tensor was counted from an earlier
// frame; the hub did not count it), as records of a kind
// byte, the round (uint64), the weight (float32), the frame's length
// (uint32) and the frame, little-endian. Written as they happen, so a
// killed client's log holds all but what it was writing.
type fedLog struct {
	f    *os.File
	recs []fedRecord
}

type fedRecord struct {
	kind   byte
	round  uint64
	weight float32
	frame  []byte
	name   string // the frame's tensor
}

func openFedLog(path string) (*fedLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	recs, err := readFedLog(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &fedLog{f: f, recs: recs}, nil
}

// readFedLog reads a log's whole records (a torn one at the end aside).
func readFedLog(path string) ([]fedRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []fedRecord
	for len(b) >= 17 {
		r := fedRecord{kind: b[0], round: binary.LittleEndian.Uint64(b[1:]), weight: math.Float32frombits(binary.LittleEndian.Uint32(b[9:]))}
		n := int(binary.LittleEndian.Uint32(b[13:]))
		if n > len(b)-17 {
			break
		}
		r.frame = b[17 : 17+n]
		name, err := frameTensor(r.frame)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r.name = name
		recs = append(recs, r)
		b = b[17+n:]
	}
	return recs, nil
}

func (l *fedLog) write(kind byte, round uint64, weight float32, frame []byte) {
	if l.f == nil {
		return
	}
	var hdr [17]byte
	hdr[0] = kind
	binary.LittleEndian.PutUint64(hdr[1:], round)
	binary.LittleEndian.PutUint32(hdr[9:], math.Float32bits(weight))
	binary.LittleEndian.PutUint32(hdr[13:], uint32(len(frame)))
	l.f.Write(append(hdr[:], frame...))
}

// committed returns the tensors whose update of round r the log holds as
// acknowledged (by the process before).
func (l *fedLog) committed(r uint64) map[string]bool {
	m := map[string]bool{}
	for _, rec := range l.recs {
		if rec.kind == 'c' && rec.round == r {
			m[rec.name] = true
		}
	}
	return m
}

// sent returns the last frame of tensor name the log holds as sent in
// round r (by the process before) and not refused.
func (l *fedLog) sent(r uint64, name string) ([]byte, bool) {
	var cands [][]byte
	for _, rec := range l.recs {
		if rec.round == r && rec.name == name {
			cands = sentCandidates(cands, rec)
		}
	}
	if len(cands) == 0 {
		return nil, false
	}
	return cands[len(cands)-1], true
}

// sentCandidates adds a record of one tensor in one round to the frames of
// it the hub may have counted, in the order sent: a sent frame joins
// them, a refused one leaves them.
func sentCandidates(cands [][]byte, rec fedRecord) [][]byte {
	switch rec.kind {
	case 's':
		return append(cands, rec.frame)
	case 'r':
		for i := len(cands) - 1; i >= 0; i-- {
			if bytes.Equal(cands[i], rec.frame) {
				return slices.Delete(cands, i, i+1)
			}
		}
	}
	return cands
}

func (l *fedLog) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// frameTensor returns the name of the tensor of an update's frame.
func frameTensor(frame []byte) (string, error) {
	br := bytes.NewReader(frame)
	h, _, err := codec.ReadFrameHeader(br, br, codec.Limits{}, nil)
	if err != nil {
		return "", err
	}
	if len(h.Entries) != 1 {
		return "", fmt.Errorf("%w: an update frame of %d tensors", codec.ErrCorrupt, len(h.Entries))
	}
	return h.Entries[0].Tensor.Name, nil
}
