package hub

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// Fan-out: 64 clients fetch one version from a server in a process of its
// own, whose CPU time (user + system, from the kernel) is compared in the
// same run with what the issue sets as the bar: encoding the model once
// plus a server that sends the model's bytes as they are to 64 clients.
//
//	go test -run '^$' -bench FanOut -benchtime 1x ./hub
//
// The model: 240 tensors, every fourth 64-192 KiB, about 7.6 MiB.

const fanoutEnv = "TENSORPRESS_HUB_FANOUT_SERVER"

// fanoutModel is the model every side builds the same way.
func fanoutModel() []*codec.Tensor { return model(240, 42) }

// runFanoutServer is the server process: it listens on loopback, prints
// its address, and serves until its stdin closes.
func runFanoutServer(mode string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var s *grpc.Server
	switch mode {
	case "hub":
		h, _ := New()
		h.Publish(1, fanoutModel())
		s = grpc.NewServer()
		hubpb.RegisterHubServer(s, NewServer(h))
	case "raw":
		m := fanoutModel()
		s = grpc.NewServer(grpc.ForceServerCodec(grpctest.RawCodec{}),
			grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
				for _, t := range m {
					if err := st.SendMsg(&t.Data); err != nil {
						return err
					}
				}
				return nil
			}))
	}
	go s.Serve(ln)
	fmt.Printf("ADDR %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	s.Stop()
	os.Exit(0)
}

// startServer starts cmd, a server process that prints "ADDR host:port"
// and serves until its stdin closes, and returns its stdin and address.
func startServer(b *testing.B, cmd *exec.Cmd) (io.WriteCloser, string) {
	b.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		b.Fatalf("server: %q, %v", line, err)
	}
	return stdin, addr
}

// serverCPU runs a server process in mode, lets 64 clients fetch from it,
// and returns its CPU time and the clients' wall time.
func serverCPU(b *testing.B, mode string, fetch func(conn *grpc.ClientConn) error) (cpu, wall time.Duration) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), fanoutEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdin, addr := startServer(b, cmd)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- fetch(conn)
		}()
	}
	wg.Wait()
	wall = time.Since(t0)
	conn.Close()
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), wall
}

func BenchmarkFanOut(b *testing.B) {
	m := fanoutModel()
	var size int64
	for _, t := range m {
		size += int64(len(t.Data))
	}
	// Encoding the model once, on this goroutine: its CPU time.
	h, _ := New(WithCacheBytes(0))
	h.Publish(1, m)
	ver, _ := h.get(1)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var encoded int64
	for _, it := range h.plan(ver.tensors) {
		f, err := h.frames(nil, ver, &it, nil, false, 0)
		if err != nil {
			b.Fatal(err)
		}
		encoded += int64(len(f))
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	encodeCPU := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()) + time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano())

	var hubCPU, rawCPU, hubWall, rawWall time.Duration
	for b.Loop() {
		hubCPU, hubWall = serverCPU(b, "hub", func(conn *grpc.ClientConn) error {
			n := 0
			_, err := Fetch(context.Background(), hubpb.NewHubClient(conn), Request{Credit: 16}, func(*codec.Tensor) error { n++; return nil })
			if err == nil && n != len(m) {
				err = fmt.Errorf("%d tensors", n)
			}
			return err
		})
		rawCPU, rawWall = serverCPU(b, "raw", func(conn *grpc.ClientConn) error {
			st, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, "/raw/Model",
				grpc.ForceCodec(grpctest.RawCodec{}))
			if err != nil {
				return err
			}
			var empty []byte
			if err := st.SendMsg(&empty); err != nil {
				return err
			}
			st.CloseSend()
			n := 0
			for {
				var msg []byte
				if err := st.RecvMsg(&msg); err == io.EOF {
					break
				} else if err != nil {
					return err
				}
				n++
			}
			if n != len(m) {
				return fmt.Errorf("%d tensors", n)
			}
			return nil
		})
	}
	bar := encodeCPU + rawCPU
	b.ReportMetric(hubCPU.Seconds()/bar.Seconds(), "hub/bar")
	b.Logf("model %d bytes (%d encoded); server CPU: hub %v, raw %v, encode once %v; hub/(encode+raw) = %.2f; wall: hub %v, raw %v",
		size, encoded, hubCPU, rawCPU, encodeCPU, hubCPU.Seconds()/bar.Seconds(), hubWall, rawWall)
}
