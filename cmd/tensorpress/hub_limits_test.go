package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// vmHWM is the peak resident set (VmHWM) of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// hubClient dials addr in plain text.
func hubClient(t *testing.T, addr string) hubpb.HubClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return hubpb.NewHubClient(conn)
}

// zeroBomb is an upload message of frames frames, each a tensor of 8 MiB
// of zeros coded with zstd: a few KB claiming frames x 8 MiB.
func zeroBomb(t *testing.T, frames int) []byte {
	t.Helper()
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	x := &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{2 << 20}, Data: make([]byte, 8<<20)}
	r := codec.MustParseRecipe("*:zstd(1)")
	var msg []byte
	for range frames {
		if msg, err = enc.AppendTensor(msg, x, r); err != nil {
			t.Fatal(err)
		}
	}
	return msg
}

// sendUpload uploads msg as one update and returns the call's error.
func sendUpload(c hubpb.HubClient, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.Upload(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&hubpb.UploadMessage{Round: 7, Frame: msg}); err != nil && err != io.EOF {
		return err
	}
	st.CloseSend()
	_, err = st.Recv()
	return err
}

// goodCalls fetches version 1 whole, checked, and uploads an update.
func goodCalls(t *testing.T, c hubpb.HubClient, want digests) {
	t.Helper()
	n := 0
	if _, err := hub.Fetch(context.Background(), c, hub.Request{Version: 1}, func(x *codec.Tensor) error {
		n++
		return nil
	}); err != nil || n != len(want) {
		t.Fatalf("a good fetch: %d tensors, %v", n, err)
	}
	g := []*codec.Tensor{codec.FromFloat32("g", make([]float32, 1<<16), 1<<16)}
	if err := hub.Upload(context.Background(), c, gradient.NewOutbox(nil), hub.UploadRequest{Round: 1}, g); err != nil {
		t.Fatalf("a good upload: %v", err)
	}
}

// TestHubUploadBomb: a hub (a real process) given 8 concurrent upload
// messages of a few KB each claiming 264 MiB, then one of 30 frames of 8
// MiB of zeros, refuses them before decoding, while a good fetch and a
// good upload succeed between them; its peak RSS stays under the budget
// + 64 MiB. With its defaults (512 MiB), the 264 MiB messages claim more
// than an update's one frame may hold (ResourceExhausted), and the 240
// MiB one fits the budget but is refused from its headers, before any
// frame is decoded (InvalidArgument: an update is one frame); with --memory 200MiB the
// budget refuses both (ResourceExhausted).
func TestHubUploadBomb(t *testing.T) {
	bin := buildTensorpress(t)
	models := t.TempDir()
	want := writeModel(t, models, 1, 4, 1<<20, func(i int) uint64 { return uint64(i) })
	bomb264, bomb240 := zeroBomb(t, 33), zeroBomb(t, 30)
	t.Logf("the messages: %d bytes claiming 264 MiB, %d bytes claiming 240 MiB", len(bomb264), len(bomb240))
	for _, tc := range []struct {
		name   string
		budget int64
		code   codes.Code // of the 240 MiB message
		args   []string
	}{
		{"defaults", budget.DefaultBytes, codes.InvalidArgument, nil},
		{"budget", 200 << 20, codes.ResourceExhausted, []string{"--memory", "200MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startHubProc(t, bin, models, "127.0.0.1:0", tc.args...)
			c := hubClient(t, p.addr)
			goodCalls(t, c, want)
			before := vmHWM(t, p.cmd.Process.Pid)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = sendUpload(c, bomb264)
				}()
			}
			wg.Wait()
			goodCalls(t, c, want)
			err240 := sendUpload(c, bomb240)
			goodCalls(t, c, want)
			for i, err := range errs {
				if status.Code(err) != codes.ResourceExhausted {
					t.Errorf("message %d: %v, want ResourceExhausted", i, err)
				}
			}
			if status.Code(err240) != tc.code {
				t.Errorf("the 240 MiB message: %v, want %v", err240, tc.code)
			}
			rss := vmHWM(t, p.cmd.Process.Pid)
			t.Logf("hub: peak RSS %.1f MiB (%.1f MiB before the attacks), budget %d MiB; %v; %v",
				float64(rss)/(1<<20), float64(before)/(1<<20), tc.budget>>20, status.Convert(errs[0]).Message(), status.Convert(err240).Message())
			if rss > tc.budget+64<<20 {
				t.Errorf("peak RSS %d MiB, over the budget %d MiB + 64 MiB", rss>>20, tc.budget>>20)
			}
		})
	}
}

