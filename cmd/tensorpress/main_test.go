package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/syncbuf"
	"github.com/tensorpress/tensorpress/internal/testbin"
	"github.com/tensorpress/tensorpress/tensorfile"
	"github.com/tensorpress/tensorpress/testvectors"
)

// TestMain fails the run if a goroutine is left behind, and removes the
// command built for the tests of real processes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		built.Remove()
		os.Exit(code)
	}))
}

// built is the tensorpress command the tests of real processes run,
// built once for the run (a build per test linked the same binary 14
// times).
var built testbin.Binary

// buildTensorpress returns the path of the command built from this
// package (on the first call), or skips the test under -short: make test
// runs the tests of real processes once, in its race pass.
func buildTensorpress(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no tests of real processes (make test runs them in its race pass)")
	}
	bin, err := built.Path(".", "tensorpress")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// syncBuffer is a log safe for a writer and a reader at once.
type syncBuffer = syncbuf.Buffer

func model(seed uint64) []*codec.Tensor {
	rng := rand.New(rand.NewPCG(1, 1)) // the same shapes for every seed
	var ts []*codec.Tensor
	for i := range 9 {
		n := 100 + rng.IntN(3000)
		if i%3 == 0 {
			n = 300000 // several chunks
		}
		ts = append(ts, testvectors.Normal(fmt.Sprintf("layers.%d.weight", i), n, 0.02, seed*100+uint64(i)))
	}
	return ts
}

// startHub runs 'tensorpress hub' on dir and returns its address and a
// function that stops it (as SIGTERM does) and waits.
var metricsAddr string

// lastHubLog is the log of the hub startHub started last.
var lastHubLog *syncBuffer

