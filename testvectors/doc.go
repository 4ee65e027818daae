// Package testvectors holds the compatibility promise of the tensorpress
// wire format: golden frames for every stage and several recipes, and a
// corpus of malformed frames with the error each must produce. The files
// are embedded, so any package (and codec-bench) can load them.
//
// Regenerate with `go test ./testvectors -update`. A mismatch writes the new
// bytes next to the golden file with a .got suffix. Frames made only by our
// own stages (raw, shuffle, bytedelta) and by huff0 and s2 must match byte
// for byte; zstd and xz segments must decode to the same data (their bytes
// change with the backend and the library version, not their meaning).
// Every golden file must keep decoding with every later version.
package testvectors

import (
	"embed"
	"io/fs"
)

//go:embed golden malformed
var files embed.FS

// FS returns the embedded golden and malformed corpora (directories
// "golden" and "malformed").
func FS() fs.FS { return files }

// Golden returns the bytes of golden/<name>.tpf.
func Golden(name string) ([]byte, error) { return files.ReadFile("golden/" + name + ".tpf") }
