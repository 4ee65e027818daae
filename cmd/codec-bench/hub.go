package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/internal/rateplot"
)

const hubText = `N clients fetch a published model at once: the hub (one batched,
pull-based fetch per client, chunks encoded once) against what FL
frameworks do without one: one RPC per tensor with the tensor's bytes as
they are, and the same with grpc-go's gzip. The server and the clients run
in two processes of their own (this program again), each client with a TCP
connection of its own to the server over loopback.

Every mode runs over plain loopback and over a simulated link
(--loopback=false: over the link alone; --rtt 0 --rate 0: over loopback
alone). On the link, what the server sends on each connection is paced
to --rate and delayed by half of --rtt; what the clients send (requests,
credit grants: small) is delayed by the other half, not paced. The rate
is each connection's: the clients do not share it. Loopback's own latency
and both sides' CPU come on top.

Each row: the time until every client has every tensor (taken in the
clients' process, from before their first dial), the bytes the server and
the clients wrote, the RPCs the server served, and the CPU seconds (user +
system, start-up and, for the server, building the model included) and
peak RSS of the server's process and of the clients' (all N clients in it;
each drops a tensor once it has checked its size).

The model: --tensors N-tensor synthetic model (every fourth tensor
64-192 KiB of N(0, 0.02) float32 weights, the rest small), the same on both
sides.
`

// A re-executed codec-bench (or its test binary) is the server of 'hub'
// when hubServeEnv is set ("MODE TENSORS RATE LATENCY": mode hub or
// per-tensor, the rate in bytes per second and the one-way latency in
// nanoseconds of what it sends), or its clients when hubFetchEnv is
// ("MODE TENSORS CLIENTS ADDR LATENCY").
const (
	hubServeEnv = "CODEC_BENCH_HUB_SERVE"
	hubFetchEnv = "CODEC_BENCH_HUB_FETCH"
)

// hubChild runs this process as the server or the clients of 'hub' if the
// environment asks for one of them; ok is false if it asks for neither.
func hubChild() (ok bool, err error) {
	if spec := os.Getenv(hubServeEnv); spec != "" {
		if err := hubServe(spec); err != nil {
			return true, fmt.Errorf("codec-bench hub server: %w", err)
		}
		return true, nil
	}
	if spec := os.Getenv(hubFetchEnv); spec != "" {
		if err := hubFetch(spec); err != nil {
			return true, fmt.Errorf("codec-bench hub clients: %w", err)
		}
		return true, nil
	}
	return false, nil
}

// hubTensorName and hubTensorElems are tensor i's name and number of
// elements in the hub command's model.
func hubTensorName(i int) string { return fmt.Sprintf("layer%03d.weight", i) }

func hubTensorElems(i int) int {
	if i%4 == 0 {
		return (1 + i%3) << 14
	}
	return 64 + i%7*100
}

// hubModel is the synthetic model of the hub command.
func hubModel(n int) []*codec.Tensor {
	rng := rand.New(rand.NewPCG(7, 7))
	var ts []*codec.Tensor
	for i := range n {
		elems := hubTensorElems(i)
		data := make([]byte, elems*4)
		for j := 0; j < len(data); j += 4 {
			binary.LittleEndian.PutUint32(data[j:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
		}
		ts = append(ts, &codec.Tensor{Name: hubTensorName(i), DType: codec.F32, Shape: []int64{int64(elems)}, Data: data})
	}
	return ts
}

// countingListener counts the bytes the server writes, and shapes its
// connections' writes with link when link is not zero.
type countingListener struct {
	net.Listener
	n    *atomic.Int64
	link netsim.Link
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	k, err := c.Conn.Write(p)
	c.n.Add(int64(k))
	return k, err
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.link != (netsim.Link{}) {
		c = netsim.Shape(c, l.link)
	}
	return countingConn{c, l.n}, nil
}

// hubServe is the server process (hubServeEnv): it prints its address,
// serves until stdin closes, then prints the bytes it wrote, the RPCs it
// served and its peak RSS.
func hubServe(spec string) error {
	var mode string
	var n int
	var rate float64
	var latency time.Duration
	if _, err := fmt.Sscan(spec, &mode, &n, &rate, &latency); err != nil {
		return fmt.Errorf("%q: %w", spec, err)
	}
	m := hubModel(n)
	var written, rpcs atomic.Int64
	count := grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		rpcs.Add(1)
		return h(srv, ss)
	})
	var s *grpc.Server
	switch mode {
	case "hub":
		h, err := hub.New()
		if err != nil {
			return err
		}
		if err := h.Publish(1, m); err != nil {
			return err
		}
		s = grpc.NewServer(count)
		hubpb.RegisterHubServer(s, hub.NewServer(h))
	case "per-tensor":
		byName := map[string][]byte{}
		for _, t := range m {
			byName[t.Name] = t.Data
		}
		s = grpc.NewServer(count, grpc.ForceServerCodec(grpctest.RawCodec{}),
			grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
				var req []byte
				if err := st.RecvMsg(&req); err != nil {
					return err
				}
				d, ok := byName[string(req)]
				if !ok {
					return fmt.Errorf("no tensor %q", req)
				}
				return st.SendMsg(&d)
			}))
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go s.Serve(countingListener{ln, &written, netsim.Link{Rate: rate, Latency: latency}})
	fmt.Printf("ADDR %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	s.Stop()
	fmt.Printf("STATS %d %d %d\n", written.Load(), rpcs.Load(), peakRSS())
	return nil
}

