package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/internal/testcert"
)

// python is Debian's interpreter with grpcio and numpy, or skips.
func python(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import grpc, numpy").Run(); err != nil {
		t.Skipf("the Python peers need %s with grpcio and numpy (Debian's python3-grpcio, python3-numpy; make test installs them): %v", py, err)
	}
	return py
}

// pythonServer starts the Python peer's server (stopped when the test
// ends) and returns its address and the lines it prints after its port.
func pythonServer(t *testing.T, py string) (string, <-chan string) {
	t.Helper()
	srv := exec.Command(py, "testdata/peer.py", "server")
	stdin, _ := srv.StdinPipe()
	out, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		srv.Wait()
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "PORT ") {
		t.Fatalf("server: %q", lines.Text())
	}
	rest := make(chan string, 64)
	go func() {
		for lines.Scan() {
			select {
			case rest <- lines.Text():
			default: // nobody reads them: drop
			}
		}
		close(rest)
	}()
	return "127.0.0.1:" + strings.TrimPrefix(lines.Text(), "PORT "), rest
}

// TestPythonThroughProxies: a Python grpcio client and server, no code of
// ours in them, talk through a local and a remote proxy: every message
// (float32 weights from 1 KiB; 256 MiB with TENSORPRESS_BIG=1) comes back
// bit for bit with the server's SHA-256 matching the client's, a
// bidirectional stream too, and the client's deadline and cancellation
// reach the Python server. The proxies talk in plain text, then with
// mutual TLS between them.
func TestPythonThroughProxies(t *testing.T) {
	py := python(t)
	t.Run("plain", func(t *testing.T) { testPythonThroughProxies(t, py, nil, nil) })
	t.Run("mTLS", func(t *testing.T) {
		certs, err := testcert.Write(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		testPythonThroughProxies(t, py, mtlsArgs(certs, "remote"), mtlsArgs(certs, "local"))
	})
}

func testPythonThroughProxies(t *testing.T, py string, remoteArgs, localArgs []string) {
	serverAddr, slow := pythonServer(t, py)

	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	remote := startProxy(t, "remote", serverAddr, remoteArgs...)
	// The proxies talk over loopback, where they would send the messages
	// as they are: a configured bandwidth makes them code the hop as over
	// a wide-area link. 1 Mbit/s: so slow that coding pays even when the
	// coders crawl (under -race on loaded cores they measured slower than
	// 10 Mbit/s once, and the hop was stored raw).
	local := startProxy(t, "local", remote.addr, append([]string{"--metrics", "127.0.0.1:0", "--bandwidth", "1Mbit"}, localArgs...)...)
	defer func() {
		cancel()
		local.wait(t)
		remote.wait(t)
	}()

	sizes := "1024,1048576,16777216,67108864"
	if os.Getenv("TENSORPRESS_BIG") != "" {
		sizes += ",268435456"
	}
	cl := exec.Command(py, "testdata/peer.py", "client", local.addr, sizes)
	cl.Stderr = os.Stderr
	t0 := time.Now()
	res, err := cl.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, res)
	}
	t.Logf("client through the proxies in %v:\n%s", time.Since(t0).Round(time.Millisecond), res)
	for _, n := range strings.Split(sizes, ",") {
		if !strings.Contains(string(res), "ECHO "+n+" ok") {
			t.Errorf("echo of %s bytes did not come back whole", n)
		}
	}
	for _, want := range []string{"STREAM 4 ok", "DEADLINE DEADLINE_EXCEEDED", "CANCEL CANCELLED"} {
		if !strings.Contains(string(res), want) {
			t.Errorf("the client did not say %q", want)
		}
	}
	// The server saw the deadline end one call and the cancellation the
	// other.
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(seen) < 2 {
		select {
		case l, ok := <-slow:
			if !ok {
				t.Fatalf("server ended; saw %v", seen)
			}
			seen[l] = true
		case <-timeout:
			t.Fatalf("the server saw %v, want the deadline and the cancellation", seen)
		}
	}
	if !seen["SLOW deadline"] || !seen["SLOW cancelled"] {
		t.Errorf("the server saw %v", seen)
	}
	// The local proxy's /metrics: the bytes it forwarded are the bytes
	// the client sent and received (the echoes, the stream, and the two
	// one-byte calls that got no answer).
	m := regexp.MustCompile(`msg=metrics addr=(\S+)`).FindStringSubmatch(local.errb.String())
	if m == nil {
		t.Fatalf("no metrics address: %s", local.errb.String())
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var echoed float64
	for _, n := range strings.Split(sizes, ",") {
		v, _ := strconv.ParseFloat(n, 64)
		echoed += v
	}
	streamed := float64(1024 + 65536 + 1<<20 + 3<<20)
	got := map[string]float64{}
	for _, mt := range fams["tensorpress_proxy_bytes_total"].GetMetric() {
		got[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
	}
	if got["up"] != echoed+streamed+2 || got["down"] != echoed+streamed {
		t.Errorf("/metrics: bytes up %v, down %v; the client sent %v and received %v", got["up"], got["down"], echoed+streamed+2, echoed+streamed)
	}
	if c := fams["tensorpress_proxy_calls_total"].GetMetric()[0].GetCounter().GetValue(); c != float64(len(strings.Split(sizes, ","))+3) {
		t.Errorf("calls %v", c)
	}
	hop := map[string]float64{}
	for _, mt := range fams["tensorpress_proxy_hop_bytes_total"].GetMetric() {
		hop[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
	}
	// The hop carries the messages coded, plus gRPC's framing: less than
	// the float32 weights themselves, which code to about 85%.
	if !(hop["out"] > 0 && hop["out"] < got["up"] && hop["in"] > 0 && hop["in"] < got["down"]) {
		t.Errorf("hop bytes out %v in %v, for %v up and %v down", hop["out"], hop["in"], got["up"], got["down"])
	}
	t.Logf("the hop carried %.1f%% of the bytes up and %.1f%% of those down", 100*hop["out"]/got["up"], 100*hop["in"]/got["down"])
	// The bytes each recipe put on the hop add up to the hop's bytes out,
	// less gRPC's framing: 5 bytes a message, 9 per HTTP/2 data frame (16
	// KiB at least), and the headers of each call (and TLS's records).
	var recipeOut, recipeIn float64
	for _, mt := range fams["tensorpress_proxy_recipe_bytes_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range mt.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch labels["direction"] {
		case "out":
			recipeOut += mt.GetCounter().GetValue()
		case "in":
			recipeIn += mt.GetCounter().GetValue()
		}
	}
	calls := float64(len(strings.Split(sizes, ",")) + 3)
	slack := hop["out"]*9/16384 + calls*(5+1024) + 16
	if remoteArgs != nil {
		// TLS: 29 bytes a record of 16 KiB at most, and the handshake.
		slack += hop["out"]*29/16384 + 16<<10
	}
	if framing := hop["out"] - recipeOut; recipeIn != got["up"] || framing < 0 || framing > slack {
		t.Errorf("recipes: %v bytes in (the client sent %v), %v out, for %v on the hop", recipeIn, got["up"], recipeOut, hop["out"])
	}
	if fams["tensorpress_proxy_encode_seconds_total"].GetMetric()[0].GetCounter().GetValue() <= 0 ||
		fams["tensorpress_proxy_decode_seconds_total"].GetMetric()[0].GetCounter().GetValue() <= 0 {
		t.Errorf("no time coding or decoding")
	}
	if l := fams["tensorpress_proxy_link_bits_per_second"].GetMetric(); len(l) != 1 || l[0].GetGauge().GetValue() != 1e6 {
		t.Errorf("link estimate %v, want 1 Mbit/s as configured", l)
	}
	t.Logf("recipes: %v bytes in, %v out; hop framing %v bytes", recipeIn, recipeOut, hop["out"]-recipeOut)
}

type runningProxy struct {
	addr string
	done chan int
	errb *syncBuffer
}

func startProxy(t *testing.T, side, to string, extra ...string) *runningProxy {
	t.Helper()
	p := &runningProxy{done: make(chan int, 1), errb: new(syncBuffer)}
	go func() {
		p.done <- run(append([]string{"proxy", "--side", side, "--listen", "127.0.0.1:0", "--to", to}, extra...), new(bytes.Buffer), p.errb)
	}()
	re := regexp.MustCompile(`msg=listening addr=(\S+)`)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.errb.String()); m != nil {
			p.addr = m[1]
			return p
		}
	}
	t.Fatalf("%s proxy did not start: %s", side, p.errb.String())
	return nil
}

