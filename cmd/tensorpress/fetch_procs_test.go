package main

// Helpers of the fleet tests: the tensorpress binary built once per test,
// hub and fetch processes, models written to disk with their digests,
// and a proxy that counts (and may slow, or hold) what the hub sends.

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/netsim"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// digests are a model's tensors' SHA-256s by name.
type digests map[string][32]byte

// writeModel writes version v of a model of n F32 tensors of size bytes
// each into root/v/model.safetensors, as the hub reads it; tensor i's
// bits are random from seed(i). It never holds more than a tensor.
func writeModel(t *testing.T, root string, v, n int, size int64, seed func(i int) uint64) digests {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(v))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ds := digests{}
	writeST(t, filepath.Join(dir, "model.safetensors"), n, size, seed, nil, ds)
	return ds
}

// writeST writes the safetensors file of writeModel at path, with meta.
func writeST(t *testing.T, path string, n int, size int64, seed func(i int) uint64, meta map[string]string, ds digests) {
	t.Helper()
	infos := make([]tensorfile.TensorInfo, n)
	for i := range infos {
		infos[i] = tensorfile.TensorInfo{Name: fmt.Sprintf("layers.%03d.weight", i), DType: codec.F32, Shape: []int64{size / 4}}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	sw, err := tensorfile.NewSafetensorsWriter(bw, infos, meta, tensorfile.WithKeepOrder(true))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	for i := range infos {
		rng := rand.NewChaCha8([32]byte{byte(seed(i)), byte(seed(i) >> 8), byte(i), byte(i >> 8)})
		rng.Read(buf)
		// Normal-ish weights, not random bits: finite, compressible a little.
		for j := 0; j+4 <= len(buf); j += 4 {
			binary.LittleEndian.PutUint32(buf[j:], binary.LittleEndian.Uint32(buf[j:])&0x3dffffff)
		}
		ds[infos[i].Name] = sha256.Sum256(buf)
		if _, err := sw.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
}

// checkST checks the safetensors file at path against want, tensor by
// tensor, reading a tensor at a time; it returns an error rather than
// failing, for the checks of files that may be absent.
func checkST(path string, want digests) error {
	f, err := tensorfile.OpenSafetensorsFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Len() != len(want) {
		return fmt.Errorf("%s: %d tensors, want %d", path, f.Len(), len(want))
	}
	for name, d := range want {
		i := f.Index(name)
		if i < 0 {
			return fmt.Errorf("%s: no tensor %q", path, name)
		}
		sec, err := f.Section(i)
		if err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(h, sec); err != nil {
			return err
		}
		if [32]byte(h.Sum(nil)) != d {
			return fmt.Errorf("%s: tensor %q differs", path, name)
		}
	}
	return nil
}

// checkNpy checks the .npy file of tensor name in dir against d.
func checkNpy(dir, name string, d [32]byte) error {
	f, err := os.Open(filepath.Join(dir, name+".npy"))
	if err != nil {
		return err
	}
	defer f.Close()
	x, err := tensorfile.ReadNpy(f)
	if err != nil {
		return fmt.Errorf("%s.npy: %w", name, err)
	}
	if sha256.Sum256(x.Data) != d {
		return fmt.Errorf("%s.npy differs", name)
	}
	return nil
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// hubProc is a hub process.
type hubProc struct {
	cmd  *exec.Cmd
	addr string
	log  *syncBuffer
	done chan error
}

// startHubProc starts 'tensorpress hub' on models at listen and waits
// until it listens.
func startHubProc(t *testing.T, bin, models, listen string, args ...string) *hubProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"hub", "--dir", models, "--listen", listen, "--watch", "0"}, args...)...)
	h := &hubProc{cmd: cmd, log: new(syncBuffer), done: make(chan error, 1)}
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(h.log, sc.Text())
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
		h.done <- cmd.Wait()
	}()
	a, ok := <-addr
	if !ok {
		t.Fatalf("hub ended before listening: %s", h.log)
	}
	h.addr = a
	t.Cleanup(func() { h.stop() })
	return h
}

// stop kills the hub (if still running) and waits for it.
func (h *hubProc) stop() {
	h.cmd.Process.Kill()
	if h.done != nil {
		<-h.done
		h.done = nil
	}
}

// fetchProc is a fetch process whose stderr lines are kept and watched.
type fetchProc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	errs   *syncBuffer
	lines  chan string // stderr lines, for who waits for one; dropped when full
	result chan error
}

func startFetch(t *testing.T, bin string, args ...string) *fetchProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"fetch"}, args...)...)
	p := &fetchProc{cmd: cmd, out: new(syncBuffer), errs: new(syncBuffer), lines: make(chan string, 1024), result: make(chan error, 1)}
	cmd.Stdout = p.out
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(p.errs, sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
		p.result <- cmd.Wait()
	}()
	return p
}

// waitLine waits for a stderr line holding s (false: the process ended).
func (p *fetchProc) waitLine(s string) bool {
	for l := range p.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// wait waits for the process and returns its error.
func (p *fetchProc) wait() error {
	return <-p.result
}

// meter is a TCP proxy in front of the hub that counts the bytes the hub
// sends, over a link of a given rate (0: as fast as it goes), and calls
// at, if set, after each write with the count so far: at may block,
// holding the hub's bytes back.
type meter struct {
	ln   net.Listener
	to   atomic.Pointer[string]
	rate float64
	n    atomic.Int64
	at   atomic.Pointer[func(int64)]
	mu   sync.Mutex
	open map[net.Conn]bool
	wg   sync.WaitGroup
}

func newMeter(t *testing.T, to string, rate float64) *meter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &meter{ln: ln, rate: rate, open: map[net.Conn]bool{}}
	m.to.Store(&to)
	m.wg.Add(1)
	go m.accept()
	t.Cleanup(m.close)
	return m
}

func (m *meter) addr() string { return m.ln.Addr().String() }

func (m *meter) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.serve(c)
		}()
	}
}

func (m *meter) track(c net.Conn, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if on {
		m.open[c] = true
	} else {
		delete(m.open, c)
	}
}

func (m *meter) serve(c net.Conn) {
	defer c.Close()
	h, err := net.Dial("tcp", *m.to.Load())
	if err != nil {
		return
	}
	defer h.Close()
	var down net.Conn = c
	if m.rate > 0 {
		down = netsim.Shape(c, netsim.Link{Rate: m.rate, Burst: 32 << 10})
		defer down.Close()
	}
	m.track(c, true)
	m.track(h, true)
	defer m.track(c, false)
	defer m.track(h, false)
	go func() {
		io.Copy(h, c)
		h.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		k, err := h.Read(buf)
		if k > 0 {
			if _, werr := down.Write(buf[:k]); werr != nil {
				return
			}
			n := m.n.Add(int64(k))
			if at := m.at.Load(); at != nil {
				(*at)(n)
			}
		}
		if err != nil {
			return
		}
	}
}

func (m *meter) close() {
	m.ln.Close()
	m.mu.Lock()
	for c := range m.open {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}
