package netns

import (
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Names and addresses stay inside what the package owns: the prefix, and
// one /30 of 169.254.0.0/16 outside its reserved first and last /24.
func TestPlan(t *testing.T) {
	seen := map[string]bool{}
	for _, id := range []uint32{0, 1, 253, 254, 255, 254*63 - 1, 12345} {
		p := plan(id)
		if !strings.HasPrefix(p.A, Prefix+"-") || !strings.HasPrefix(p.DevA, Prefix) || len(p.DevA) > 15 || len(p.DevB) > 15 {
			t.Errorf("id %d: names %q %q %q %q", id, p.A, p.B, p.DevA, p.DevB)
		}
		a, b := p.AddrA.As4(), p.AddrB.As4()
		if a[0] != 169 || a[1] != 254 || a[2] == 0 || a[2] == 255 || a[3]%4 != 1 || b != [4]byte{a[0], a[1], a[2], a[3] + 1} {
			t.Errorf("id %d: addresses %v %v", id, p.AddrA, p.AddrB)
		}
		if seen[p.AddrA.String()] {
			t.Errorf("id %d: address %v reused", id, p.AddrA)
		}
		seen[p.AddrA.String()] = true
	}
	p := plan(7)
	cmds := p.setupCommands()
	if !slices.Equal(cmds[0], []string{"ip", "netns", "add", p.A}) || len(cmds) != 9 {
		t.Errorf("setup %v", cmds)
	}
	sh := strings.Join(p.shapeCommand(10e6), " ")
	if !strings.Contains(sh, "tbf rate 10000000bit burst 5000 latency 500ms") || !strings.Contains(sh, "-n "+p.A) {
		t.Errorf("shape: %s", sh)
	}
	if del := strings.Join(p.shapeCommand(0), " "); !strings.Contains(del, "qdisc del dev "+p.DevA) {
		t.Errorf("unshape: %s", del)
	}
	lc := linkCommands(p.B, p.DevB, 10e6, 20*time.Millisecond)
	if len(lc) != 2 || !strings.Contains(strings.Join(lc[0], " "), "root handle 1: netem delay 20000us") ||
		!strings.Contains(strings.Join(lc[1], " "), "parent 1: handle 10: tbf rate 10000000bit") {
		t.Errorf("link: %v", lc)
	}
}

// With root and TP_NETNS_TEST=1 (benchmark machines, not CI): a pair is
// built, carries data both ways when shaped, and is removed.
func TestPairLive(t *testing.T) {
	if os.Getenv("TP_NETNS_TEST") == "" {
		t.Skip("set TP_NETNS_TEST=1 (as root) to build a real veth pair")
	}
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := p.Shape(8e6); err != nil {
		t.Fatal(err)
	}
	ln, err := p.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	c, err := p.Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	t.Logf("1 MiB written in %v at 8 Mbit/s", time.Since(t0))
}
