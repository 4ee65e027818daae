package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/natsfan"
)

// natsServerBin is Debian's nats-server, which the hierarchical runs
// cluster on loopback.
const natsServerBin = "/usr/sbin/nats-server"

// warnLog logs warnings and errors to stderr: the relays' and the
// publisher's lines of every version would drown the run's progress.
var warnLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// natsCluster is a cluster of nats-server processes on loopback.
type natsCluster struct {
	urls  []string
	cmds  []*exec.Cmd
	logs  []*bytes.Buffer
	dones []chan struct{}
}

func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startNATSCluster runs n nats-server processes clustered on loopback,
// JetStream on, storing under dir; they die with this process.
func startNATSCluster(dir string, n int) (*natsCluster, error) {
	if _, err := os.Stat(natsServerBin); err != nil {
		return nil, fmt.Errorf("%s: %w (Debian's nats-server: apt-get install nats-server; make test installs it)", natsServerBin, err)
	}
	ports, cports := make([]int, n), make([]int, n)
	for i := range n {
		var err error
		if ports[i], err = freeLoopbackPort(); err != nil {
			return nil, err
		}
		if cports[i], err = freeLoopbackPort(); err != nil {
			return nil, err
		}
	}
	c := &natsCluster{}
	for i := range n {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[j]))
			}
		}
		conf := fmt.Sprintf("server_name: n%d\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n", i, ports[i], filepath.Join(dir, fmt.Sprint("n", i)))
		if n > 1 {
			conf += fmt.Sprintf("cluster { name: tp, listen: 127.0.0.1:%d, routes: [%s] }\n", cports[i], strings.Join(routes, ", "))
		}
		cf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command(natsServerBin, "-c", cf)
		log := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
		c.cmds, c.logs, c.dones = append(c.cmds, cmd), append(c.logs, log), append(c.dones, done)
	}
	return c, nil
}

func (c *natsCluster) stop() {
	for i, cmd := range c.cmds {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.dones[i]:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-c.dones[i]
		}
	}
}

// fedNATS connects to url (every node, comma-separated), reconnecting for
// ever, and opens the buckets of the versions and the sums, waiting for
// the cluster's JetStream (3 replicas on a cluster of 3).
func fedNATS(ctx context.Context, url string, replicas int) (*nats.Conn, jetstream.JetStream, jetstream.ObjectStore, jetstream.ObjectStore, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, nil, err
	}
	cfg := natsfan.Config{Replicas: replicas}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		vs, err := natsfan.OpenStore(c, js, cfg)
		var ss jetstream.ObjectStore
		if err == nil {
			ss, err = natsfan.OpenSumStore(c, js, cfg)
		}
		cancel()
		if err == nil {
			return nc, js, vs, ss, nil
		}
		if time.Now().After(deadline) {
			nc.Close()
			return nil, nil, nil, nil, fmt.Errorf("NATS JetStream not ready: %w", err)
		}
	}
}

// fedOriginOptions makes the hub process the origin of a hierarchical
// run: each version goes to the NATS bucket, each round's sum is the
// relays' partial sums, whose bytes are added to *in.
func fedOriginOptions(ctx context.Context, cfg fedConfig, fc *hub.FedAvgConfig, in *int64) (func(), error) {
	nc, js, vs, ss, err := fedNATS(ctx, cfg.NATS, 3)
	if err != nil {
		return nil, err
	}
	pub := natsfan.NewPublisher(nc, vs, 4, warnLog)
	fc.OnPublish = func(v uint64, model []*codec.Tensor) error { return pub.Publish(ctx, v, natsfan.Slice(model)) }
	fc.Source = func(ctx context.Context, round uint64) (hub.RoundSum, error) {
		s, n, err := natsfan.WaitSums(ctx, js, ss, round, cfg.Relays, 0)
		*in += n
		if err == nil && round > 2 {
			natsfan.PruneSums(ctx, ss, round-2)
		}
		return s, err
	}
	return nc.Close, nil
}

// fedRelay is relay id's process of a hierarchical run: a hub that takes
// the versions from NATS (natsfan.Relay) and serves its clients, sums
// their uploads round by round (hub.RunPartial) and leaves each round's
// sum in NATS for the origin. It prints its address, then serves until
// stdin closes.
func fedRelay(cfg fedConfig, id int, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, _, vs, ss, err := fedNATS(ctx, cfg.NATS, 3)
	if err != nil {
		return err
	}
	defer nc.Close()
	h, err := fedNewHub(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- hub.Serve(ctx, ln, h, hub.ServeConfig{Drain: -1}) }()
	relay := natsfan.NewRelay(nc, vs, h, 4, codec.Limits{}, warnLog)
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(ctx) }()
	fmt.Fprintln(stdout, ln.Addr().String())
	var out int64
	partial := make(chan error, 1)
	go func() {
		partial <- hub.RunPartial(ctx, h, hub.PartialConfig{Clients: cfg.Clients / cfg.Relays, Deadline: cfg.Deadline,
			Rounds: uint64(cfg.Rounds), Forward: func(ctx context.Context, round uint64, s hub.RoundSum) error {
				n, err := natsfan.PublishSum(ctx, ss, round, fmt.Sprint("relay", id), s)
				out += int64(n)
				return err
			}})
	}()
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(stop)
	}()
	select {
	case err = <-partial:
		if err == nil {
			<-stop
		}
	case <-stop:
	}
	cancel()
	if rerr := <-relayed; err == nil {
		err = rerr
	}
	if serr := <-served; err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	st := h.Stats()
	return json.NewEncoder(stdout).Encode(fedHubLine{Done: true, PeakRSS: peakRSS(), BytesSent: st.BytesSent, BytesIn: st.UpdateBytes, SumBytes: out})
}
