package gpu

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine is left behind: a Device's worker
// ends with its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
