package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// seedIndex gives tensor i the bits of seed i.
func seedIndex(i int) uint64 { return uint64(i) }

// holdAt returns a meter hook that, once the count reaches n, signals
// held and blocks until release is closed.
func holdAt(n int64, held, release chan struct{}) *func(int64) {
	var once sync.Once
	f := func(got int64) {
		if got >= n {
			once.Do(func() {
				close(held)
				<-release
			})
		}
	}
	return &f
}

// TestFetchSurvivesHubKill kills the hub (SIGKILL) in the middle of a
// fetch and starts it again once the fetch has failed to reconnect twice:
// the same fetch process finishes, bit for bit.
func TestFetchSurvivesHubKill(t *testing.T) { testHubFault(t, syscall.SIGKILL) }

// TestFetchSurvivesHubDrain drains the hub (SIGTERM: GOAWAY, then the
// streams cut after --drain) in the middle of a fetch, and starts it
// again: the same fetch process finishes, bit for bit.
func TestFetchSurvivesHubDrain(t *testing.T) { testHubFault(t, syscall.SIGTERM) }

func testHubFault(t *testing.T, sig syscall.Signal) {
	bin := buildTensorpress(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	want := writeModel(t, models, 1, 16, 1<<20, seedIndex)
	h := startHubProc(t, bin, models, "127.0.0.1:0", "--drain", "100ms")
	m := newMeter(t, h.addr, 8<<20) // 8 MiB/s: a fetch in progress when the hub goes
	held, release := make(chan struct{}), make(chan struct{})
	m.at.Store(holdAt(8<<20, held, release))
	out := filepath.Join(dir, "model.safetensors")
	f := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "0")
	select {
	case <-held: // half the model has come, the rest held back
	case err := <-f.result:
		t.Fatalf("fetch ended before the hub went: %v\n%s", err, f.errs)
	}
	h.cmd.Process.Signal(sig)
	close(release) // a drain's GOAWAY reaches the fetch while its stream goes on
	<-h.done
	h.done = nil
	if !f.waitLine("fetch: retry 2 ") {
		t.Fatalf("fetch ended without trying again twice:\n%s", f.errs)
	}
	startHubProc(t, bin, models, h.addr, "--drain", "100ms")
	if err := f.wait(); err != nil {
		t.Fatalf("fetch: %v\n%s", err, f.errs)
	}
	if err := checkST(out, want); err != nil {
		t.Fatal(err)
	}
	retries := strings.Count(f.errs.String(), "fetch: retry ")
	first, _, _ := strings.Cut(f.errs.String(), "\n")
	t.Logf("the first break: %s", first)
	t.Logf("signal %v: %d retries; the hub sent %d bytes for a model of %d; %s", sig, retries, m.n.Load(), 16<<20, strings.TrimSpace(f.out.String()))
	if !strings.Contains(f.out.String(), "streams opened again") {
		t.Errorf("fetch said %q", f.out)
	}
}

