package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/gpu"
)

// TestGPUCommand: without a GPU, codec-bench gpu says why and exits with
// status 1; bad flags are usage errors (2). On a GPU host it runs the
// measurements on a small input.
func TestGPUCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"gpu", "--n", "5"}, &out, &errb); code != 2 {
		t.Fatalf("--n 5: exit %d: %s", code, errb.Bytes())
	}
	out.Reset()
	errb.Reset()
	code := run([]string{"gpu", "--n", "100000", "--runs", "3"}, &out, &errb)
	if gpu.Available() != nil {
		if code != 1 || !strings.Contains(errb.String(), "no CUDA device") {
			t.Fatalf("no GPU: exit %d: %s", code, errb.Bytes())
		}
		return
	}
	if code != 0 || !strings.Contains(out.String(), "same frames") {
		t.Fatalf("exit %d:\n%s\n%s", code, out.Bytes(), errb.Bytes())
	}
}