// hubFetch is the clients' process (hubFetchEnv): CLIENTS clients, each
// with a connection of its own, fetch the model from ADDR at once; it
// prints the seconds until all of them have it, the bytes they wrote and
// its peak RSS.
func hubFetch(spec string) error {
	var mode, addr string
	var n, clients int
	var latency time.Duration
	if _, err := fmt.Sscan(spec, &mode, &n, &clients, &addr, &latency); err != nil {
		return fmt.Errorf("%q: %w", spec, err)
	}
	var written atomic.Int64
	conns := make([]*grpc.ClientConn, clients)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
				if err != nil {
					return nil, err
				}
				if latency > 0 {
					c = netsim.Shape(c, netsim.Link{Latency: latency})
				}
				return countingConn{c, &written}, nil
			}))
		if err != nil {
			return err
		}
		defer c.Close()
		conns[i] = c
	}
	size := make(map[string]int, n) // bytes by name
	for i := range n {
		size[hubTensorName(i)] = 4 * hubTensorElems(i)
	}
	fetch := func(conn *grpc.ClientConn) error {
		switch mode {
		case "hub":
			k := 0
			_, err := hub.Fetch(context.Background(), hubpb.NewHubClient(conn), hub.Request{Credit: 16},
				func(t *codec.Tensor) error {
					if want, ok := size[t.Name]; !ok || len(t.Data) != want {
						return fmt.Errorf("%q: %d bytes", t.Name, len(t.Data))
					}
					k++
					return nil
				})
			if err == nil && k != n {
				err = fmt.Errorf("%d of %d tensors", k, n)
			}
			return err
		case "per-tensor", "per-tensor-gzip":
			opts := []grpc.CallOption{grpc.ForceCodec(grpctest.RawCodec{})}
			if mode == "per-tensor-gzip" {
				opts = append(opts, grpc.UseCompressor(gzip.Name))
			}
			for i := range n {
				req := []byte(hubTensorName(i))
				var data []byte
				if err := conn.Invoke(context.Background(), "/openfl.Aggregator/GetAggregatedTensor", &req, &data, opts...); err != nil {
					return err
				}
				if len(data) != size[string(req)] {
					return fmt.Errorf("%q: %d bytes", req, len(data))
				}
			}
			return nil
		}
		return fmt.Errorf("unknown mode %q", mode)
	}
	t0 := time.Now()
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { errs[i] = fetch(c) })
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("DONE %g %d %d\n", secs, written.Load(), peakRSS())
	return nil
}

// hubLink is a simulated link: the rate of what the server sends (bits
// per second, 0: unlimited) and the round trip, half each way; zero:
// plain loopback.
type hubLink struct {
	rate float64
	rtt  time.Duration
}

func (l hubLink) String() string {
	if l == (hubLink{}) {
		return "loopback"
	}
	rate := "unlimited"
	if l.rate > 0 {
		rate = rateName(l.rate)
	}
	return fmt.Sprintf("%s, rtt %v", rate, l.rtt)
}

// hubRow is one measured configuration.
type hubRow struct {
	Link          string  `json:"link"` // "loopback", or the simulated link's rate and RTT
	Rate          float64 `json:"rate"` // bits per second of what the server sends on each connection, 0: unlimited
	RTTms         float64 `json:"rtt_ms"`
	Mode          string  `json:"mode"`
	Clients       int     `json:"clients"`
	Tensors       int     `json:"tensors"`
	ModelBytes    int64   `json:"model_bytes"`
	Seconds       float64 `json:"seconds"`
	ServerBytes   int64   `json:"server_bytes"`
	ClientBytes   int64   `json:"client_bytes"`
	RPCs          int64   `json:"rpcs"`
	ServerCPU     float64 `json:"server_cpu_seconds"`
	ServerRSSMiB  float64 `json:"server_peak_rss_mib"`
	ClientsCPU    float64 `json:"clients_cpu_seconds"`
	ClientsRSSMiB float64 `json:"clients_peak_rss_mib"`
	VsHub         float64 `json:"time_vs_hub"` // seconds over the hub's on the same link
}

