package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/internal/testbin"
)

// TestMain lets this test binary serve as the server and the clients'
// processes that 'hub' and 'fed' start, unless childExe is the command
// built for the tests (raceChildren).
func TestMain(m *testing.M) {
	if ok, err := fedChild(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if ok, err := hubChild(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if raceEnabled {
		childExe = plainChild
	}
	code := m.Run()
	plain.Remove()
	os.Exit(code)
}

// plain is the command built without the race detector, once per run.
var plain testbin.Binary

// plainChild returns the command built without the race detector, for
// the processes that 'fed' and 'hub' start under a race test run: the
// race detector made their training and serving several times slower (a
// good part of the race pass's time), and the hub's and the clients'
// code they run is raced in process by the hub package's own tests.
// What runs only in those processes (fed_child.go's loops, hubChild) is
// no longer run under the race detector.
func plainChild() (string, error) { return plain.Path(".", "codec-bench") }

func TestHubCommand(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"hub", "--clients", "3", "--tensors", "12", "--rtt", "1ms", "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	rows := map[string]hubRow{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r hubRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows[r.Mode] = r
	}
	if len(rows) != 3 || rows["hub"].RPCs != 3 || rows["per-tensor"].RPCs != 36 || rows["per-tensor-gzip"].RPCs != 36 {
		t.Fatalf("rows %+v", rows)
	}
	if h := rows["hub"]; h.ServerBytes <= 0 || h.ServerBytes >= rows["per-tensor"].ServerBytes || h.ServerCPU <= 0 || h.ServerRSSMiB <= 0 {
		t.Fatalf("hub row %+v against %+v", h, rows["per-tensor"])
	}
	for _, bad := range [][]string{{"hub", "--clients", "0"}, {"hub", "--tensors", "0"}, {"hub", "--rtt", "-1s"}, {"hub", "--format", "xml"}} {
		if code := run(bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// Every mode runs over plain loopback and over the simulated link, each
// row with the bytes both sides wrote, the RPCs and both processes' peak
// RSS; --rtt 0 --rate 0 is loopback alone.
func TestHubCommandLinks(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"hub", "--clients", "2", "--tensors", "8", "--rtt", "2ms", "--rate", "1Gbit", "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	type key struct{ link, mode string }
	rows := map[key]hubRow{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r hubRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows[key{r.Link, r.Mode}] = r
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6: %+v", len(rows), rows)
	}
	for _, link := range []string{"loopback", "1Gbit, rtt 2ms"} {
		for mode, rpcs := range map[string]int64{"hub": 2, "per-tensor": 16, "per-tensor-gzip": 16} {
			r, ok := rows[key{link, mode}]
			switch {
			case !ok:
				t.Errorf("no row for %s over %s", mode, link)
			case r.RPCs != rpcs || r.ServerBytes <= 0 || r.ClientBytes <= 0 || r.ServerRSSMiB <= 0 || r.ClientsRSSMiB <= 0:
				t.Errorf("%s over %s: %+v", mode, link, r)
			case link != "loopback" && (r.Rate != 1e9 || r.RTTms != 2):
				t.Errorf("%s over %s: rate %g, rtt %g ms", mode, link, r.Rate, r.RTTms)
			}
		}
	}

	out.Reset()
	if code := run([]string{"hub", "--clients", "2", "--tensors", "8", "--rtt", "0", "--rate", "0"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "LINK ") {
		t.Fatalf("table:\n%s", out.String())
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) != 11 || f[0] != "loopback" {
			t.Errorf("row %q", l)
		}
	}
	for _, bad := range [][]string{{"hub", "--rate", "fast"}, {"hub", "--rate", "-1Mbit"}} {
		if code := run(bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// TestHubCommandPlot: several rates in one run, and the plot of the
// baselines' time over the hub's.
func TestHubCommandPlot(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "hub.svg")
	var out, errb bytes.Buffer
	if code := run([]string{"hub", "--clients", "2", "--tensors", "8", "--rtt", "2ms", "--rate", "50Mbit,1Gbit", "--plot", plot, "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.Bytes())
	}
	if n := strings.Count(out.String(), "\n"); n != 9 {
		t.Errorf("%d rows, want 9 (3 links x 3 modes)", n)
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one RPC per tensor, gzip", "1 Gbit/s", "loopback, no RTT"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the plot has no %q", want)
		}
	}
}
