package transport

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/stages"
)

// A receiver written as the README's example (testdata/receiver: it
// imports only transport) announces every standard stage in its hello and
// decodes frames coded with each kind of them: this test's sender links
// the standard stages (package stages), and every stage it knows must be
// in the hello.
func TestReceiverWithTransportOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := filepath.Join(t.TempDir(), "receiver")
	if out, err := exec.Command(gobin, "build", "-o", bin, "./testdata/receiver").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := floats(3<<20, 9)
	for i := range 1 << 20 { // a sparse megabyte in the middle
		if i%100 != 0 {
			data[1<<20+i] = 0
		}
	}
	want := sha256.Sum256(data)
	for _, spec := range []string{"*:zstd(1)", "shuffle4 | plane3:huff0 | plane0..2:raw", "sparse | *:zstd(1)", "*:s2"} {
		t.Run(spec, func(t *testing.T) {
			cmd := exec.Command(bin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			addr, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("receiver: %v: %s", err, stderr.String())
			}
			raw, err := net.Dial("tcp", strings.TrimSpace(addr))
			if err != nil {
				t.Fatal(err)
			}
			c, err := Wrap(raw, WithRecipe(codec.MustParseRecipe(spec)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			if _, err := c.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			if !bytes.Equal(got, want[:]) {
				t.Fatalf("the receiver's SHA-256 %x, want %x: %s", got, want, stderr.String())
			}
			h := c.Peer()
			for _, s := range codec.Stages() {
				if !slices.Contains(h.Stages, s.ID) {
					t.Errorf("the receiver does not announce stage %s (%d)", s.Name, s.ID)
				}
			}
		})
	}
}
