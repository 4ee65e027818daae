package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
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
)

const hubText = `N clients fetch a published model at once, from a server in a process of
its own, over loopback TCP with a simulated round trip and rate: the hub
(one batched, pull-based fetch per client, chunks encoded once), against
what FL frameworks do without one: one RPC per tensor with the tensor's
bytes as they are, and the same with grpc-go's gzip. Each row: the time
until every client has every tensor, the bytes the server wrote, RPCs,
and the server's CPU seconds (user + system) and peak RSS.

The model: --tensors N-tensor synthetic model (every fourth tensor
64-192 KiB of N(0, 0.02) float32 weights, the rest small), the same on both
sides.
`

// hubServeEnv tells a re-executed codec-bench (or its test binary) to be a
// hub-bench server: "MODE TENSORS".
const hubServeEnv = "CODEC_BENCH_HUB_SERVE"

// hubModel is the synthetic model of the hub command.
func hubModel(n int) []*codec.Tensor {
	rng := rand.New(rand.NewPCG(7, 7))
	var ts []*codec.Tensor
	for i := range n {
		elems := 64 + i%7*100
		if i%4 == 0 {
			elems = (1 + i%3) << 14
		}
		data := make([]byte, elems*4)
		for j := 0; j < len(data); j += 4 {
			binary.LittleEndian.PutUint32(data[j:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
		}
		ts = append(ts, &codec.Tensor{Name: fmt.Sprintf("layer%03d.weight", i), DType: codec.F32, Shape: []int64{int64(elems)}, Data: data})
	}
	return ts
}

// countingListener counts the bytes the server writes.
type countingListener struct {
	net.Listener
	n *atomic.Int64
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
	return countingConn{c, l.n}, nil
}

// hubServe is the server process: MODE is hub or per-tensor; it prints
// its address, serves until stdin closes, then prints the bytes it wrote
// and the RPCs it served.
func hubServe(spec string) error {
	var mode string
	var n int
	if _, err := fmt.Sscan(spec, &mode, &n); err != nil {
		return fmt.Errorf("hub server: %q: %w", spec, err)
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
		return fmt.Errorf("hub server: unknown mode %q", mode)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go s.Serve(countingListener{ln, &written})
	fmt.Printf("ADDR %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	s.Stop()
	fmt.Printf("STATS %d %d %d\n", written.Load(), rpcs.Load(), peakRSS())
	return nil
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

// hubRow is one measured configuration.
type hubRow struct {
	Mode          string  `json:"mode"`
	Clients       int     `json:"clients"`
	Tensors       int     `json:"tensors"`
	ModelBytes    int64   `json:"model_bytes"`
	RTTms         float64 `json:"rtt_ms"`
	Seconds       float64 `json:"seconds"`
	ServerBytes   int64   `json:"server_bytes"`
	RPCs          int64   `json:"rpcs"`
	ServerCPU     float64 `json:"server_cpu_seconds"`
	ServerRSSMiB  float64 `json:"server_peak_rss_mib"`
	ClientsRSSMiB float64 `json:"clients_peak_rss_mib"`
	VsHub         float64 `json:"time_vs_hub"`
}

func cmdHub(args []string, stdout, stderr io.Writer) error {
	fl := newFlags("hub", "hub [flags]", hubText, stderr)
	clients := fl.Int("clients", 8, "clients fetching at once")
	tensors := fl.Int("tensors", 160, "tensors in the synthetic model")
	rtt := fl.Duration("rtt", 10*time.Millisecond, "round trip added by the simulated link (half each way)")
	format := fl.String("format", "table", "output: table or json (JSON Lines)")
	if _, err := fl.parse(args, 0, 0); err != nil {
		return err
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
	m := hubModel(*tensors)
	var size int64
	for _, t := range m {
		size += int64(len(t.Data))
	}
	var rows []*hubRow
	for _, mode := range []string{"hub", "per-tensor", "per-tensor-gzip"} {
		fmt.Fprintf(stderr, "hub: %s, %d clients, %d tensors (%d bytes), rtt %v\n", mode, *clients, *tensors, size, *rtt)
		r, err := hubRun(mode, m, *clients, *rtt)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		r.Tensors, r.ModelBytes = *tensors, size
		rows = append(rows, r)
	}
	for _, r := range rows {
		r.VsHub = r.Seconds / rows[0].Seconds
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tCLIENTS\tSECONDS\tVS HUB\tSERVER BYTES\tRPCS\tSERVER CPU s\tSERVER RSS MiB")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.2fx\t%d\t%d\t%.3f\t%.1f\n", r.Mode, r.Clients, r.Seconds, r.VsHub,
			r.ServerBytes, r.RPCs, r.ServerCPU, r.ServerRSSMiB)
	}
	return tw.Flush()
}

// hubRun starts a server process for mode and lets clients fetch the
// model from it at once.
func hubRun(mode string, m []*codec.Tensor, clients int, rtt time.Duration) (*hubRow, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	srvMode := mode
	if strings.HasPrefix(mode, "per-tensor") {
		srvMode = "per-tensor"
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", hubServeEnv, srvMode, len(m)))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		return nil, fmt.Errorf("server: %q, %v", line, err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err != nil || rtt == 0 {
				return c, err
			}
			// The whole round trip on what the clients send: a request
			// reaches the server rtt after it left.
			return netsim.Shape(c, netsim.Link{Latency: rtt}), nil
		}))
	if err != nil {
		return nil, err
	}
	fetch := func() error {
		switch mode {
		case "hub":
			n := 0
			_, err := hub.Fetch(context.Background(), hubpb.NewHubClient(conn), hub.Request{Credit: 16},
				func(*codec.Tensor) error { n++; return nil })
			if err == nil && n != len(m) {
				err = fmt.Errorf("%d of %d tensors", n, len(m))
			}
			return err
		default:
			opts := []grpc.CallOption{grpc.ForceCodec(grpctest.RawCodec{})}
			if mode == "per-tensor-gzip" {
				opts = append(opts, grpc.UseCompressor(gzip.Name))
			}
			for _, t := range m {
				req := []byte(t.Name)
				var data []byte
				if err := conn.Invoke(context.Background(), "/openfl.Aggregator/GetAggregatedTensor", &req, &data, opts...); err != nil {
					return err
				}
				if len(data) != len(t.Data) {
					return fmt.Errorf("%q: %d bytes", t.Name, len(data))
				}
			}
			return nil
		}
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- fetch()
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	conn.Close()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	stdin.Close()
	r := &hubRow{Mode: mode, Clients: clients, RTTms: float64(rtt) / 1e6, Seconds: secs}
	var rss int64
	if line, err = out.ReadString('\n'); err == nil {
		fmt.Sscanf(strings.TrimSpace(line), "STATS %d %d %d", &r.ServerBytes, &r.RPCs, &rss)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	r.ServerCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	r.ServerRSSMiB = float64(rss) / (1 << 20)
	return r, nil
}