func startHub(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hubContext = func() context.Context { return ctx }
	errb := new(syncBuffer)
	lastHubLog = errb
	done := make(chan int, 1)
	go func() {
		done <- run(append([]string{"hub", "--listen", "127.0.0.1:0"}, args...), new(bytes.Buffer), errb)
	}()
	re := regexp.MustCompile(`msg=listening addr=(\S+)`)
	mre := regexp.MustCompile(`msg=metrics addr=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := re.FindStringSubmatch(errb.String())
		mm := mre.FindStringSubmatch(errb.String())
		if m != nil && (mm != nil || !slices.Contains(args, "--metrics")) {
			if mm != nil {
				metricsAddr = mm[1]
			}
			return m[1], func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("hub: exit %d: %s", code, errb.String())
				}
			}
		}
		select {
		case code := <-done:
			t.Fatalf("hub: exit %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub did not start: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fetch(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"fetch"}, args...), &out, &errb); code != 0 {
		t.Fatalf("fetch %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// TestHubFetch serves two versions from a directory (a safetensors file,
// then .npy files) and fetches them: to a safetensors file, to .npy files
// chunk by chunk, and as deltas against the first; every tensor bit for
// bit.
func TestHubFetch(t *testing.T) {
	dir := t.TempDir()
	m1, m2 := model(1), model(2)
	if err := os.MkdirAll(filepath.Join(dir, "models", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create(filepath.Join(dir, "models", "1", "model.safetensors"))
	if err := tensorfile.WriteSafetensors(f, m1, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.MkdirAll(filepath.Join(dir, "models", "2"), 0o755)
	for _, x := range m2 {
		f, _ := os.Create(filepath.Join(dir, "models", "2", x.Name+".npy"))
		if err := tensorfile.WriteNpy(f, x); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// The directory and the poll interval from a config file.
	conf := filepath.Join(dir, "hub.yaml")
	os.WriteFile(conf, []byte("# the hub of TestHubFetch\ndir: "+filepath.Join(dir, "models")+"\nwatch: 20ms\nlog-level: debug\n"), 0o644)
	addr, stop := startHub(t, "--config", conf, "--metrics", "127.0.0.1:0")
	defer stop()

	check := func(path string, want []*codec.Tensor) {
		t.Helper()
		st, err := tensorfile.OpenSafetensorsFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, x := range want {
			got, err := st.Read(x.Name)
			if err != nil || !bytes.Equal(got.Data, x.Data) {
				t.Fatalf("%s: %q: %v", path, x.Name, err)
			}
		}
	}
	v1 := filepath.Join(dir, "v1.safetensors")
	out := fetch(t, "--hub", addr, "--version", "1", "--out", v1)
	check(v1, m1)
	if !strings.Contains(out, "version 1: 9 tensors") {
		t.Errorf("fetch said %q", out)
	}
	npyDir := filepath.Join(dir, "v2")
	fetch(t, "--hub", addr, "--out", npyDir+"/") // a directory, made
	for _, x := range m2 {
		f, err := os.Open(filepath.Join(npyDir, x.Name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tensorfile.ReadNpy(f)
		f.Close()
		if err != nil || !bytes.Equal(got.Data, x.Data) {
			t.Fatalf("%s.npy: %v", x.Name, err)
		}
	}
	v2 := filepath.Join(dir, "v2.safetensors")
	out = fetch(t, "--hub", addr, "--base", v1, "--out", v2)
	check(v2, m2)
	if !strings.Contains(out, "9 as deltas") {
		t.Errorf("fetch with --base said %q", out)
	}
	v2fast := filepath.Join(dir, "v2fast.safetensors")
	if out = fetch(t, "--hub", addr, "--base", v1, "--fast-deltas", "--out", v2fast); !strings.Contains(out, "9 as deltas") {
		t.Errorf("fetch with --base --fast-deltas said %q", out)
	}
	check(v2fast, m2)
	// A version written while the hub runs (under another name, then
	// renamed) is served once the hub has looked.
	m3 := model(3)
	tmp := filepath.Join(dir, "models", ".3.tmp")
	os.MkdirAll(tmp, 0o755)
	f, _ = os.Create(filepath.Join(tmp, "model.safetensors"))
	if err := tensorfile.WriteSafetensors(f, m3, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "models", "3")); err != nil {
		t.Fatal(err)
	}
	v3 := filepath.Join(dir, "v3.safetensors")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var out, errb bytes.Buffer
		if run([]string{"fetch", "--hub", addr, "--version", "3", "--out", v3}, &out, &errb) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("version 3 not served: %s", errb.String())
		}
	}
	check(v3, m3)
	// /healthz and /metrics answer.
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "tensorpress_hub_versions 3"} {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %q in %.300s", path, want, b)
		}
	}
}

func TestUsage(t *testing.T) {
	dir := t.TempDir()
	conf := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badKey := conf("bad-key.yaml", "hub: x:1\nout: d\nnope: 1\n")
	badValue := conf("bad-value.yaml", "retention: many\n")
	notMap := conf("list.yaml", "- dir\n")
	fromConf := conf("fetch.yaml", "hub: x:1\n")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Commands:"},
		{[]string{"-h"}, 0, "hub"},
		{[]string{"hub", "-h"}, 0, "--dir"},
		{[]string{"fetch", "-h"}, 0, "--base"},
		{[]string{"hub"}, 2, "--dir is required"},
		{[]string{"fetch", "--hub", "x:1"}, 2, "--out is required"},
		{[]string{"fetch", "--hub", "x:1", "--out", "d", "--base", "b.safetensors"}, 2, "no such directory"},
		{[]string{"hub", "--dir", "/nonexistent"}, 1, "no such file"},
		{[]string{"nope"}, 2, "unknown command"},
		{[]string{"proxy", "-h"}, 0, "--side"},
		{[]string{"proxy", "--listen", ":0", "--to", "x:1"}, 2, "want local or remote"},
		{[]string{"proxy", "--side", "local", "--to", "x:1"}, 2, "--listen is required"},
		{[]string{"fetch", "--config", badKey}, 2, `bad-key.yaml:3:1: "nope" is not a flag of fetch`},
		{[]string{"hub", "--config", badValue, "--dir", "d"}, 2, "bad-value.yaml:1:12: retention: parse error"},
		{[]string{"hub", "--config", notMap}, 2, "list.yaml:1:1: want a map"},
		{[]string{"fetch", "--config", fromConf}, 2, "--out is required"}, // --hub came from the file
		{[]string{"fetch", "--config", filepath.Join(dir, "none.yaml")}, 2, "no such file"},
		{[]string{"hub", "--dir", "d", "--log-level", "loud"}, 2, `--log-level "loud"`},
		{[]string{"hub", "--dir", "d", "--cache", "12XB"}, 2, `unknown size unit "XB"`},
		{[]string{"hub", "--relay"}, 2, "--relay needs --nats"},
		{[]string{"hub", "--relay", "--nats", "nats://127.0.0.1:1"}, 1, "NATS at nats://127.0.0.1:1: nats: no servers available"},
		{[]string{"hub", "--relay", "--nats", "nats://x:1", "--dir", "d"}, 2, "--dir is for an origin"},
		{[]string{"hub", "--dir", "d", "--nats", "nats://x:1", "--nats-listen", ":0"}, 2, "one or the other"},
		{[]string{"hub", "--dir", "d", "--nats-store", "s"}, 2, "--nats-store goes with --nats-listen"},
		{[]string{"hub", "--dir", "d", "--log-format", "xml"}, 2, `--log-format "xml"`},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("%v: exit %d, want %d; output %q", c.args, code, c.code, out.String()+errb.String())
		}
	}
}