func (p *runningProxy) wait(t *testing.T) {
	if code := <-p.done; code != 0 {
		t.Errorf("proxy: exit %d: %s", code, p.errb.String())
	}
}

// TestTCPProxies: a byte stream through a local and a remote proxy in TCP
// mode (tensorpress frames between them) reaches an echo server and comes
// back as it was sent, half-closes passing through.
func TestTCPProxies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				c.Close()
			}()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	remote := startProxy(t, "remote", ln.Addr().String(), "--mode", "tcp")
	local := startProxy(t, "local", remote.addr, "--mode", "tcp")
	defer func() {
		cancel()
		local.wait(t)
		remote.wait(t)
	}()
	rng := rand.New(rand.NewPCG(61, 61))
	msg := make([]byte, 8<<20)
	for i := 0; i < len(msg); i += 4 {
		binary.LittleEndian.PutUint32(msg[i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
	}
	for range 2 { // two connections, one after the other
		c, err := net.Dial("tcp", local.addr)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(msg)
			c.(*net.TCPConn).CloseWrite()
			errc <- err
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || <-errc != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%v; %d bytes back of %d, equal %t", err, len(got), len(msg), bytes.Equal(got, msg))
		}
	}
}

// TestPythonPassthrough: with both proxies on this host and no bandwidth
// configured, the local proxy passes the connections through (TPRAW/1)
// and the remote one passes them on: the Python client's calls, unary and
// streaming, deadlines and cancellation included, behave as direct ones,
// every message back bit for bit.
func TestPythonPassthrough(t *testing.T) {
	py := python(t)
	serverAddr, _ := pythonServer(t, py)
	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	remote := startProxy(t, "remote", serverAddr)
	local := startProxy(t, "local", remote.addr, "--metrics", "127.0.0.1:0")
	defer func() {
		cancel()
		local.wait(t)
		remote.wait(t)
	}()
	if !strings.Contains(local.errb.String(), "passing connections through") {
		t.Fatalf("the local proxy does not pass through:\n%s", local.errb.String())
	}
	sizes := "1024,1048576,16777216"
	res, err := exec.Command(py, "testdata/peer.py", "client", local.addr, sizes).Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, res)
	}
	for _, want := range []string{"ECHO 1024 ok", "ECHO 1048576 ok", "ECHO 16777216 ok", "STREAM 4 ok", "DEADLINE DEADLINE_EXCEEDED", "CANCEL CANCELLED"} {
		if !strings.Contains(string(res), want) {
			t.Errorf("the client did not say %q:\n%s", want, res)
		}
	}
}