// TestHubFetchMemory: 32 fetches at once of a 128 MiB version from a hub
// (a real process, --memory 64MiB, --cache 16MiB): 16 that open with the
// largest credit and read nothing, 16 that read it all from different
// places (so that the cache cannot serve them all); then a good fetch
// and upload. The hub's peak RSS stays under the budget, the cache and
// 64 MiB.
func TestHubFetchMemory(t *testing.T) {
	bin := buildTensorpress(t)
	models := t.TempDir()
	const tensors, size = 8, 16 << 20
	want := writeModel(t, models, 1, tensors, size, func(i int) uint64 { return uint64(i) })
	p := startHubProc(t, bin, models, "127.0.0.1:0", "--memory", "64MiB", "--cache", "16MiB")
	var conns []hubpb.HubClient
	for range 4 {
		conns = append(conns, hubClient(t, p.addr))
	}
	goodCalls(t, conns[0], want)
	before := vmHWM(t, p.cmd.Process.Pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 16 { // stalled: credit 64, nothing read
		st, err := conns[i%4].Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: &hubpb.FetchRequest{Version: 1, Credit: 64}}}); err != nil {
			t.Fatal(err)
		}
	}
	chunks := uint64(tensors * size / hub.DefaultChunkSize)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			_, errs[i] = hub.FetchChunks(context.Background(), conns[i%4], hub.Request{Version: 1, Credit: 16,
				ResumeAfter: uint64(i) * chunks / 16}, func(x *codec.Tensor) error {
				n += int64(len(x.Data))
				return nil
			})
			if errs[i] == nil && n != int64(tensors*size)-int64(i)*int64(chunks/16)*hub.DefaultChunkSize {
				errs[i] = fmt.Errorf("%d bytes", n)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("fetch %d: %v", i, err)
		}
	}
	goodCalls(t, conns[1], want)
	rss := vmHWM(t, p.cmd.Process.Pid)
	t.Logf("hub: peak RSS %.1f MiB (%.1f MiB before), 16 stalled and 16 reading fetches of %d MiB, budget 64 MiB, cache 16 MiB",
		float64(rss)/(1<<20), float64(before)/(1<<20), tensors*size>>20)
	if rss > (64+16+64)<<20 {
		t.Errorf("peak RSS %d MiB, over the budget + the cache + 64 MiB", rss>>20)
	}
}

// TestHubSlowPeers: 500 connections that send nothing and 500 that send
// half the HTTP/2 preface are closed by the hub (a real process,
// --handshake-timeout 1s), one that completes the HTTP/2 handshake and
// then opens no call by --idle-timeout, and good calls are served
// meanwhile; the hub's peak RSS stays bounded. (Every peer here is
// 127.0.0.1: --max-conns-per-peer is raised past them.)
func TestHubSlowPeers(t *testing.T) {
	bin := buildTensorpress(t)
	models := t.TempDir()
	want := writeModel(t, models, 1, 4, 1<<20, func(i int) uint64 { return uint64(i) })
	p := startHubProc(t, bin, models, "127.0.0.1:0", "--handshake-timeout", "1s", "--idle-timeout", "2s", "--max-conns-per-peer", "5000")
	c := hubClient(t, p.addr)
	goodCalls(t, c, want)
	before := vmHWM(t, p.cmd.Process.Pid)
	conns := slowPeers(t, p.addr, 1000, "PRI * HTTP/2.0\r\n")
	goodCalls(t, c, want)
	waitClosed(t, conns)
	goodCalls(t, c, want)
	rss := vmHWM(t, p.cmd.Process.Pid)
	t.Logf("hub: peak RSS %.1f MiB after 1,000 slow connections and an idle one (%.1f MiB before)", float64(rss)/(1<<20), float64(before)/(1<<20))
	if rss > budget.DefaultBytes+64<<20 {
		t.Errorf("peak RSS %d MiB", rss>>20)
	}
}
