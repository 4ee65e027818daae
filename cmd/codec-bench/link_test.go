package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
