package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// external is a peer measured in the same run: the zstd command-line
// tool's in-memory benchmark on the same bytes, one thread.
type external struct {
	level    int
	seconds  int    // zstd -i
	timeTiny bool   // time inputs of at most tinyInput bytes too
	chain    string // the equivalent spec
	path     string // of the zstd command
}

// zstdExternals are the zstd tool's benchmarks at each level, each
// running for seconds (zstd -i: its fastest run of about that long is
// reported; 0 is a single pass).
func zstdExternals(seconds int, timeTiny bool, levels []int) []external {
	var ex []external
	for _, level := range levels {
		ex = append(ex, external{level: level, seconds: seconds, timeTiny: timeTiny, chain: equivalentSpec(fmt.Sprintf("*:zstd(%d)", level))})
	}
	return ex
}

// tinyInput is the largest input whose zstd rows report sizes only, unless
// --external-time is given: zstd's benchmark times a single pass of a
// tiny input that happens to last half a millisecond (a cold first call
// can) instead of a warm loop, so -i0 is unreliable there, and -i1 costs
// two seconds per level for a speed that says little about an input of a
// few KiB.
const tinyInput = 8 << 10

// sizesOnly reports whether the rows of an input of n bytes leave out
// zstd's speeds.
func (e *external) sizesOnly(n int) bool { return n <= tinyInput && !e.timeTiny }

// args are the zstd arguments for an input of n bytes, without the file.
func (e *external) args(n int) []string {
	l, i := strconv.Itoa(e.level), e.seconds
	if e.sizesOnly(n) {
		i = 0
	}
	return []string{"-b" + l, "-e" + l, "-T1", "-i" + strconv.Itoa(i)}
}

// name is the EXTERNAL column of an input of n bytes: "zstd -b3 -e3 -T1
// -i1", or "zstd -b3 -e3 -T1 (sizes)" when its speeds are left out.
func (e *external) name(n int) string {
	a := e.args(n)
	if e.sizesOnly(n) {
		a[len(a)-1] = "(sizes)"
	}
	return "zstd " + strings.Join(a, " ")
}

// prefix is what name starts with for every input size.
func (e *external) prefix() string { return fmt.Sprintf("zstd -b%d -e%d -T1 ", e.level, e.level) }

// parseLevels parses --external-levels: zstd levels separated by commas.
func parseLevels(s string) ([]int, error) {
	var levels []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		l, err := strconv.Atoi(f)
		if err != nil || l < 1 || l > 19 {
			return nil, usagef("--external-levels %q: %q is not a zstd level in [1, 19]", s, f)
		}
		if !slices.Contains(levels, l) {
			levels = append(levels, l)
		}
	}
	if len(levels) == 0 {
		return nil, usagef("--external-levels %q has no level (to run no external tool, use --no-external)", s)
	}
	return levels, nil
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
func runExternal(ex []external, s *sample, emit func(row) error, progress func(string)) error {
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
		name := e.name(len(s.data))
		progress(name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, e.path, append(e.args(len(s.data)), f.Name())...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", name, err, tail(out.Bytes(), 300))
		}
		in, n, comp, decomp, err := parseZstdBench(out.Bytes())
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		if in != int64(len(s.data)) {
			return fmt.Errorf("%s: measured %d bytes, the input has %d", name, in, len(s.data))
		}
		r := row{Tensor: s.name, DType: s.dtype.String(), Chain: e.chain, External: name,
			BytesIn: in, BytesOut: n, CompressMBps: metric(comp), DecompressMBps: metric(decomp)}
		if e.sizesOnly(len(s.data)) {
			r.CompressMBps, r.DecompressMBps = metric(math.NaN()), metric(math.NaN())
		}
		if n > 0 {
			r.Ratio = float64(in) / float64(n)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}
