package main

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFedMini is the federation of processes in small: a hub process and
// 3 client processes, 2 rounds, every kind of row, over simulated links.
// The dense row trains what the in-process simulator trains (the same
// shards, minibatches and steps), every row learns, and the bytes are
// those of each way of moving the model.
func TestFedMini(t *testing.T) {
	needFashion(t)
	dir := t.TempDir()
	plot := filepath.Join(dir, "fed.svg")
	const tp = "tp:topk(0.05) | idx:delta,bitpack | val:nf4(64) | *:huff0"
	const auto = "auto:topk(0.05) | idx:delta,bitpack | val:nf4(64) | *:huff0"
	out := mustCLI(t, "fed", "--clients", "3", "--rounds", "2", "--train-limit", "3000", "--test-limit", "1000",
		"--down", "100Mbit", "--up", "50Mbit", "--rtt", "4ms", "--rows", "dense; rpc; flare-int8; "+tp+"; "+auto,
		"--json", "-", "--plot", plot)
	rows := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rows[r["row"].(string)] = r
	}
	if len(rows) != 5 {
		t.Fatalf("%d rows: %v", len(rows), rows)
	}
	num := func(row, k string) float64 {
		t.Helper()
		v, ok := rows[row][k].(float64)
		if !ok {
			t.Fatalf("%s: %s = %v", row, k, rows[row][k])
		}
		return v
	}
	for name, r := range rows {
		// Two short rounds: dense learns, compressors beat chance.
		if acc := num(name, "accuracy"); acc < 0.3 || acc > 1 || (name == "dense" || name == "rpc") && acc < 0.6 {
			t.Errorf("%s: accuracy %v", name, acc)
		}
		if n := len(r["accuracies"].([]any)); n != 3 || len(r["times"].([]any)) != 3 {
			t.Errorf("%s: %d versions evaluated, want 3", name, n)
		}
		if num(name, "hub_peak_rss") < 1<<20 || num(name, "hub_cpu_seconds") <= 0 {
			t.Errorf("%s: hub peak RSS %v, CPU %v", name, rows[name]["hub_peak_rss"], rows[name]["hub_cpu_seconds"])
		}
	}
	// Dense float32 both ways: the updates are the model's size (4 bytes a
	// parameter) per client and round; one RPC per tensor the same.
	const params = 109386
	for _, name := range []string{"dense", "rpc"} {
		if up := num(name, "bytes_up") / 6; up < 4*params || up > 4*params*1.05 {
			t.Errorf("%s: %v bytes up per client round", name, up)
		}
	}
	if num("rpc", "accuracy") != num("dense", "accuracy") {
		t.Errorf("rpc %v and dense %v train differently", num("rpc", "accuracy"), num("dense", "accuracy"))
	}
	if r := num("dense", "bytes_up") / num(tp, "bytes_up"); r < 15 {
		t.Errorf("TopK 5%%: %.1fx fewer bytes up than dense", r)
	}
	if r := num("dense", "bytes_down") / num("flare-int8", "bytes_down"); r < 2.5 {
		t.Errorf("FLARE int8: %.1fx fewer bytes down than dense", r)
	}
	// The simulator, on the same problem, reaches the dense row's
	// accuracy: the processes train the same model (the hub divides the
	// sum by its total weight, which is 1 to float rounding).
	sim := mustCLI(t, "fl", "--clients", "3", "--rounds", "2", "--seeds", "1", "--train-limit", "3000", "--test-limit", "1000",
		"--server-lr", "1.25", "--compressors", "none", "--json", "-")
	var fr map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(sim, "\n", 2)[0]), &fr); err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(fr["accuracy"].(float64) - num("dense", "accuracy")); d > 0.002 {
		t.Errorf("fl simulator %v, federation of processes %v", fr["accuracy"], num("dense", "accuracy"))
	}
	if st, err := os.Stat(plot); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
}
