package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A small link run over the simulated link and loopback: every chain
// appears once per rate with its median, the autotuner among them, and
// the rate-change scenario reports its two steps.
func TestLinkSmall(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "link.jsonl")
	svg := filepath.Join(dir, "link.svg")
	var out, errb strings.Builder
	code := run([]string{"link", "--rates", "16Mbit,unshaped", "--duration", "300ms", "--reps", "1",
		"--pool", "2097152", "--change", "--json", js, "--plot", svg}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chains := map[float64]map[string]bool{}
	changes := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		if row["scenario"] == "rate change" {
			changes++
			continue
		}
		for _, k := range []string{"rate", "chain", "seconds", "bytes_on_wire", "is_autotune", "is_plain_tcp", "repetitions"} {
			if _, ok := row[k]; !ok {
				t.Fatalf("row without %q: %s", k, sc.Text())
			}
		}
		if s := row["seconds"].(float64); !(s > 0) || row["bytes_on_wire"].(float64) <= 0 {
			t.Fatalf("row %s", sc.Text())
		}
		r := row["rate"].(float64)
		if chains[r] == nil {
			chains[r] = map[string]bool{}
		}
		chains[r][row["chain"].(string)] = true
	}
	for _, r := range []float64{16e6, 0} {
		if !chains[r]["plain TCP"] || !chains[r]["autotune"] || len(chains[r]) < 4 {
			t.Errorf("rate %v: chains %v", r, chains[r])
		}
	}
	if changes != 2 {
		t.Errorf("%d rate-change rows, want 2", changes)
	}
	if st, err := os.Stat(svg); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

