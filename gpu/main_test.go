package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine is left behind: a Device's worker
// ends with its Close. It removes the kernel emulation built for the run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if emu.dir != "" {
			os.RemoveAll(emu.dir)
		}
		os.Exit(code)
	}))
}

// emu is the kernel emulation, built once for the run.
var emu struct {
	once     sync.Once
	dir      string
	exe      string
	skip     string // why there is none
	buildErr error
}

// emulator returns the emulation program (kernels/kernels.cu compiled for
// the host with kernels/emulate.h), building it on the first call, or
// skips the test when there is no clang++-14.
func emulator(t *testing.T) string {
	t.Helper()
	emu.once.Do(func() {
		cxx, err := exec.LookPath("clang++-14")
		if err != nil {
			emu.skip = fmt.Sprintf("kernel emulation needs clang++-14 (Debian's clang-14; make test installs it): %v", err)
			return
		}
		if emu.dir, err = os.MkdirTemp("", "tensorpress-gpu-emu"); err != nil {
			emu.buildErr = err
			return
		}
		emu.exe = filepath.Join(emu.dir, "emu")
		out, err := exec.Command(cxx, "-std=c++20", "-O1", "-pthread", "-ffp-contract=off", "-DTP_EMULATE", "-Ikernels",
			"-x", "c++", "kernels/kernels.cu", "-x", "c++", "kernels/emu_main.cc", "-o", emu.exe).CombinedOutput()
		if err != nil {
			emu.buildErr = fmt.Errorf("building the kernel emulation: %v\n%s", err, out)
		}
	})
	if emu.skip != "" {
		t.Skip(emu.skip)
	}
	if emu.buildErr != nil {
		t.Fatal(emu.buildErr)
	}
	return emu.exe
}
