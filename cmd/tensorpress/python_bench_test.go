package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/internal/rateplot"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// BenchmarkPythonProxy: a Python grpcio client sends a real model's
// weights and a real client update (the FL run's snapshot,
// testvectors/fl: 438 KB each, float32) to a Python server and gets them
// back, 5 rounds, over a simulated link (the same relay, both ways at the
// rate, half the RTT each way), directly and through the two proxies
// (the link between them). It reports, per link, the time through the
// proxies over the direct time (below 1: the proxies win); on loopback,
// the medians of 9 exchanges each, taken in turns. With
// TENSORPRESS_PLOT=FILE (.svg or .png) it plots the speedup (the inverse)
// against the link rate.
//
// The shaped links listen on an address of this host that is not a
// loopback one (where it has one), as a link between two machines would:
// the proxies then measure the link and code the hop; over the unshaped
// loopback they send the messages as they are.
//
//	go test -run '^$' -bench PythonProxy -benchtime 1x ./cmd/tensorpress
//	TENSORPRESS_PLOT=$PWD/docs/proxy-speedup.svg go test -run '^$' -bench PythonProxy -benchtime 1x ./cmd/tensorpress
func BenchmarkPythonProxy(b *testing.B) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import grpc, numpy").Run(); err != nil {
		b.Skipf("needs %s with grpcio and numpy: %v", py, err)
	}
	dir := b.TempDir()
	var files []string
	for _, name := range []string{"weights", "update"} {
		st, err := tensorfile.OpenSafetensorsFile(filepath.Join("..", "..", "testvectors", "fl", name+".safetensors"))
		if err != nil {
			b.Fatal(err)
		}
		var raw []byte
		for _, ti := range st.Tensors() {
			x, err := st.Read(ti.Name)
			if err != nil {
				b.Fatal(err)
			}
			raw = append(raw, x.Data...)
		}
		st.Close()
		f := filepath.Join(dir, name+".f32")
		if err := os.WriteFile(f, raw, 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, f)
	}
	srv := exec.Command(py, "testdata/peer.py", "server")
	stdin, _ := srv.StdinPipe()
	out, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close()
		srv.Wait()
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "PORT ") {
		b.Fatalf("server: %q", sc.Text())
	}
	serverAddr := "127.0.0.1:" + strings.TrimPrefix(sc.Text(), "PORT ")
	go io.Copy(io.Discard, out)

	exchange := func(target string) float64 {
		res, err := exec.Command(py, "testdata/peer.py", "exchange", target, files[0], files[1], "5").Output()
		if err != nil {
			b.Fatalf("client: %v: %s", err, res)
		}
		secs, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(string(res), "TIME")), 64)
		if err != nil {
			b.Fatalf("client said %q", res)
		}
		return secs
	}
	type point struct{ rate, speedup float64 }
	var points []point
	for b.Loop() {
		points = points[:0]
		for _, l := range []struct {
			name string
			link netsim.Link
		}{
			{"loopback", netsim.Link{}},
			{"1Gbit", netsim.Link{Rate: 1e9 / 8, Latency: 5e6}},
			{"300Mbit", netsim.Link{Rate: 300e6 / 8, Latency: 5e6}},
			{"100Mbit", netsim.Link{Rate: 100e6 / 8, Latency: 5e6}},
			{"30Mbit", netsim.Link{Rate: 30e6 / 8, Latency: 5e6}},
			{"10Mbit", netsim.Link{Rate: 10e6 / 8, Latency: 5e6}},
		} {
			// Direct: client -> link -> server.
			host := "127.0.0.1"
			if l.link != (netsim.Link{}) {
				host = linkHost()
			}
			// On loopback an exchange takes some 20 ms, and the noise of
			// these shared cores is a good part of that: the median of
			// 9, taken in turns, direct and through the proxies.
			reps := 1
			if l.link == (netsim.Link{}) {
				reps = 9
			}
			direct := startRelay(b, host, serverAddr, l.link)
			// Through the proxies: client -> local -> link -> remote -> server.
			ctx, cancel := context.WithCancel(context.Background())
			proxyContext = func() context.Context { return ctx }
			// The remote proxy listens where the link arrives, as on
			// another machine: on a shaped link it must not take its
			// peer for loopback (it would send its responses uncoded).
			remote := startProxyB(b, "remote", net.JoinHostPort(host, "0"), serverAddr)
			relay := startRelay(b, host, remote.addr, l.link)
			local := startProxyB(b, "local", "127.0.0.1:0", relay.addr)
			var ds, ps []float64
			for range reps {
				ds = append(ds, exchange(direct.addr))
				ps = append(ps, exchange(local.addr))
			}
			direct.close()
			d, p := median(ds), median(ps)
			cancel()
			<-local.done
			relay.close()
			<-remote.done
			b.Logf("%s: direct %.4f s, through the proxies %.4f s: %.2fx", l.name, d, p, p/d)
			b.ReportMetric(p/d, "proxied/direct-"+l.name)
			points = append(points, point{8 * l.link.Rate, d / p})
		}
	}
	if path := os.Getenv("TENSORPRESS_PLOT"); path != "" {
		xys := make(plotter.XYs, len(points))
		for i, pt := range points {
			if pt.rate == 0 {
				pt.rate = unshaped
			}
			xys[i] = plotter.XY{X: pt.rate, Y: pt.speedup}
		}
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
		if err := plotProxy(path, xys); err != nil {
			b.Fatal(err)
		}
	}
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// unshaped is where the plot puts the loopback run on its rate axis.
const unshaped = 10e9

