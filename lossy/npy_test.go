package lossy

import (
	"os"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// readNpyAs reads a reference .npy file (testvectors/reference) with
// tensorfile, checks that its elements are of type want, and returns its
// little-endian data.
func readNpyAs(t testing.TB, path string, want codec.DType) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tn, err := tensorfile.ReadNpy(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if tn.DType != want {
		t.Fatalf("%s: %v elements, want %v", path, tn.DType, want)
	}
	return tn.Data
}
