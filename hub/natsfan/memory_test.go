package natsfan

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
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
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/testbin"
)

// patterned is tensor k of a generated version: n float32 whose values
// follow from their index, so that a version of any size is made one
// tensor at a time and checked chunk by chunk.
func patterned(k, n int) *codec.Tensor {
	t := &codec.Tensor{Name: fmt.Sprintf("layers.%03d.weight", k), DType: codec.F32, Shape: []int64{int64(n)}, Data: make([]byte, 4*n)}
	fillPattern(t.Data, k, 0)
	return t
}

func fillPattern(b []byte, k int, off int64) {
	for i := range len(b) / 4 {
		x := off + int64(i)
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32((x*7+int64(k))%1000)*0.001))
	}
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestRelayMemory: a relay hub, a real process built without the race
// detector, serves a version far larger than what it may hold: it spools
// the version into a file as it reads it and serves it from there, and
// its peak RSS (VmHWM) stays under 128 MiB. The version is 256 MiB, or
// 2 GiB with TENSORPRESS_BIG=1. A client fetches it chunk by chunk and
// checks every element.
func TestRelayMemory(t *testing.T) {
	tensors, per := 16, 4<<20 // 16 x 16 MiB
	if os.Getenv("TENSORPRESS_BIG") == "1" {
		tensors, per = 64, 8<<20 // 64 x 32 MiB
	}
	const limit = 128 << 20
	dir := t.TempDir()
	var relayproc testbin.Binary
	t.Cleanup(relayproc.Remove)
	bin, err := relayproc.Path("./testdata/relayproc", "relayproc")
	if err != nil {
		t.Fatal(err)
	}
	nodes := startCluster(t, 1)
	onc, ojs := connect(t, nodes[0].url)
	pub := NewPublisher(onc, openStore(t, ojs, 1), 0, testLog())
	gen := func(yield func(*codec.Tensor, error) bool) {
		for k := range tensors {
			if !yield(patterned(k, per), nil) {
				return
			}
		}
	}
	ctx := context.Background()
	if err := pub.Publish(ctx, 1, gen); err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d MiB as a %d MiB object", tensors*per*4>>20, pub.PutBytes.Load()>>20)

	cmd := exec.Command(bin, "-nats", nodes[0].url, "-spool", filepath.Join(dir, "spool"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("relay: %v\n%s", err, stderr.String())
		}
	}()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("relay address: %v\n%s", err, stderr.String())
	}
	conn, err := grpc.NewClient(strings.TrimSpace(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := hubpb.NewHubClient(conn)
	for {
		vs, err := client.Versions(ctx, &hubpb.VersionsRequest{})
		if err == nil && len(vs.GetVersions()) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var got int64
	want := make([]byte, 0, 1<<20)
	_, err = hub.FetchChunks(ctx, client, hub.Request{Version: 1}, func(c *codec.Tensor) error {
		var k int
		if _, err := fmt.Sscanf(c.Name, "layers.%03d.weight", &k); err != nil {
			return err
		}
		want = want[:len(c.Data)]
		if cap(want) < len(c.Data) {
			want = make([]byte, len(c.Data))
		}
		fillPattern(want, k, c.Offset)
		if !bytes.Equal(want, c.Data) {
			return fmt.Errorf("tensor %q differs at elements [%d, +%d)", c.Name, c.Offset, len(c.Data)/4)
		}
		got += int64(len(c.Data))
		return nil
	})
	if err != nil {
		t.Fatalf("fetch: %v\n%s", err, stderr.String())
	}
	if want := int64(tensors * per * 4); got != want {
		t.Fatalf("fetched %d bytes of %d", got, want)
	}
	peak := vmHWM(t, cmd.Process.Pid)
	t.Logf("the relay served %d MiB, peak RSS %.1f MiB", got>>20, float64(peak)/(1<<20))
	if peak > limit {
		t.Errorf("the relay's peak RSS is %d MiB, over %d MiB", peak>>20, limit>>20)
	}
}

// TestPublishFrames: a version put as frames encoded elsewhere (chunks of
// 64 KiB, as a hub's fetch cuts them) is relayed and served bit for bit.
func TestPublishFrames(t *testing.T) {
	nodes := startCluster(t, 1)
	onc, ojs := connect(t, nodes[0].url)
	pub := NewPublisher(onc, openStore(t, ojs, 1), 0, testLog())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	rnc, rjs := connect(t, nodes[0].url)
	relay := startRelay(t, ctx, &wg, rnc, openStore(t, rjs, 1))
	m := model(1, 4, 100_000)
	err := pub.PublishFrames(ctx, 1, func(w io.Writer) error {
		cw, err := codec.NewWriter(w, codec.WithChunkSize(64<<10))
		if err != nil {
			return err
		}
		for _, x := range m {
			if err := cw.WriteTensor(x); err != nil {
				return err
			}
		}
		return cw.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	waitVersion(t, relay, 1)
	fetchAll(t, relay, 2, 1, m)
}
