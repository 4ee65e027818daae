package hub

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// Memory: a 2 GiB model (a safetensors file of N(0, 0.02) float32 weights,
// 64 tensors of 32 MiB, written here) published from disk by a hub in a
// process of its own, fetched by a client process that writes it to disk;
// the peak RSS of each (the kernel's maxrss). Then 8 clients at once.
//
//	go test -run '^$' -bench Memory2GiB -benchtime 1x -timeout 30m ./hub
//
// The hub runs with an 8 MiB chunk cache; clients with a credit of 4.

const memoryEnv = "TENSORPRESS_HUB_MEMORY"

// writeModelFile writes the model file, tensor by tensor, in 1 MiB pieces.
func writeModelFile(path string, tensors, elems int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	infos := make([]tensorfile.TensorInfo, tensors)
	for i := range infos {
		infos[i] = tensorfile.TensorInfo{Name: fmt.Sprintf("layers.%02d.weight", i), DType: codec.F32, Shape: []int64{int64(elems)}}
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := tensorfile.NewSafetensorsWriter(bw, infos, nil)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	for range tensors {
		for left := elems * 4; left > 0; left -= len(buf) {
			b := buf[:min(len(buf), left)]
			for j := 0; j+4 <= len(b); j += 4 {
				v := math.Float32bits(float32(rng.NormFloat64() * 0.02))
				b[j], b[j+1], b[j+2], b[j+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// runMemoryProcess is a server ("serve FILE") or a client ("fetch ADDR
// OUT") process of BenchmarkMemory2GiB.
func runMemoryProcess(args []string) {
	err := func() error {
		switch args[0] {
		case "serve":
			st, err := tensorfile.OpenSafetensorsFile(args[1])
			if err != nil {
				return err
			}
			defer st.Close()
			h, err := New(WithCacheBytes(8 << 20))
			if err != nil {
				return err
			}
			if err := h.PublishSafetensors(1, st.Safetensors); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			s := grpc.NewServer()
			hubpb.RegisterHubServer(s, NewServer(h))
			go s.Serve(ln)
			fmt.Printf("ADDR %s\n", ln.Addr())
			io.Copy(io.Discard, os.Stdin)
			s.Stop()
			return printHWM()
		case "fetch":
			conn, err := grpc.NewClient(args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer conn.Close()
			out, err := os.Create(args[2])
			if err != nil {
				return err
			}
			defer out.Close()
			bw := bufio.NewWriterSize(out, 1<<20)
			_, err = FetchChunks(context.Background(), hubpb.NewHubClient(conn), Request{Credit: 4}, func(t *codec.Tensor) error {
				_, err := bw.Write(t.Data)
				return err
			})
			if err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			return printHWM()
		case "resume":
			return runResume(args[1], args[2], args[3], args[4])
		case "collect":
			h, err := New()
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			s := grpc.NewServer()
			hubpb.RegisterHubServer(s, NewServer(h))
			go s.Serve(ln)
			fmt.Printf("ADDR %s\n", ln.Addr())
			io.Copy(io.Discard, os.Stdin)
			s.Stop()
			// The peak so far: the uploads. Sum copies the sums after it.
			if err := printHWM(); err != nil {
				return err
			}
			sum, ok := h.Sum(1)
			if !ok {
				return errors.New("no round 1")
			}
			var n int64
			for _, t := range sum.Tensors {
				n += int64(len(t.Data))
				if c := sum.Counts[t.Name]; c != uploadClients {
					return fmt.Errorf("%q: %d updates", t.Name, c)
				}
			}
			fmt.Printf("SUM %d\n", n)
			return nil
		case "upload":
			spec, err := gradient.Parse(args[2])
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer conn.Close()
			var seed uint64
			fmt.Sscan(args[3], &seed)
			rng := rand.New(rand.NewPCG(seed, 9))
			g := make([]*codec.Tensor, uploadTensors)
			for i := range g {
				w := make([]float32, uploadElems)
				for j := range w {
					w[j] = float32(rng.NormFloat64() * 0.01)
				}
				g[i] = codec.FromFloat32(fmt.Sprintf("layers.%02d.grad", i), w, uploadElems)
			}
			return Upload(context.Background(), hubpb.NewHubClient(conn), gradient.NewOutbox(nil),
				UploadRequest{Spec: spec, Round: 1, Peer: args[3]}, g)
		}
		return fmt.Errorf("unknown mode %q", args[0])
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "memory process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func memoryProcess(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), memoryEnv+"="+strings.Join(args, "\x1f"))
	cmd.Stderr = os.Stderr
	return cmd
}

// printHWM prints the process's peak RSS so far ("HWM n kB", the
// kernel's VmHWM). Not the rusage of wait: on Linux that counts the
// parent's peak too, carried across the exec.
func printHWM() error {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			fmt.Printf("HWM %s\n", strings.TrimSpace(v))
			return nil
		}
	}
	return errors.New("no VmHWM in /proc/self/status")
}

// hwmMiB reads what printHWM printed, in MiB.
func hwmMiB(line string) (float64, error) {
	var kb float64
	if _, err := fmt.Sscanf(line, "HWM %f kB", &kb); err != nil {
		return 0, fmt.Errorf("%q: %v", line, err)
	}
	return kb / 1024, nil
}

func BenchmarkMemory2GiB(b *testing.B) {
	dir := b.TempDir()
	model := filepath.Join(dir, "model.safetensors")
	t0 := time.Now()
	if err := writeModelFile(model, 64, 8<<20); err != nil {
		b.Fatal(err)
	}
	b.Logf("model written in %v", time.Since(t0))
	for b.Loop() {
		for _, clients := range []int{1, 8} {
			srv := memoryProcess("serve", model)
			stdin, out := startServerOut(b, srv)
			addr := strings.TrimPrefix(out.line(b), "ADDR ")
			t1 := time.Now()
			var wg sync.WaitGroup
			rss := make([]float64, clients)
			errs := make([]error, clients)
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o, err := memoryProcess("fetch", addr, filepath.Join(dir, fmt.Sprintf("out%d", i))).Output()
					if err == nil {
						rss[i], err = hwmMiB(strings.TrimSpace(string(o)))
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			wall := time.Since(t1)
			stdin.Close()
			hub, err := hwmMiB(out.line(b))
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Wait(); err != nil {
				b.Fatal(err)
			}
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("%d client(s): %v; peak RSS: hub %.1f MiB, client (largest) %.1f MiB",
				clients, wall, hub, slices.Max(rss))
			for i := range clients {
				os.Remove(filepath.Join(dir, fmt.Sprintf("out%d", i)))
			}
		}
	}
}

// Aggregation memory: 16 client processes upload an update of a 64 MiB
// model (32 float32 tensors of 2 MiB) each for one round at once, to a hub
// in a process of its own; the hub's peak RSS against one model per
// client (1 GiB). TopK at 1% and dense float32.
//
//	go test -run '^$' -bench UploadMemory -benchtime 1x ./hub
const (
	uploadClients = 16
	uploadTensors = 32
	uploadElems   = 512 << 10
)

func BenchmarkUploadMemory(b *testing.B) {
	for b.Loop() {
		for _, spec := range []string{"topk(0.01)", "none"} {
			srv := memoryProcess("collect")
			stdin, out := startServerOut(b, srv)
			addr := strings.TrimPrefix(out.line(b), "ADDR ")
			t0 := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, uploadClients)
			for i := range uploadClients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = memoryProcess("upload", addr, spec, fmt.Sprint(i+1)).Run()
				}()
			}
			wg.Wait()
			wall := time.Since(t0)
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			stdin.Close()
			hwm := strings.TrimPrefix(out.line(b), "HWM ")
			sum := out.line(b)
			if err := srv.Wait(); err != nil {
				b.Fatal(err)
			}
			model := float64(uploadTensors*uploadElems*4) / (1 << 20)
			b.Logf("%s: %d clients in %v; hub peak RSS while they upload %s (%s bytes summed; one model %.0f MiB, one per client %.0f MiB)",
				spec, uploadClients, wall.Round(time.Millisecond), hwm, strings.TrimPrefix(sum, "SUM "), model, model*uploadClients)
		}
	}
}

// lines reads a server process's stdout line by line.
type lines struct{ r *bufio.Reader }

func (l lines) line(b *testing.B) string {
	b.Helper()
	s, err := l.r.ReadString('\n')
	if err != nil {
		b.Fatalf("server: %q, %v", s, err)
	}
	return strings.TrimSpace(s)
}

func startServerOut(b *testing.B, cmd *exec.Cmd) (io.WriteCloser, lines) {
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
	return stdin, lines{bufio.NewReader(stdout)}
}