func cmdHub(args []string, stdout, stderr io.Writer) error {
	fl := newFlags("hub", "hub [flags]", hubText, stderr)
	clients := fl.Int("clients", 8, "clients fetching at once")
	tensors := fl.Int("tensors", 160, "tensors in the synthetic model")
	rtt := fl.Duration("rtt", 10*time.Millisecond, "round trip of the simulated link, half on what each side sends (0: none)")
	rateFlag := fl.String("rate", "100Mbit", "`rates` of what the server sends on each client's connection over the simulated link, comma-separated (bits per second with a unit: 100Mbit, 1Gbit; 0: unlimited)")
	plotOut := fl.String("plot", "", "plot each baseline's time over the hub's against the link rate to `FILE` (.svg or .png)")
	loopback := fl.Bool("loopback", true, "also run every mode over plain loopback, without the simulated link")
	format := fl.String("format", "table", "output: table or json (JSON Lines)")
	if _, err := fl.parse(args, 0, 0); err != nil {
		return err
	}
	rates, err := parseHubRates(*rateFlag)
	if err != nil {
		return err
	}
	if *plotOut != "" && !strings.HasSuffix(*plotOut, ".svg") && !strings.HasSuffix(*plotOut, ".png") {
		return usagef("--plot %q: want a .svg or .png file", *plotOut)
	}
	switch {
	case *clients < 1 || *clients > 1024:
		return usagef("--clients %d outside [1, 1024]", *clients)
	case *tensors < 1 || *tensors > 100000:
		return usagef("--tensors %d outside [1, 100000]", *tensors)
	case *rtt < 0:
		return usagef("--rtt %v is negative", *rtt)
	case *format != "table" && *format != "json":
		return usagef("--format %q: want table or json", *format)
	}
	rows, err := hubRows(hubLinks(rates, *rtt, *loopback), *tensors, *clients, stderr)
	if err != nil {
		return err
	}
	if *plotOut != "" {
		if err := plotHub(*plotOut, rows); err != nil {
			return err
		}
	}
	return writeHubRows(stdout, *format, rows)
}

