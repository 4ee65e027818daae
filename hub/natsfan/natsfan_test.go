package natsfan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/syncbuf"
	_ "github.com/tensorpress/tensorpress/lossless"
	"github.com/tensorpress/tensorpress/testvectors"
)

// TestMain checks that no test leaves a goroutine behind, but one that
// nats.go (v1.55.0) leaks itself: ObjectStore.Put publishes through a
// JetStream context of its own, whose first async publish starts
// resetPendingAcksOnReconnect, and Put's deferred cleanupReplySub sets the
// status channel that goroutine is about to read to nil; when the cleanup
// wins, the goroutine waits on the nil channel for good (1 fresh-clone
// `make test` of 2 on 2026-11-28). Not ours to mend: each such Put costs a
// goroutine in a long-running hub.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

// natsServer is the Debian nats-server binary the cluster tests run.
const natsServer = "/usr/sbin/nats-server"

// testLog discards, or logs to stderr with NATSDEBUG set.
func testLog() *slog.Logger {
	if os.Getenv("NATSDEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type node struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	log  *syncbuf.Buffer
}

// kill stops the node at once (SIGKILL), as a crash would.
func (n *node) kill() {
	n.cmd.Process.Kill()
	<-n.done
}

// startCluster runs n Debian nats-server processes clustered on
// loopback, JetStream on, and waits until each listens. A port picked
// free can be taken by another process before the node binds it (the
// node then exits): the whole cluster starts again on fresh ports.
func startCluster(t *testing.T, n int) []*node {
	t.Helper()
	if testing.Short() && n > 1 {
		t.Skip("-short: no clusters of nats-server (make test runs them in its race pass)")
	}
	if _, err := os.Stat(natsServer); err != nil {
		t.Skipf("%s: %v (Debian's nats-server; make test installs it)", natsServer, err)
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var nodes []*node
		if nodes, err = tryCluster(t, n); err == nil {
			t.Cleanup(func() {
				if t.Failed() {
					for i, nd := range nodes {
						t.Logf("node n%d log (tail):\n%s", i, tail(nd.log.String(), 4000))
					}
				}
			})
			return nodes
		}
		t.Logf("cluster did not start (attempt %d): %v", attempt+1, err)
		for _, nd := range nodes {
			nd.stop()
		}
	}
	t.Fatalf("no cluster of %d nats-server nodes: %v", n, err)
	return nil
}

// stop kills the node unless it has exited.
func (n *node) stop() {
	select {
	case <-n.done:
	default:
		n.kill()
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// tryCluster starts n nodes on fresh ports and waits until each listens
// for clients (and for routes when clustered); it returns the nodes
// started so far with an error when one exits first.
func tryCluster(t *testing.T, n int) ([]*node, error) {
	dir := t.TempDir()
	ports, cports := make([]int, n), make([]int, n)
	for i := range n {
		ports[i], cports[i] = freePort(t), freePort(t)
	}
	var nodes []*node
	for i := range n {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", cports[j]))
			}
		}
		conf := fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream { store_dir: %q }
`, i, ports[i], filepath.Join(dir, fmt.Sprint("n", i)))
		if n > 1 { // one node runs alone
			conf += fmt.Sprintf("cluster { name: tp, listen: 127.0.0.1:%d, routes: [%s] }\n", cports[i], strings.Join(routes, ", "))
		}
		cf := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		nd := &node{cmd: exec.Command(natsServer, "-c", cf), url: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			done: make(chan struct{}), log: new(syncbuf.Buffer)}
		var w io.Writer = nd.log
		if os.Getenv("NATSDEBUG") != "" {
			w = io.MultiWriter(nd.log, os.Stderr)
		}
		nd.cmd.Stdout, nd.cmd.Stderr = w, w
		// A test binary that dies (a timeout, a crash) takes its servers
		// with it.
		nd.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := nd.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { nd.cmd.Wait(); close(nd.done) }()
		t.Cleanup(nd.stop)
		nodes = append(nodes, nd)
	}
	ready := []string{"Server is ready"}
	if n > 1 {
		ready = append(ready, "Listening for route connections on")
	}
	for i, nd := range nodes {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			log := nd.log.String()
			up := true
			for _, r := range ready {
				up = up && strings.Contains(log, r)
			}
			if up {
				break
			}
			select {
			case <-nd.done:
				return nodes, fmt.Errorf("node n%d exited: %s", i, tail(log, 300))
			default:
			}
			if time.Now().After(deadline) {
				return nodes, fmt.Errorf("node n%d not listening after 30 s: %s", i, tail(log, 300))
			}
		}
	}
	return nodes, nil
}

func urls(nodes []*node) string {
	var us []string
	for _, n := range nodes {
		us = append(us, n.url)
	}
	return strings.Join(us, ",")
}

// connect connects to url (reconnecting for ever) and returns JetStream.
func connect(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	log := testLog()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Debug("NATS disconnected", "url", url, "err", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Debug("NATS reconnected", "url", url, "to", c.ConnectedUrl()) })}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// openStore opens the bucket, waiting for the cluster's JetStream.
func openStore(t *testing.T, js jetstream.JetStream, replicas int) jetstream.ObjectStore {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := OpenStore(ctx, js, Config{Replicas: replicas})
		cancel()
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream not ready: %v", err)
		}
		if os.Getenv("NATSDEBUG") != "" {
			t.Log(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// model is a model version: n tensors of N(0, 0.02) float32, some of
// several chunks.
func model(v uint64, n, size int) []*codec.Tensor {
	var ts []*codec.Tensor
	for i := range n {
		ts = append(ts, testvectors.Normal(fmt.Sprintf("layers.%d.weight", i), size+i*1000, 0.02, v*1000+uint64(i)))
	}
	return ts
}

// relayHub is a relay hub served over gRPC on loopback.
type relayHub struct {
	h      *hub.Hub
	relay  *Relay
	client hubpb.HubClient
}

func startRelay(t *testing.T, ctx context.Context, wg *sync.WaitGroup, nc *nats.Conn, st jetstream.ObjectStore) *relayHub {
	t.Helper()
	h, err := hub.New(hub.WithRetention(4))
	if err != nil {
		t.Fatal(err)
	}
	r := NewRelay(nc, st, h, 4, codec.Limits{}, testLog())
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, hub.NewServer(h))
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &relayHub{h: h, relay: r, client: hubpb.NewHubClient(conn)}
}

// waitVersion waits until r's hub holds version v.
// The wait is long: after a node dies, Debian's nats-server 2.9.10 fails
// listings and stalls gets for over a minute, and a relay attached then
// needed more than 60 s (two failed gets) for
// a version once, on loaded cores in CI.
func waitVersion(t *testing.T, r *relayHub, v uint64) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		for _, in := range r.h.Versions() {
			if in.Version == v {
				return
			}
		}
		if time.Now().After(deadline) {
			if os.Getenv("NATSDEBUG") != "" {
				pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			}
			t.Fatalf("relay never got version %d (relayed %d, failed %d)", v, r.relay.Relayed.Load(), r.relay.Failed.Load())
		}
	}
}

// fetchAll has clients clients fetch version v from r and checks every
// tensor bit for bit against want.
func fetchAll(t *testing.T, r *relayHub, clients int, v uint64, want []*codec.Tensor) {
	t.Helper()
	byName := map[string]*codec.Tensor{}
	for _, x := range want {
		byName[x.Name] = x
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			_, err := hub.Fetch(context.Background(), r.client, hub.Request{Version: v}, func(x *codec.Tensor) error {
				w := byName[x.Name]
				if w == nil || !bytes.Equal(w.Data, x.Data) {
					return fmt.Errorf("tensor %q differs", x.Name)
				}
				n++
				return nil
			})
			if err == nil && n != len(want) {
				err = fmt.Errorf("%d tensors of %d", n, len(want))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
}

// TestRelayFanOut: an origin publishes versions into a 3-node Debian
// nats-server cluster; 3 relay hubs, each attached to another node, serve
// 16 clients each. Every client gets every version bit for bit, and the
// bytes the origin sent to NATS are each version's object once, not once
// per relay or client.
func TestRelayFanOut(t *testing.T) {
	nodes := startCluster(t, 3)
	onc, ojs := connect(t, urls(nodes))
	ost := openStore(t, ojs, 3)
	pub := NewPublisher(onc, ost, 4, testLog())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var relays []*relayHub
	for i := range 3 {
		nc, js := connect(t, nodes[i].url)
		relays = append(relays, startRelay(t, ctx, &wg, nc, openStore(t, js, 3)))
	}
	out0 := onc.Stats().OutBytes
	for v := uint64(1); v <= 2; v++ {
		m := model(v, 6, 200_000)
		if err := pub.Publish(ctx, v, Slice(m)); err != nil {
			t.Fatal(err)
		}
		for _, r := range relays {
			waitVersion(t, r, v)
			fetchAll(t, r, 16, v, m)
		}
	}
	sent := int64(onc.Stats().OutBytes - out0)
	put := pub.PutBytes.Load()
	var raw int64
	for v := uint64(1); v <= 2; v++ {
		for _, x := range model(v, 6, 200_000) {
			raw += int64(len(x.Data))
		}
	}
	t.Logf("origin: %d bytes to NATS for 2 versions (%d bytes of objects, %d raw); relays got %d, %d, %d",
		sent, put, raw, relays[0].relay.GotBytes.Load(), relays[1].relay.GotBytes.Load(), relays[2].relay.GotBytes.Load())
	if sent < put || float64(sent) > 1.05*float64(put) {
		t.Errorf("the origin sent %d bytes to NATS for %d bytes of versions: want each version once", sent, put)
	}
	for i, r := range relays {
		if got := r.relay.GotBytes.Load(); got != put {
			t.Errorf("relay %d got %d bytes, want %d", i, got, put)
		}
	}
}

// TestKillNodeMidPublish: one of the 3 NATS nodes dies while the origin
// publishes a large version; the publish completes (retrying where it
// must) and every relay gets every version whole, never a part of one.
func TestKillNodeMidPublish(t *testing.T) {
	// Mostly waiting on elections and timeouts: beside the other kill test.
	t.Parallel()
	nodes := startCluster(t, 3)
	// The node that dies is the one the origin talks to, so that it must
	// reconnect too (the clients learn the cluster's other nodes).
	onc, ojs := connect(t, urls(nodes))
	ost := openStore(t, ojs, 3)
	pub := NewPublisher(onc, ost, 0, testLog())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	nc, js := connect(t, nodes[2].url)
	relay := startRelay(t, ctx, &wg, nc, openStore(t, js, 3))

	small := model(1, 2, 1000)
	if err := pub.Publish(ctx, 1, Slice(small)); err != nil {
		t.Fatal(err)
	}
	big := model(2, 8, 1<<20) // 32 MiB and more: many chunks
	errc := make(chan error, 1)
	go func() {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer pcancel()
		errc <- pub.Publish(pctx, 2, Slice(big))
	}()
	// Kill the node the origin is connected to once the put is under way.
	for deadline := time.Now().Add(30 * time.Second); onc.Stats().OutBytes < 4<<20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the put did not start")
		}
	}
	var victim *node
	for _, n := range nodes {
		if n.url == "nats://"+onc.ConnectedAddr() {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("the origin is connected to %s, none of the nodes", onc.ConnectedAddr())
	}
	victim.kill()
	if err := <-errc; err != nil {
		t.Fatalf("publish with a node killed: %v", err)
	}
	t.Logf("published after killing a node: %d retries", pub.Retries.Load())
	small3 := model(3, 2, 1000)
	if err := pub.Publish(ctx, 3, Slice(small3)); err != nil {
		t.Fatal(err)
	}
	for v, m := range map[uint64][]*codec.Tensor{1: small, 2: big, 3: small3} {
		waitVersion(t, relay, v)
		fetchAll(t, relay, 2, v, m)
	}
	// A fresh relay, attached after the fact, finds them all whole.
	var alive *node
	for _, n := range nodes {
		if n != victim {
			alive = n
		}
	}
	nc2, js2 := connect(t, alive.url)
	late := startRelay(t, ctx, &wg, nc2, openStore(t, js2, 3))
	for v, m := range map[uint64][]*codec.Tensor{1: small, 2: big, 3: small3} {
		waitVersion(t, late, v)
		fetchAll(t, late, 1, v, m)
	}
}

// TestKillStreamLeaderMidPublish: the node that leads the bucket's stream
// dies while the origin, attached to another node, puts a large version:
// chunks published while the stream has no leader get no acknowledgement
// and are published again (from the same bytes) or the attempt is made
// again. Every object stored reads back whole (its digest matches), and
// the relay serves every version bit for bit.
func TestKillStreamLeaderMidPublish(t *testing.T) {
	// Mostly waiting on elections and timeouts: beside the other kill test.
	t.Parallel()
	nodes := startCluster(t, 3)
	_, ajs := connect(t, urls(nodes))
	ast := openStore(t, ajs, 3)
	status, err := ast.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st, err := ajs.Stream(context.Background(), "OBJ_"+status.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(context.Background())
	if err != nil || si.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	var leader, other *node
	for i, n := range nodes {
		if fmt.Sprint("n", i) == si.Cluster.Leader {
			leader = n
		} else {
			other = n
		}
	}
	if leader == nil {
		t.Fatalf("the stream's leader %q is none of the nodes", si.Cluster.Leader)
	}
	onc, ojs := connect(t, other.url)
	ost := openStore(t, ojs, 3)
	pub := NewPublisher(onc, ost, 0, testLog())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	rnc, rjs := connect(t, other.url)
	relay := startRelay(t, ctx, &wg, rnc, openStore(t, rjs, 3))

	big := model(1, 8, 1<<20)
	errc := make(chan error, 1)
	go func() {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer pcancel()
		errc <- pub.Publish(pctx, 1, Slice(big))
	}()
	for deadline := time.Now().Add(30 * time.Second); onc.Stats().OutBytes < 4<<20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the put did not start")
		}
	}
	leader.kill()
	if err := <-errc; err != nil {
		t.Fatalf("publish with the stream's leader killed: %v", err)
	}
	t.Logf("published after killing the stream's leader: %d chunks published again, %d attempts made again",
		pub.Republished.Load(), pub.Retries.Load())
	if pub.Republished.Load()+pub.Retries.Load() == 0 {
		t.Error("no chunk was published again and no attempt made again: the leader died after the put")
	}
	small := model(2, 2, 1000)
	if err := pub.Publish(ctx, 2, Slice(small)); err != nil {
		t.Fatal(err)
	}
	// Every object stored, read back whole: the object store checks its
	// digest at the end. (The cluster may still be settling after the
	// election: a listing that times out is made again.)
	var infos []*jetstream.ObjectInfo
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if infos, err = ost.List(ctx); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		ts, err := readBack(ctx, ost, in.Name)
		if err != nil {
			t.Fatalf("object %s (%d bytes, %d chunks) does not read back: %v", in.Name, in.Size, in.Chunks, err)
		}
		t.Logf("object %s: %d chunks, %d tensors, digest checked", in.Name, in.Chunks, len(ts))
	}
	for v, m := range map[uint64][]*codec.Tensor{1: big, 2: small} {
		waitVersion(t, relay, v)
		fetchAll(t, relay, 2, v, m)
	}
	if f := relay.relay.Failed.Load(); f != 0 {
		t.Logf("the relay failed %d gets (tried again)", f)
	}
}

// readBack reads object name to its end (where the object store checks its
// digest) and decodes it. A get that fails for want of an answer is made
// again; a digest that does not match is an error at once.
func readBack(ctx context.Context, st jetstream.ObjectStore, name string) ([]*codec.Tensor, error) {
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		obj, err := st.Get(ctx, name)
		if err == nil {
			var ts []*codec.Tensor
			ts, err = Decode(obj, codec.Limits{})
			if err == nil {
				_, err = io.Copy(io.Discard, obj)
			}
			obj.Close()
			if err == nil || errors.Is(err, jetstream.ErrDigestMismatch) {
				return ts, err
			}
		}
		if time.Now().After(deadline) {
			return nil, err
		}
	}
}
