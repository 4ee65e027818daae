package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
)

// python3 is Debian's interpreter, the one python3-numpy installs for.
const python3 = "/usr/bin/python3"

// fedPyScript is the Python client, under the package directory
// (--python).
var fedPyScript = filepath.Join("bench", "fed_client.py")

// checkFedPython says what is missing for the py: rows.
func checkFedPython(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, fedPyScript)); err != nil {
		return usagef("py: rows: %v (--python: the directory of the Python package, python/ in the source tree)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tensorpress", "libtensorpress.so")); err != nil {
		return usagef("py: rows need the Python package's library: run `make python` (%v)", err)
	}
	if _, err := os.Stat(python3); err != nil {
		return usagef("py: rows need %s with numpy (Debian's python3-numpy): %v", python3, err)
	}
	return nil
}

// fedPyShards writes each client's shard of the training set (the
// indices fl.Shards gives, the Go clients' own) as little-endian int32
// into dir/shards/ID.i32 and returns the clients' weights.
func fedPyShards(cfg fedConfig) ([]float32, error) {
	flc, err := cfg.flConfig()
	if err != nil {
		return nil, err
	}
	train, _, err := fl.LoadFashionMNISTHead(cfg.Data, cfg.TrainLimit, 1)
	if err != nil {
		return nil, err
	}
	sh, err := fl.Shards(flc, train)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "shards"), 0o755); err != nil {
		return nil, err
	}
	weights := make([]float32, len(sh))
	for id, s := range sh {
		b := make([]byte, 4*len(s))
		for i, x := range s {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
		if err := os.WriteFile(fedPyShardPath(cfg.Dir, id), b, 0o644); err != nil {
			return nil, err
		}
		weights[id] = float32(float64(len(s)) / float64(train.N))
	}
	return weights, nil
}

func fedPyShardPath(dir string, id int) string {
	return filepath.Join(dir, "shards", fmt.Sprintf("%d.i32", id))
}

// fedPyConfig is what a Python client reads from CODEC_BENCH_FED_PY.
type fedPyConfig struct {
	ID          int     `json:"id"`
	Addr        string  `json:"addr"`
	Rounds      int     `json:"rounds"`
	Spec        string  `json:"spec"`
	Lossy       bool    `json:"lossy"`
	Base        bool    `json:"base"`
	Batch       int     `json:"batch"`
	LR          float32 `json:"lr"`
	Momentum    float32 `json:"momentum"`
	LocalEpochs int     `json:"local_epochs"`
	Seed        uint64  `json:"seed"`
	Data        string  `json:"data"`
	Shard       string  `json:"shard"`
	Weight      float32 `json:"weight"`
	// py:auto: rows: the time an upload should take (seconds) and the
	// densities chosen among.
	Within    float64   `json:"within,omitempty"`
	Densities []float64 `json:"densities,omitempty"`
}

// fedStartPy starts Python client id, connecting to the hub at addr (its
// link's relay).
func fedStartPy(cfg fedConfig, id int, addr string, weight float32) (*exec.Cmd, io.WriteCloser, *bufio.Reader, error) {
	pc := fedPyConfig{ID: id, Addr: addr, Rounds: cfg.Rounds, Spec: cfg.Row.Up, Lossy: cfg.Row.Down != "", Base: cfg.Row.Base,
		Batch: cfg.Batch, LR: cfg.LR, Momentum: cfg.Momentum, LocalEpochs: max(cfg.LocalEpochs, 1), Seed: cfg.Seed,
		Data: cfg.Data, Shard: fedPyShardPath(cfg.Dir, id), Weight: weight}
	if cfg.Row.Auto {
		pc.Within, pc.Densities = cfg.Within.Seconds(), cfg.Row.Densities
	}
	b, err := json.Marshal(pc)
	if err != nil {
		return nil, nil, nil, err
	}
	dir, err := filepath.Abs(cfg.Python)
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(python3, filepath.Join(dir, fedPyScript))
	cmd.Env = append(os.Environ(), "CODEC_BENCH_FED_PY="+string(b), "PYTHONPATH="+dir, "OPENBLAS_NUM_THREADS=1")
	in, out, err := startPiped(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	return cmd, in, out, nil
}

// fedPyLink is a Python client's link: a listener on loopback whose
// connections go on to the hub through a netsim.Duplex at the client's
// rates and round trip, the Go clients' link in their own process.
type fedPyLink struct {
	ln     net.Listener
	links  fedLinks
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startFedPyLink(hubAddr string, up, down float64, rtt time.Duration) (*fedPyLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &fedPyLink{ln: ln}
	l.links.up, l.links.down = up, down
	l.wg.Go(func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", hubAddr)
			if err != nil {
				a.Close()
				continue
			}
			d := l.links.add(b, rtt)
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				a.Close()
				d.Close()
				return
			}
			l.conns = append(l.conns, a, d)
			l.mu.Unlock()
			// Up: what the client writes goes through the Duplex's
			// uplink; down: what the hub sends comes through its
			// downlink.
			l.wg.Go(func() { io.Copy(d, a); d.Close() })
			l.wg.Go(func() { io.Copy(a, d); a.Close() })
		}
	})
	return l, nil
}

func (l *fedPyLink) addr() string { return l.ln.Addr().String() }

// bytes returns the bytes down and up the link carried.
func (l *fedPyLink) bytes() (down, up int64) { return l.links.bytes() }

func (l *fedPyLink) close() {
	l.ln.Close()
	l.mu.Lock()
	l.closed = true
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
