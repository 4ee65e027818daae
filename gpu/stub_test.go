//go:build linux && (amd64 || arm64)

package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubEnv marks a test process started by TestStubDriver.
const stubEnv = "TENSORPRESS_GPU_STUB"

// TestStubDriver builds testdata/stubcuda.c, a libcuda.so.1 that
// computes on host memory, and runs the device suite (TestGPU) in a test
// process that loads it: every binding is then called through purego
// against C functions with the driver's prototypes, on the Device's
// thread. Two more processes check the no-device errors of a failing
// cuInit and of a library that lacks a symbol. It needs gcc.
func TestStubDriver(t *testing.T) {
	if os.Getenv(stubEnv) != "" {
		t.Skip("in a process started by TestStubDriver")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build the stub driver:", err)
	}
	src, err := filepath.Abs(filepath.Join("testdata", "stubcuda.c"))
	if err != nil {
		t.Fatal(err)
	}
	build := func(name string, flags ...string) string {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-shared", "-fPIC", "-O1", "-pthread", "-Wall", "-Werror", "-o", filepath.Join(dir, "libcuda.so.1")}, flags...)
		out, err := exec.Command(gcc, append(args, src)...).CombinedOutput()
		if err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		return dir
	}
	run := func(dir, tests string, env ...string) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^("+tests+")$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), append([]string{stubEnv + "=1", "LD_LIBRARY_PATH=" + dir}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Contains(string(out), "stub: ") {
			t.Errorf("%s with the stub driver: %v\n%s", tests, err, out)
		}
		return string(out)
	}

	full := build("full")
	out := run(full, "TestGPU")
	for _, c := range suite {
		if !strings.Contains(out, "--- PASS: TestGPU/"+c.name+" ") {
			t.Errorf("TestGPU/%s did not pass with the stub driver:\n%s", c.name, out)
			break
		}
	}
	if !strings.Contains(out, "Stub GPU: 1024 MiB") {
		t.Errorf("the stub driver was not the one loaded:\n%s", out)
	}

	out = run(full, "TestNoDevice", "STUB_CUINIT=100")
	if !strings.Contains(out, "gpu: no CUDA device: gpu: cuInit: CUDA_ERROR_NO_DEVICE (100)") {
		t.Errorf("cuInit failing: no such error:\n%s", out)
	}

	old := build("old", "-DSTUB_OLD")
	out = run(old, "TestNoDevice")
	if !strings.Contains(out, "gpu: no CUDA device: libcuda.so.1 lacks [cuDevicePrimaryCtxRelease_v2]") {
		t.Errorf("a missing symbol: no such error:\n%s", out)
	}
}