// The tensor workload with fl-gradients: weights stay lossless (plane
// coding at best 0.85 of their bytes) and updates go through TopK 1% with
// error feedback, so every chain but plain TCP puts well under 0.85 of the
// bytes on the wire, and the receiver gets every tensor (transfer checks
// the decoded byte count).
func TestLinkTensors(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "link.jsonl")
	var out, errb strings.Builder
	code := run([]string{"link", "--workload", "tensors", "--profile", "fl-gradients", "--rates", "16Mbit",
		"--duration", "300ms", "--reps", "1", "--pool", "4194304", "--update-within", "5ms", "--change", "--json", js}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var row struct {
			Scenario    string  `json:"scenario"`
			Chain       string  `json:"chain"`
			BytesOnWire float64 `json:"bytes_on_wire"`
			RawBytes    float64 `json:"raw_bytes"`
			IsPlainTCP  bool    `json:"is_plain_tcp"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if row.Scenario != "" {
			continue // the rate change: its own test covers its rows
		}
		rows++
		share := row.BytesOnWire / row.RawBytes
		if row.IsPlainTCP && share != 1 || !row.IsPlainTCP && !(share < 0.7) {
			t.Errorf("%s: %.3f of the bytes on the wire", row.Chain, share)
		}
	}
	if rows < 3 {
		t.Errorf("%d rows: %s", rows, data)
	}
}

func TestLinkUsage(t *testing.T) {
	for _, args := range [][]string{
		{"link", "--rates", "fast"},
		{"link", "--link", "carrier-pigeon"},
		{"link", "--reps", "0"},
		{"link", "--plot", "x.pdf"},
		{"link", "--workload", "images"},
		{"link", "--update-within", "5ms"}, // bytes workload
		{"link", "--workload", "mixed", "--update-within", "5ms"},
		{"link", "--profile", "no-such-profile"},
	} {
		var out, errb strings.Builder
		if code := run(args, &out, &errb); code != 2 && code != 1 {
			t.Errorf("%q: exit %d", args, code)
		} else if errb.Len() == 0 {
			t.Errorf("%q: no message", args)
		}
	}
}

// skipWithoutImages skips a test of the mixed workload when
// Fashion-MNIST is not installed.
func skipWithoutImages(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(mixedImagesPath); err != nil {
		t.Skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist; make test does it)")
	}
}

// testImages are the Fashion-MNIST training images, read once.
var testImages = sync.OnceValues(func() ([]byte, error) { return readIDXImages(mixedImagesPath) })

// testMixed returns a mixed workload of pool bytes.
func testMixed(t *testing.T, pool int64) *workload {
	t.Helper()
	skipWithoutImages(t)
	images, err := testImages()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := newMixedWorkload(pool, images)
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

// The mixed workload over the simulated link and loopback: every chain
// has its row at every rate, the zstd peers among them when zstd is
// installed, with the documented JSON fields and a time to the first
// byte; every transfer passed its SHA-256 check (the run fails
// otherwise).
func TestLinkMixed(t *testing.T) {
	skipWithoutImages(t)
	before := goroutines()
	dir := t.TempDir()
	js := filepath.Join(dir, "link.jsonl")
	var out, errb strings.Builder
	code := run([]string{"link", "--workload", "mixed", "--rates", "16Mbit,unshaped", "--duration", "300ms", "--reps", "1",
		"--pool", "2097152", "--json", js}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	prof, err := loadProfile("lossless-fast")
	if err != nil {
		t.Fatal(err)
	}
	chains, err := linkChains(prof, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{} // chain name: is external
	for _, c := range chains {
		want[c.name] = false
	}
	if _, err := exec.LookPath("zstd"); err == nil {
		want["zstd -1 -T1"], want["zstd --adapt -T1"] = true, true
	} else {
		t.Log("zstd not installed: no zstd rows to check")
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[float64]map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"link", "rate", "chain", "seconds", "first_byte_seconds", "bytes_on_wire", "raw_bytes",
			"is_autotune", "is_plain_tcp", "is_external", "repetitions", "goodput"} {
			if _, ok := row[k]; !ok {
				t.Fatalf("row without %q: %s", k, line)
			}
		}
		chain := row["chain"].(string)
		ext, ok := want[chain]
		if !ok {
			t.Errorf("unexpected chain %q", chain)
		}
		if row["is_external"] != ext {
			t.Errorf("%s: is_external %v", chain, row["is_external"])
		}
		first, secs := row["first_byte_seconds"].(float64), row["seconds"].(float64)
		if !(first > 0) || !(first <= secs) || row["bytes_on_wire"].(float64) <= 0 {
			t.Errorf("row %s", line)
		}
		r := row["rate"].(float64)
		if seen[r] == nil {
			seen[r] = map[string]bool{}
		}
		seen[r][chain] = true
	}
	for _, r := range []float64{16e6, 0} {
		for c := range want {
			if !seen[r][c] {
				t.Errorf("rate %v: no row for %q", r, c)
			}
		}
	}
	if !strings.Contains(out.String(), "FIRST BYTE") || !strings.Contains(out.String(), "VS ZSTD -1") {
		t.Errorf("table without the FIRST BYTE and VS ZSTD -1 columns:\n%s", out.String())
	}
	nothingLeft(t, before)
}

// goroutines counts the goroutines but the signal package's, which
// stays once a command has asked for signals.
func goroutines() int {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	return runtime.NumGoroutine() - strings.Count(all, "\nos/signal.loop()")
}

// childProcesses lists the test process's children (Linux: from /proc).
func childProcesses(t *testing.T) string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", os.Getpid()))
	var kids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(tasks) == 0 {
		t.Log("no /proc/PID/task/*/children: child processes not checked")
	}
	return strings.Join(kids, " ")
}

// The mixed workload's tensors: the kinds' shares of the bytes, over
// the pool and near them in every prefix, the tensor sizes, the
// sparsity of the gradients, a random order, images that are runs of
// Fashion-MNIST's, and a pool whose end continues with its start.
func TestMixedWorkload(t *testing.T) {
	const pool = 8 << 20
	wl := testMixed(t, pool)
	if wl.size < pool || wl.size > pool+(1<<18) || wl.size%4 != 0 {
		t.Errorf("size %d for a pool of %d", wl.size, pool)
	}
	bytesOf := map[string]int64{}
	var zeros, gradElems int64
	var total int64
	var kinds []string
	for i, c := range wl.chunks {
		name := wl.names[i]
		if len(c) < mixedMinTensor || len(c) > mixedMaxTensor || len(c)%4 != 0 {
			t.Errorf("tensor %d (%s): %d bytes", i, name, len(c))
		}
		if name == "images" && len(c)%imageBytes != 0 {
			t.Errorf("tensor %d: %d bytes of images", i, len(c))
		}
		if &c[0] != &wl.ring[total] {
			t.Errorf("tensor %d is not at offset %d of the pool", i, total)
		}
		bytesOf[name] += int64(len(c))
		total += int64(len(c))
		for _, k := range mixedKinds {
			if d := float64(bytesOf[k.name]) - k.share*float64(total); math.Abs(d) > 2*mixedMaxTensor {
				t.Errorf("after %d bytes, %s: %.0f bytes off its share", total, k.name, d)
			}
		}
		if name == "gradients" {
			for j := 0; j < len(c); j += 4 {
				if binary.LittleEndian.Uint32(c[j:]) == 0 {
					zeros++
				}
				gradElems++
			}
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != name {
			kinds = append(kinds, name)
		}
	}
	if total != wl.size {
		t.Errorf("tensors hold %d bytes, the pool %d", total, wl.size)
	}
	for _, k := range mixedKinds {
		if share := float64(bytesOf[k.name]) / float64(total); math.Abs(share-k.share) > 0.02 {
			t.Errorf("%s: %.3f of the bytes, want %.2f", k.name, share, k.share)
		}
	}
	if z := float64(zeros) / float64(gradElems); math.Abs(z-0.99) > 0.002 {
		t.Errorf("gradients: %.4f zeros, want 0.99", z)
	}
	if len(kinds) <= len(mixedKinds) {
		t.Errorf("kinds in runs %v: not in random order", kinds)
	}
	if !bytes.Equal(wl.ring[wl.size:], wl.ring[:len(wl.ring)-int(wl.size)]) {
		t.Error("the pool's end does not continue with its start")
	}
	images, _ := testImages()
	for i, c := range wl.chunks {
		if wl.names[i] != "images" {
			continue
		}
		found := false
		for k := 0; !found && k+len(c) <= len(images); k += imageBytes {
			// The first image, then the rest (the race detector checks
			// every byte of a comparison).
			found = bytes.Equal(images[k:k+imageBytes], c[:imageBytes]) && bytes.Equal(images[k:k+len(c)], c)
		}
		if !found {
			t.Errorf("tensor %d: not a run of consecutive Fashion-MNIST images", i)
		}
	}
}

// The mixed workload's Writes: sizes in [64 KiB, 4 MiB], the same every
// time, and together the stream whose hash the receiver is checked
// against, across the pool's repeats.
func TestMixedWrites(t *testing.T) {
	wl := testMixed(t, 1<<20)
	n := 5*wl.size + 12345
	var sizes [2][]int
	for k := range sizes {
		h := sha256.New()
		rec := writerFunc(func(p []byte) (int, error) {
			sizes[k] = append(sizes[k], len(p))
			return h.Write(p)
		})
		sent, err := wl.send(rec, n, func() bool { return false })
		if err != nil || sent != n {
			t.Fatalf("sent %d of %d: %v", sent, n, err)
		}
		if want := wl.streamHash(n); !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatal("the Writes do not hold the workload's stream")
		}
	}
	if !slices.Equal(sizes[0], sizes[1]) {
		t.Error("two transfers make different Writes")
	}
	for i, s := range sizes[0][:len(sizes[0])-1] { // the last one is what is left
		if s < mixedMinWrite || s > mixedMaxWrite {
			t.Errorf("write %d: %d bytes", i, s)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A transfer that corrupts one bit, or loses the last byte, fails the
// check; the intact one passes.
func TestLinkCorruptTransfer(t *testing.T) {
	wl, err := newWorkload(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	n := 2*wl.size + 1000
	want := wl.streamHash(n)
	for _, tc := range []struct {
		name    string
		corrupt func(p []byte, at int64) []byte // at: the offset of p in the stream
		ok      bool
	}{
		{"intact", func(p []byte, _ int64) []byte { return p }, true},
		{"one bit", func(p []byte, at int64) []byte {
			if mid := n / 2; at <= mid && mid < at+int64(len(p)) {
				p = slices.Clone(p)
				p[mid-at] ^= 4
			}
			return p
		}, false},
		{"short", func(p []byte, at int64) []byte {
			if at+int64(len(p)) == n {
				p = p[:len(p)-1]
			}
			return p
		}, false},
	} {
		pr, pw := io.Pipe()
		go func() {
			var at int64
			_, err := wl.send(writerFunc(func(p []byte) (int, error) {
				q := tc.corrupt(p, at)
				at += int64(len(p))
				if _, err := pw.Write(q); err != nil {
					return 0, err
				}
				return len(p), nil
			}), n, func() bool { return false })
			pw.CloseWithError(err)
		}()
		got, err := receiveHashed(pr)
		if err != nil {
			t.Fatal(err)
		}
		err = checkReceived(got, n, want)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, errTransferMismatch) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// An external peer that fails, and one whose transfer is cancelled, end
// the transfer at once with an error, leaving no process or goroutine
// behind.
func TestLinkExternalAbort(t *testing.T) {
	wl, err := newWorkload(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := loadProfile("lossless-fast")
	if err != nil {
		t.Fatal(err)
	}
	b := &linkBench{prof: prof, work: wl, stderr: io.Discard}
	before := goroutines()
	if f, err := exec.LookPath("false"); err == nil {
		ch := linkChain{name: "false", zstd: f, external: []string{}}
		_, err := b.transfer(context.Background(), "sim", 16e6, ch, 4<<20, 0, nil, nil)
		if err == nil {
			t.Error("a failing peer: no error")
		}
		t.Log(err)
	}
	if z, err := exec.LookPath("zstd"); err == nil {
		// 1 TiB at 1 Mbit/s: only the cancellation ends the transfer (if
		// it did not, the test would hang until go test's timeout shows
		// where).
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err := b.transfer(ctx, "sim", 1e6, linkExternals(z)[0], 1<<40, 0, nil, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("cancelled after %v: %v", time.Since(start), err)
		}
	} else {
		t.Log("zstd not installed: cancellation not checked")
	}
	nothingLeft(t, before)
}

// nothingLeft checks that no more goroutines run than before (given a
// moment to end) and that no child process is left.
func nothingLeft(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for goroutines() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := goroutines(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
	if kids := childProcesses(t); kids != "" {
		t.Errorf("child processes left: %s", kids)
	}
}

// TestPlotLink draws the speedup plot from rows: the rate axis has whole
// labels and the legend names every chain.
func TestPlotLink(t *testing.T) {
	var rows []*linkRow
	for _, rate := range []float64{1e6, 10e6, 100e6, 1e9, 0} {
		rows = append(rows, &linkRow{Link: "sim", Rate: rate, Chain: "plain TCP", Seconds: 10, IsPlainTCP: true})
		for i, c := range []string{"autotune", "zstd -1 (the tool)", "*:zstd(1)"} {
			rows = append(rows, &linkRow{Link: "sim", Rate: rate, Chain: c, Seconds: 10 / (1 + float64(i+1)*1e8/(rate+1e7))})
		}
	}
	dir := t.TempDir()
	for _, name := range []string{"link.svg", "link.png"} {
		path := filepath.Join(dir, name)
		if err := plotLink(path, rows); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "link.svg" {
			for _, want := range []string{"1 Mbit/s", "100 Mbit/s", "1 Gbit/s", "unshaped", "autotune", "zstd -1 (the tool)"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("the plot has no %q", want)
				}
			}
		}
	}
	if os.Getenv("PLOT_OUT") != "" {
		plotLink(os.Getenv("PLOT_OUT"), rows)
	}
}
