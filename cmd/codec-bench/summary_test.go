package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestSummaryPicks(t *testing.T) {
	rows := []row{
		{Tensor: "w", Chain: "", Ratio: 1, CompressMBps: 9000},
		{Tensor: "w", Chain: "slow", Ratio: 1.200, CompressMBps: 100},
		{Tensor: "w", Chain: "fast", Ratio: 1.196, CompressMBps: 2000}, // within 0.5%: the faster wins
		{Tensor: "w", Chain: "worse", Ratio: 1.18, CompressMBps: 5000},
		{Tensor: "w", Chain: "*:zstd(3)", External: "zstd -b3 -e3 -T1 -i1", Ratio: 1.08, CompressMBps: 600},
		{Tensor: "w", Chain: "fp16", Lossy: true, Ratio: 2, RelL2Err: 0.0002},
		{Tensor: "w", Chain: "int8", Lossy: true, Ratio: 4.4, RelL2Err: 0.009},
		{Tensor: "w", Chain: "nf4", Lossy: true, Ratio: 7.7, RelL2Err: 0.09},             // error too large
		{Tensor: "w", Chain: "nan", Lossy: true, Ratio: 9, RelL2Err: metric(math.NaN())}, // unknown error: never picked
		{Tensor: "s", Chain: "", Ratio: 0.167},
		{Tensor: "s", Chain: "fp16", Lossy: true, Ratio: 0.138, RelL2Err: 0}, // worse than lossless
	}
	s := &summary{maxRelErr: 0.01, tieRatio: 0.005, peer: "zstd -b3 -e3 -T1 ", peerName: "zstd -3", peerCmd: "zstd -b3 -e3 -T1 -i1"}
	g := groupRows(rows)
	if len(g) != 2 || g[0].name != "w" || g[1].name != "s" {
		t.Fatalf("groups %+v", g)
	}
	if b := s.bestLossless(g[0]); b == nil || b.Chain != "fast" {
		t.Errorf("best lossless %+v, want fast", b)
	}
	if b, any := s.bestLossy(g[0]); !any || b == nil || b.Chain != "int8" {
		t.Errorf("best lossy %+v, want int8", b)
	}
	if b, any := s.bestLossy(g[1]); !any || b != nil {
		t.Errorf("scalar: best lossy %+v, want none", b)
	}
	if z := s.peerRow(g[0]); z == nil || z.Ratio != 1.08 {
		t.Errorf("peer %+v", z)
	}
	var out bytes.Buffer
	if err := s.write(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"against zstd -3 (zstd -b3 -e3 -T1 -i1 on the whole input)", "1.080x", "1.196x", "fast", "4.400x", "(none for s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// fakeZstd puts a zstd on PATH that logs its arguments and answers like
// zstd -b, and returns the log's path.
func fakeZstd(t *testing.T) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("shell script")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "args.log")
	script := `#!/bin/sh
echo "$@" >> ` + log + `
for f; do :; done
n=$(wc -c < "$f" | tr -d ' ')
printf ' 3#x.raw :  %s ->  %s (x1.000),  500.0 MB/s, 1500.0 MB/s\n' "$n" "$n"
`
	if err := os.WriteFile(filepath.Join(dir, "zstd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

// The default run: a summary first, zstd -3 timed for a second (sizes
// only on tiny inputs), progress on stderr although it is not a terminal.
func TestRunSummaryDefault(t *testing.T) {
	log := fakeZstd(t)
	code, out, errs := cli(t, "--elems", "4096", "--min-time", "1ms", "--reps", "1", "--tensors", "weights")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.HasPrefix(out, "Lossless: ") || !strings.Contains(out, "\nLossy: ") || !strings.Contains(out, "1 tensor(s) in ") {
		t.Errorf("stdout:\n%s", out)
	}
	if strings.Contains(out, "EXTERNAL") {
		t.Errorf("the full table without --format table:\n%s", out)
	}
	if !strings.Contains(errs, "codec-bench: [1/1 tensors") {
		t.Errorf("no progress on stderr: %q", errs)
	}
	args, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(args)); len(got) != 5 || strings.Join(got[:4], " ") != "-b3 -e3 -T1 -i1" {
		t.Errorf("zstd arguments %q, want -b3 -e3 -T1 -i1 FILE", args)
	}
	if !regexp.MustCompile(`weights +f32 +16384 +1\.000x +500 +1500 `).MatchString(out) {
		t.Errorf("the peer's figures are not in the summary:\n%s", out)
	}

	// --format table: the summary, then every row; tiny inputs get zstd's
	// sizes only unless --external-time is given.
	os.Remove(log)
	out = mustCLI(t, "--elems", "1024", "--min-time", "1ms", "--reps", "1", "--tensors", "scalar", "--format", "table", "--external-levels", "1,3")
	if !strings.HasPrefix(out, "Lossless: ") || !strings.Contains(out, "EXTERNAL") || !strings.Contains(out, "zstd -b1 -e1 -T1 (sizes)") {
		t.Errorf("stdout:\n%s", out)
	}
	args, _ = os.ReadFile(log)
	if want := "-b1 -e1 -T1 -i0"; !strings.HasPrefix(string(args), want) {
		t.Errorf("zstd arguments %q, want %q first", args, want)
	}
	rows := jsonRows(t, mustCLI(t, "--elems", "1024", "--min-time", "1ms", "--reps", "1", "--tensors", "scalar", "--format", "json"))
	n := 0
	for _, r := range rows {
		if r.External != "" {
			n++
			if !math.IsNaN(float64(r.CompressMBps)) || !math.IsNaN(float64(r.DecompressMBps)) {
				t.Errorf("tiny input: zstd speeds %v, %v; want null", r.CompressMBps, r.DecompressMBps)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d external rows, want 1", n)
	}
	os.Remove(log)
	mustCLI(t, "--elems", "1024", "--min-time", "1ms", "--reps", "1", "--tensors", "scalar", "--external-time", "2")
	if args, _ = os.ReadFile(log); !strings.HasPrefix(string(args), "-b3 -e3 -T1 -i2") {
		t.Errorf("zstd arguments %q with --external-time 2", args)
	}
}