// TestFetchResumesAcrossRuns kills a fetch (SIGKILL) once the hub has sent
// 90% of the model, and runs it again: the second run finishes from the
// first's record on disk, and the two together make the hub send at most
// 15% more than one whole fetch.
func TestFetchResumesAcrossRuns(t *testing.T) {
	bin := buildTensorpress(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	want := writeModel(t, models, 1, 32, 4<<20, seedIndex) // 128 MiB
	h := startHubProc(t, bin, models, "127.0.0.1:0")
	m := newMeter(t, h.addr, 0)
	ref := startFetch(t, bin, "--hub", m.addr(), "--out", filepath.Join(dir, "ref.safetensors"), "--progress", "0")
	if err := ref.wait(); err != nil {
		t.Fatalf("fetch: %v\n%s", err, ref.errs)
	}
	whole := m.n.Swap(0)

	out := filepath.Join(dir, "model.safetensors")
	held, release := make(chan struct{}), make(chan struct{})
	m.at.Store(holdAt(whole*9/10, held, release))
	f := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "0")
	select {
	case <-held:
	case err := <-f.result:
		t.Fatalf("fetch ended before 90%%: %v\n%s", err, f.errs)
	}
	f.cmd.Process.Kill()
	f.wait()
	m.at.Store(nil)
	close(release)
	first := m.n.Load()
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a killed fetch left its final file")
	}
	again := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "1ns")
	if err := again.wait(); err != nil {
		t.Fatalf("fetch again: %v\n%s", err, again.errs)
	}
	if err := checkST(out, want); err != nil {
		t.Fatal(err)
	}
	second := m.n.Load() - first
	resent := first + second - whole
	t.Logf("a whole fetch: %d bytes from the hub; killed at %d (%.1f%%), the second run %d: %d sent again (%.1f%% of the whole); %s",
		whole, first, 100*float64(first)/float64(whole), second, resent, 100*float64(resent)/float64(whole), strings.TrimSpace(again.out.String()))
	if resent > whole*15/100 {
		t.Errorf("%d bytes sent again, over 15%% of %d", resent, whole)
	}
	if !strings.Contains(again.errs.String(), "resuming") {
		t.Errorf("the second run did not say it resumed:\n%.500s", again.errs)
	}
	left, _ := filepath.Glob(out + ".part*")
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestFetchKilledAnyMoment kills fetches (SIGKILL) at random moments, to a
// safetensors file and to .npy files: no file under a final name is ever
// incomplete or wrong, and a last run finishes the fetch.
func TestFetchKilledAnyMoment(t *testing.T) {
	bin := buildTensorpress(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	want := writeModel(t, models, 1, 12, 1<<20, seedIndex)
	h := startHubProc(t, bin, models, "127.0.0.1:0")
	m := newMeter(t, h.addr, 16<<20) // about 0.8 s a fetch
	rng := rand.New(rand.NewPCG(21, 5))
	st := filepath.Join(dir, "model.safetensors")
	npy := filepath.Join(dir, "npy") + "/"
	check := func(final bool) {
		t.Helper()
		if _, err := os.Stat(st); err == nil || final {
			if err := checkST(st, want); err != nil {
				t.Fatal(err)
			}
		}
		for name, d := range want {
			if _, err := os.Stat(filepath.Join(npy, name+".npy")); err == nil || final {
				if err := checkNpy(npy, name, d); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	kills := 0
	for i := range 12 {
		out := st
		if i%2 == 1 {
			out = npy
		}
		f := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "0")
		time.Sleep(time.Duration(rng.Int64N(int64(900 * time.Millisecond)))) // a random moment, nothing timed
		if f.cmd.Process.Kill() == nil {
			kills++
		}
		f.wait()
		check(false)
	}
	for _, out := range []string{st, npy} {
		f := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "0")
		if err := f.wait(); err != nil {
			t.Fatalf("fetch: %v\n%s", err, f.errs)
		}
	}
	check(true)
	left, _ := filepath.Glob(st + ".part*")
	npyLeft, _ := filepath.Glob(filepath.Join(npy, "*.part"))
	if state := filepath.Join(npy, ".tensorpress-fetch.json"); fileExists(state) {
		npyLeft = append(npyLeft, state)
	}
	if len(left)+len(npyLeft) > 0 {
		t.Errorf("left behind: %v %v", left, npyLeft)
	}
	t.Logf("%d fetches killed at random moments; the hub sent %d bytes in all for a model of %d", kills, m.n.Load(), 12<<20)
}

// TestFetchWrongBase fetches version 2 against a base that is not the
// hub's version 1 (two tensors differ, one is missing): the result is
// version 2 bit for bit, those three fetched whole, with one warning that
// names the base file.
func TestFetchWrongBase(t *testing.T) {
	bin := buildTensorpress(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	const n, size = 8, 256 << 10
	writeModel(t, models, 1, n, size, seedIndex)
	want := writeModel(t, models, 2, n, size, func(i int) uint64 { return uint64(i + 100*(i%2)) }) // odd tensors changed
	h := startHubProc(t, bin, models, "127.0.0.1:0")
	wrong := filepath.Join(dir, "wrong.safetensors")
	writeST(t, wrong, n-1, size, func(i int) uint64 { return uint64(i + 50*btoi(i < 2)) }, map[string]string{versionKey: "1"}, digests{})
	out := filepath.Join(dir, "v2.safetensors")
	f := startFetch(t, bin, "--hub", h.addr, "--version", "2", "--base", wrong, "--out", out, "--progress", "0")
	if err := f.wait(); err != nil {
		t.Fatalf("fetch: %v\n%s", err, f.errs)
	}
	if err := checkST(out, want); err != nil {
		t.Fatal(err)
	}
	errs := f.errs.String()
	if c := strings.Count(errs, "warning: --base "+wrong+" does not match"); c != 1 {
		t.Errorf("%d warnings naming the base:\n%s", c, errs)
	}
	if !strings.Contains(f.out.String(), "3 fetched whole again") {
		t.Errorf("fetch said %q", f.out)
	}
	t.Logf("stderr: %sstdout: %s", errs, f.out)
	// The right base: deltas only.
	v1 := filepath.Join(dir, "v1.safetensors")
	if err := startFetch(t, bin, "--hub", h.addr, "--version", "1", "--out", v1, "--progress", "0").wait(); err != nil {
		t.Fatal(err)
	}
	g := startFetch(t, bin, "--hub", h.addr, "--version", "2", "--base", v1, "--out", out, "--progress", "0")
	if err := g.wait(); err != nil || !strings.Contains(g.out.String(), fmt.Sprintf("%d as deltas", n)) || strings.Contains(g.errs.String(), "warning") {
		t.Fatalf("fetch with the right base: %v %s %s", err, g.out, g.errs)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFetchMemory fetches a model to a safetensors file and reads the
// fetch's peak RSS (/usr/bin/time -v): under 64 MiB. The model is 128 MiB;
// 2 GiB with TENSORPRESS_BIG=1.
func TestFetchMemory(t *testing.T) {
	bin := buildTensorpress(t)
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		t.Skip("no /usr/bin/time")
	}
	n, size := 16, int64(8<<20)
	if os.Getenv("TENSORPRESS_BIG") == "1" {
		n, size = 64, 32<<20
	}
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	want := writeModel(t, models, 1, n, size, seedIndex)
	h := startHubProc(t, bin, models, "127.0.0.1:0")
	out := filepath.Join(dir, "model.safetensors")
	cmd := exec.Command("/usr/bin/time", "-v", bin, "fetch", "--hub", h.addr, "--out", out, "--progress", "0")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fetch: %v\n%s", err, b)
	}
	var kb int64
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Maximum resident set size (kbytes):"); ok {
			kb, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := checkST(out, want); err != nil {
		t.Fatal(err)
	}
	t.Logf("a model of %d MiB: fetch's peak RSS %.1f MiB", int64(n)*size>>20, float64(kb)/1024)
	if kb == 0 || kb > 64<<10 {
		t.Errorf("peak RSS %d kB (want under 64 MiB)\n%s", kb, b)
	}
}

// TestFetchOneWriter: a second fetch to the --out a first is writing is
// refused, for a safetensors file and for a directory of .npy files.
func TestFetchOneWriter(t *testing.T) {
	bin := buildTensorpress(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	writeModel(t, models, 1, 4, 1<<20, seedIndex)
	h := startHubProc(t, bin, models, "127.0.0.1:0")
	m := newMeter(t, h.addr, 1<<20) // 4 s a fetch: the first is still writing
	for _, out := range []string{filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "npy") + "/"} {
		first := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "1ns")
		if !first.waitLine("fetch: ") {
			t.Fatalf("no progress: %s", first.errs)
		}
		code, text := runFetch("--hub", h.addr, "--out", out)
		first.cmd.Process.Kill()
		first.wait()
		if code != 1 || !strings.Contains(text, "another fetch is writing there") {
			t.Errorf("%s: exit %d: %s", out, code, text)
		}
	}
}

// TestFetchStallEnds: a hub that stops sending in the middle of a fetch
// ends it after --stall with a clear error, and no final file; --deadline
// 0 (the default) set no limit before.
func TestFetchStallEnds(t *testing.T) {
	bin := buildTensorpress(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	writeModel(t, models, 1, 8, 1<<20, seedIndex)
	h := startHubProc(t, bin, models, "127.0.0.1:0")
	m := newMeter(t, h.addr, 0)
	held, release := make(chan struct{}), make(chan struct{})
	m.at.Store(holdAt(4<<20, held, release))
	defer close(release)
	out := filepath.Join(dir, "model.safetensors")
	f := startFetch(t, bin, "--hub", m.addr(), "--out", out, "--progress", "0", "--stall", "500ms")
	err := f.wait()
	if err == nil || !strings.Contains(f.errs.String(), "no chunk for 500ms") || fileExists(out) {
		t.Fatalf("fetch: %v\n%s", err, f.errs)
	}
	t.Logf("%s", f.errs)
}