// parseHubRates parses --rate: rates in bits per second with a unit,
// comma-separated.
func parseHubRates(list string) ([]float64, error) {
	var rates []float64
	for _, p := range strings.Split(list, ",") {
		r, err := parseRate("--rate", p)
		if err != nil {
			return nil, err
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// hubLinks returns the links the hub benchmark runs over: plain loopback
// (with loopback) and a simulated link at each rate with rtt; plain
// loopback when that leaves none.
func hubLinks(rates []float64, rtt time.Duration, loopback bool) []hubLink {
	var links []hubLink
	if loopback {
		links = append(links, hubLink{})
	}
	for _, r := range rates {
		if l := (hubLink{r, rtt}); l != (hubLink{}) {
			links = append(links, l)
		}
	}
	if len(links) == 0 {
		links = []hubLink{{}}
	}
	return links
}

// hubRows runs every mode over every link, the hub first on each, with
// progress on stderr.
func hubRows(links []hubLink, tensors, clients int, stderr io.Writer) ([]*hubRow, error) {
	var size int64
	for i := range tensors {
		size += 4 * int64(hubTensorElems(i))
	}
	var rows []*hubRow
	for _, link := range links {
		var hubSecs float64
		for _, mode := range []string{"hub", "per-tensor", "per-tensor-gzip"} {
			fmt.Fprintf(stderr, "hub: %s: %s, %d clients, %d tensors (%d bytes)\n", link, mode, clients, tensors, size)
			r, err := hubRun(mode, tensors, clients, link)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", link, mode, err)
			}
			r.Tensors, r.ModelBytes = tensors, size
			if mode == "hub" {
				hubSecs = r.Seconds
			}
			r.VsHub = r.Seconds / hubSecs
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// writeHubRows writes the rows as JSON Lines or as a table.
func writeHubRows(stdout io.Writer, format string, rows []*hubRow) error {
	if format == "json" {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tMODE\tSECONDS\tVS HUB\tSERVER BYTES\tCLIENT BYTES\tRPCS\tSERVER CPU s\tSERVER RSS MiB\tCLIENTS CPU s\tCLIENTS RSS MiB")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.2fx\t%d\t%d\t%d\t%.3f\t%.1f\t%.3f\t%.1f\n", r.Link, r.Mode, r.Seconds, r.VsHub,
			r.ServerBytes, r.ClientBytes, r.RPCs, r.ServerCPU, r.ServerRSSMiB, r.ClientsCPU, r.ClientsRSSMiB)
	}
	return tw.Flush()
}

// childExe is the program that fed and hub start as their processes of
// servers and clients: this one, which takes those roles from its
// environment (fedChild, hubChild).
var childExe = os.Executable

// hubRun starts a server process for mode and a process of clients that
// fetch the model from it at once, over link.
func hubRun(mode string, tensors, clients int, link hubLink) (*hubRow, error) {
	exe, err := childExe()
	if err != nil {
		return nil, err
	}
	srvMode := mode
	if strings.HasPrefix(mode, "per-tensor") {
		srvMode = "per-tensor"
	}
	half := link.rtt / 2
	srv := exec.Command(exe)
	srv.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %g %d", hubServeEnv, srvMode, tensors, link.rate/8, int64(half)))
	stdin, err := srv.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		return nil, err
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return nil, err
	}
	defer srv.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		return nil, fmt.Errorf("server: %q, %v", line, err)
	}

	cli := exec.Command(exe)
	cli.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %s %d", hubFetchEnv, mode, tensors, clients, addr, int64(link.rtt-half)))
	cli.Stderr = os.Stderr
	done, err := cli.Output()
	if err != nil {
		return nil, fmt.Errorf("clients: %w", err)
	}
	r := &hubRow{Link: link.String(), Rate: link.rate, RTTms: float64(link.rtt) / 1e6, Mode: mode, Clients: clients}
	var rss int64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(done)), "DONE %g %d %d", &r.Seconds, &r.ClientBytes, &rss); err != nil {
		return nil, fmt.Errorf("clients: %q: %w", done, err)
	}
	r.ClientsCPU = (cli.ProcessState.UserTime() + cli.ProcessState.SystemTime()).Seconds()
	r.ClientsRSSMiB = float64(rss) / (1 << 20)

	stdin.Close()
	if line, err = out.ReadString('\n'); err == nil {
		fmt.Sscanf(strings.TrimSpace(line), "STATS %d %d %d", &r.ServerBytes, &r.RPCs, &rss)
	}
	if err := srv.Wait(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	r.ServerCPU = (srv.ProcessState.UserTime() + srv.ProcessState.SystemTime()).Seconds()
	r.ServerRSSMiB = float64(rss) / (1 << 20)
	return r, nil
}

// peakRSS returns this process's peak resident set in bytes (VmHWM in
// /proc/self/status; 0 where there is none). A child's rusage is no use
// for it: Go starts children with vfork, and Linux keeps the high-water
// mark of the memory an exec replaces, so a child's ru_maxrss is at least
// the parent's peak at the time of the exec.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib); err == nil {
				return kib << 10
			}
		}
	}
	return 0
}

// plotHub draws each baseline's time over the hub's (how much faster the
// hub is) against the link rate, one line per baseline, loopback (no
// simulated link) at the right, the legend outside the data.
func plotHub(path string, rows []*hubRow) error {
	p := plot.New()
	p.Title.Text = "tensorpress hub: time of one RPC per tensor over the hub's"
	p.X.Label.Text = "link rate (each client's connection)"
	p.Y.Label.Text = "baseline time / hub time"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = rateplot.RateTicks{Unshaped: 10e9, Label: "loopback, no RTT"}
	p.Add(plotter.NewGrid())
	lines := map[string]plotter.XYs{}
	var order []string
	for _, r := range rows {
		if r.Mode == "hub" || !(r.VsHub > 0) {
			continue
		}
		x := r.Rate
		if x == 0 {
			x = 10e9
		}
		if _, ok := lines[r.Mode]; !ok {
			order = append(order, r.Mode)
		}
		lines[r.Mode] = append(lines[r.Mode], plotter.XY{X: x, Y: r.VsHub})
	}
	leg := plot.NewLegend()
	names := map[string]string{"per-tensor": "one RPC per tensor, plain bytes", "per-tensor-gzip": "one RPC per tensor, gzip"}
	for i, mode := range order {
		xys := lines[mode]
		sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color, pts.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		leg.Add(names[mode], l, pts)
	}
	p.Y.Min = 0
	if err := rateplot.SaveWithLegend(p, leg, 8*vg.Inch, 5*vg.Inch, 2.6*vg.Inch, path); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}
