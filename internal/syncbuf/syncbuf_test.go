package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestBuffer: writers and a reader at once (go test -race), every line
// kept.
func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "%d %d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
}
