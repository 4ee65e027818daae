package netns

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// in runs f on a thread switched into namespace ns, so that the sockets f
// makes live there (they stay there once made, whichever thread uses
// them).
func in(ns string, f func() error) error {
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it ends with the goroutine, and no
		// other goroutine runs in the wrong namespace.
		return fmt.Errorf("netns: back from %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Listen listens on B's address (port 0: any).
func (p *Pair) Listen(port int) (net.Listener, error) {
	var ln net.Listener
	err := in(p.B, func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(p.AddrB.String(), fmt.Sprint(port)))
		return err
	})
	return ln, err
}

// Dial connects from A to addr (a listener of Listen).
func (p *Pair) Dial(addr string) (net.Conn, error) {
	var c net.Conn
	err := in(p.A, func() error {
		var err error
		c, err = net.Dial("tcp4", addr)
		return err
	})
	return c, err
}
