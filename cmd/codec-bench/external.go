package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// external is a peer measured in the same run: the zstd command-line
// tool's in-memory benchmark on the same bytes, one thread.
type external struct {
	name  string // the column value: "zstd -b1 -T1"
	chain string // the equivalent spec
	args  []string
}

func zstdExternals(seconds int) []external {
	var ex []external
	for _, level := range []int{1, 3} {
		l := strconv.Itoa(level)
		ex = append(ex, external{
			name:  "zstd -b" + l + " -T1",
			chain: equivalentSpec("*:zstd(" + l + ")"),
			args:  []string{"-b" + l, "-e" + l, "-T1", "-i" + strconv.Itoa(seconds)},
		})
	}
	return ex
}

// equivalentSpec returns the printed form of spec when it parses, and spec
// itself when it does not (the zstd stage is not registered in this build).
func equivalentSpec(spec string) string {
	if r, err := codec.ParseRecipe(spec); err == nil {
		return r.String()
	}
	return spec
}

// zstd -b prints progress lines separated by \r and ends with a line such as
//
//	3#weights.raw       :  16777216 ->  15513338 (x1.081),  118.6 MB/s, 1137.9 MB/s
//
// (zstd counts MB as 1e6 bytes, as we do). The last match wins.
var zstdBenchLine = regexp.MustCompile(`(\d+) -> +(\d+) \(x *([0-9.]+)\), *([0-9.]+) MB/s, *([0-9.]+) MB/s`)

// parseZstdBench extracts input and output sizes and speeds from the
// combined output of zstd -b.
func parseZstdBench(out []byte) (in, outLen int64, comp, decomp float64, err error) {
	m := zstdBenchLine.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, 0, 0, 0, fmt.Errorf("no result line in zstd output %q", tail(out, 300))
	}
	last := m[len(m)-1]
	in, err1 := strconv.ParseInt(string(last[1]), 10, 64)
	outLen, err2 := strconv.ParseInt(string(last[2]), 10, 64)
	comp, err3 := strconv.ParseFloat(string(last[4]), 64)
	decomp, err4 := strconv.ParseFloat(string(last[5]), 64)
	for _, e := range []error{err1, err2, err3, err4} {
		if e != nil {
			return 0, 0, 0, 0, fmt.Errorf("zstd result line %q: %v", last[0], e)
		}
	}
	return in, outLen, comp, decomp, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// runExternal writes s to a temporary file and runs each tool on it.
func runExternal(zstd string, ex []external, s *sample, emit func(row) error, progress func(string)) error {
	f, err := os.CreateTemp("", "codec-bench-*.raw")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(s.data)
	if err1 := f.Close(); err == nil {
		err = err1
	}
	if err != nil {
		return err
	}
	for _, e := range ex {
		progress(e.name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, zstd, append(e.args, f.Name())...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", e.name, err, tail(out.Bytes(), 300))
		}
		in, n, comp, decomp, err := parseZstdBench(out.Bytes())
		if err != nil {
			return fmt.Errorf("%s: %v", e.name, err)
		}
		if in != int64(len(s.data)) {
			return fmt.Errorf("%s: measured %d bytes, the input has %d", e.name, in, len(s.data))
		}
		r := row{Tensor: s.name, DType: s.dtype.String(), Chain: e.chain, External: e.name,
			BytesIn: in, BytesOut: n, CompressMBps: comp, DecompressMBps: decomp}
		if n > 0 {
			r.Ratio = float64(in) / float64(n)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}
