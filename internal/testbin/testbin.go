// Package testbin builds a command once for a test run, for the tests
// that start it as a process of its own: each test asks a Binary for its
// path, the first builds it, and TestMain removes it at the end.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Binary is a command built with `go build` from a package directory,
// once. Its zero value is ready to use; it is safe for concurrent use.
type Binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the package in pkg (a directory, "." for the test's own) as
// name on the first call, and returns the command's path, or the build's
// error, on every call.
func (b *Binary) Path(pkg, name string) (string, error) {
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", name+"-test-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, name)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	return b.path, b.err
}

// Remove deletes the command built, if any.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
