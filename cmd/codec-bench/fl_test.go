package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
)

func needFashion(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(fl.DefaultDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist; make test does it)")
	}
}

// A small federation end to end: JSON rows with every field, the baseline
// first, real byte counts, a plot and a snapshot.
func TestFLSmall(t *testing.T) {
	needFashion(t)
	dir := t.TempDir()
	plot := filepath.Join(dir, "fl.svg")
	snap := filepath.Join(dir, "snap")
	out := mustCLI(t, "fl", "--rounds", "3", "--clients", "3", "--seeds", "2", "--train-limit", "3000", "--test-limit", "500",
		"--compressors", "topk(0.05); powersgd(2); topk(0.05) | idx:delta,bitpack | val:polyfit | val.perm:bitpack | *:huff0",
		"--json", "-", "--plot", plot, "--snapshot", snap)
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 4 || rows[0]["compressor"] != "none" {
		t.Fatalf("rows: %v", rows)
	}
	for _, r := range rows {
		for _, k := range []string{"compressor", "mode", "accuracy", "baseline_accuracy", "upstream_bytes", "baseline_bytes", "reduction", "seeds", "accuracy_sd"} {
			if _, ok := r[k]; !ok {
				t.Errorf("row %v lacks %q", r["compressor"], k)
			}
		}
		// Three short rounds: the baseline learns, compressors beat chance.
		if acc := r["accuracy"].(float64); acc < 0.15 || acc > 1 || r["compressor"] == "none" && acc < 0.5 {
			t.Errorf("%v: accuracy %v", r["compressor"], acc)
		}
		if len(r["seeds"].([]any)) != 2 {
			t.Errorf("%v: seeds %v", r["compressor"], r["seeds"])
		}
	}
	// Every byte counted: the baseline sends about 4 bytes per parameter
	// per client and round, plus headers; TopK 5% far less.
	base := rows[0]["upstream_bytes"].(float64)
	if per := base / (3 * 3); per < 4*fl.NumParams || per > 4*fl.NumParams+1024 {
		t.Errorf("baseline: %v bytes per client and round", per)
	}
	if red := rows[1]["reduction"].(float64); red < 8 || red > 25 {
		t.Errorf("topk(0.05): reduction %v", red)
	}
	for _, f := range []string{plot, filepath.Join(snap, "weights.safetensors"), filepath.Join(snap, "update.safetensors")} {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestFLUsage(t *testing.T) {
	for _, args := range [][]string{
		{"fl", "--mode", "async"},
		{"fl", "--split", "shards"},
		{"fl", "--alpha", "0.1"},
		{"fl", "--mode", "sgd", "--rounds", "3"},
		{"fl", "--mode", "sgd", "--server-lr", "2"},
		{"fl", "--epochs", "3"},
		{"fl", "--seeds", "0"},
		{"fl", "--compressors", "topk(7)"},
	} {
		if code, _, _ := cli(t, args...); code != 2 {
			t.Errorf("codec-bench %q: exit %d, want 2", args, code)
		}
	}
}

// The baseline is the one dense float32 run, first, whatever spelling of
// none names it; a second none is not run again.
func TestFLSpecsBaseline(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"topk(0.01)", []string{"none", "topk(0.01)"}},
		{"topk(0.01); none(ef=off)", []string{"none(ef=off)", "topk(0.01)"}},
		{"none; topk(0.01); none", []string{"none", "topk(0.01)"}},
	} {
		specs, err := parseSpecs(c.in)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		var got []string
		for _, s := range specs {
			got = append(got, s.String())
		}
		if strings.Join(got, ";") != strings.Join(c.want, ";") {
			t.Errorf("%q: specs %q, want %q", c.in, got, c.want)
		}
	}
}
