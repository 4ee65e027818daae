package hub

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// TestFetchResumesAfterKill: a client process fetches a model chunk by
// chunk into a file, recording after each chunk how far it got; it is
// killed (SIGKILL) mid-fetch, and started again, resumes after the last
// chunk it recorded. The file is the model bit for bit, and the hub sent
// no chunk twice beyond those in flight when the client died.
func TestFetchResumesAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts client processes")
	}
	m := model(24, 41)
	h, _ := New(WithChunkSize(16 << 10))
	if err := h.Publish(3, m); err != nil {
		t.Fatal(err)
	}
	plan := len(h.plan(m))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, NewServer(h))
	go s.Serve(ln)
	defer s.Stop()

	dir := t.TempDir()
	out, state := filepath.Join(dir, "model.bin"), filepath.Join(dir, "state")
	// The first run is killed once it has recorded a third of the chunks.
	cl := memoryProcess("resume", ln.Addr().String(), out, state, "3")
	cl.Stderr = nil
	stdout, err := cl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	killedAt := ""
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "PROGRESS "); ok {
			if seq, _ := strconv.Atoi(n); seq >= plan/3 {
				cl.Process.Kill()
				killedAt = n
				break
			}
		}
	}
	cl.Wait()
	if killedAt == "" {
		t.Fatal("the client ended before it was killed")
	}
	sentBefore := h.Stats().ChunksSent

	again := memoryProcess("resume", ln.Addr().String(), out, state, "3")
	res, err := again.Output()
	if err != nil {
		t.Fatalf("resumed client: %v\n%s", err, res)
	}
	var want []byte
	for _, x := range m {
		want = append(want, x.Data...)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the file differs from the model (%d bytes, want %d)", len(got), len(want))
	}
	// The tensors the second run could not check (received before the
	// kill, or begun before it): their copies in the file against the
	// digests the hub gave the second run.
	at := map[string][]byte{}
	var o int
	for _, x := range m {
		at[x.Name] = got[o : o+len(x.Data)]
		o += len(x.Data)
	}
	last, checked := "", 0
	for _, l := range strings.Split(strings.TrimSpace(string(res)), "\n") {
		if u, ok := strings.CutPrefix(l, "UNCHECKED "); ok {
			name, hexsum, _ := strings.Cut(u, " ")
			if fmt.Sprintf("%x", sha256.Sum256(at[name])) != hexsum {
				t.Fatalf("%q: the file's copy does not match its digest", name)
			}
			checked++
		}
		if strings.HasPrefix(l, "DONE ") {
			last = l
		}
	}
	if last == "" || checked == 0 {
		t.Fatalf("resumed client said %q", res)
	}
	sent := h.Stats().ChunksSent
	t.Logf("killed after recording chunk %s of %d; the hub sent %d chunks before, %d in all (%d twice); %s",
		killedAt, plan, sentBefore, sent, sent-int64(plan), last)
	// Credit 1: the chunk the client was writing and the one the hub sent
	// on its grant may come again, nothing else.
	if sent > int64(plan)+2 {
		t.Fatalf("%d chunks sent for a plan of %d", sent, plan)
	}
}

// runResume is the client process of TestFetchResumesAfterKill: it
// fetches version v of the hub at addr into out, chunk by chunk,
// recording "seq offset" in state after each chunk (the file written and
// synced first), and on start resumes after what state says.
func runResume(addr, out, state, v string) error {
	var seq uint64
	var off int64
	if b, err := os.ReadFile(state); err == nil {
		if _, err := fmt.Sscan(string(b), &seq, &off); err != nil {
			return fmt.Errorf("state %q: %v", b, err)
		}
	}
	version, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(out, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(off); err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	var werr error
	req := Request{Version: version, Credit: 1, ResumeAfter: seq, Progress: func(s uint64) {
		if werr != nil {
			return
		}
		if werr = f.Sync(); werr == nil {
			tmp := state + ".tmp"
			if werr = os.WriteFile(tmp, fmt.Appendf(nil, "%d %d", s, off), 0o644); werr == nil {
				werr = os.Rename(tmp, state)
			}
		}
		fmt.Printf("PROGRESS %d\n", s)
		time.Sleep(2 * time.Millisecond) // a client with work to do per chunk
	}}
	res, err := FetchChunks(context.Background(), hubpb.NewHubClient(conn), req, func(t *codec.Tensor) error {
		if _, err := f.WriteAt(t.Data, off); err != nil {
			return err
		}
		off += int64(len(t.Data))
		return werr
	})
	if err != nil {
		return err
	}
	for _, name := range res.Unchecked {
		d := res.Digests[name]
		fmt.Printf("UNCHECKED %s %x\n", name, d)
	}
	fmt.Printf("DONE resumed after chunk %d, %d tensors left to check\n", req.ResumeAfter, len(res.Unchecked))
	return nil
}
