package testbin

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A Binary builds once: the second call returns the same path, and the
// command runs. Remove deletes it.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a command")
	}
	var b Binary
	p, err := b.Path("./testdata/hello", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if p2, err := b.Path("./testdata/hello", "hello"); p2 != p || err != nil {
		t.Fatalf("second call: %q, %v; want %q", p2, err, p)
	}
	out, err := exec.Command(p).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("%q, %v", out, err)
	}
	b.Remove()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("after Remove: %v", err)
	}
	var bad Binary
	if _, err := bad.Path("./testdata/nothing", "nothing"); err == nil {
		t.Fatal("a package that is not there built")
	}
	bad.Remove()
}