// plotProxy draws the direct exchange's time over the proxied one's (above
// 1: the proxies win) against the link rate, with the break-even line.
func plotProxy(path string, xys plotter.XYs) error {
	p := plot.New()
	p.Title.Text = "Python grpcio peers: two tensorpress proxies against a direct connection"
	p.X.Label.Text = "link rate (10 ms RTT; loopback: no shaping, no RTT)"
	p.Y.Label.Text = "direct time / time through the proxies"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = rateplot.RateTicks{Unshaped: unshaped, Label: "loopback"}
	p.Add(plotter.NewGrid())
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, pts.Color, pts.Shape = plotutil.Color(0), plotutil.Color(0), plotutil.Shape(0)
	even, err := plotter.NewLine(plotter.XYs{{X: xys[0].X, Y: 1}, {X: xys[len(xys)-1].X, Y: 1}})
	if err != nil {
		return err
	}
	even.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(even, l, pts)
	leg := plot.NewLegend()
	leg.Add("through the proxies", l, pts)
	leg.Add("break-even", even)
	leg.Add("(above: the proxies win)")
	p.Y.Min = 0
	return rateplot.SaveWithLegend(p, leg, 7*vg.Inch, 4.5*vg.Inch, 2.8*vg.Inch, path)
}

func startProxyB(b *testing.B, side, listen, to string) *runningProxy {
	b.Helper()
	p := &runningProxy{done: make(chan int, 1), errb: new(syncBuffer)}
	go func() {
		p.done <- run([]string{"proxy", "--side", side, "--listen", listen, "--to", to, "--insecure"}, new(bytes.Buffer), p.errb) // the remote listens where the simulated link arrives, off loopback
	}()
	for range 2000 {
		if i := strings.Index(p.errb.String(), "msg=listening addr="); i >= 0 {
			f := strings.Fields(p.errb.String()[i+len("msg=listening addr="):])
			p.addr = f[0]
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s proxy did not start: %s", side, p.errb.String())
	return nil
}

// relay forwards connections to target across a simulated link, both
// directions shaped.
type relay struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	cs   []net.Conn
}

func startRelay(b *testing.B, host, target string, l netsim.Link) *relay {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		b.Fatal(err)
	}
	r := &relay{addr: ln.Addr().String(), ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			var a, z net.Conn = c, s
			if l != (netsim.Link{}) {
				a, z = netsim.Shape(c, l), netsim.Shape(s, l)
			}
			r.mu.Lock()
			r.cs = append(r.cs, a, z)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); io.Copy(z, c); z.Close() }()
			go func() { defer r.wg.Done(); io.Copy(a, s); a.Close() }()
		}
	}()
	return r
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.cs {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// linkHost is an IPv4 address of this host that is not a loopback one,
// else 127.0.0.1.
func linkHost() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}
