// Package netns builds a real, shaped network link for benchmarks: two
// network namespaces joined by a veth pair, with addresses the package
// assigns itself (link-local 169.254.x.y/30, nothing else is touched), and
// the sending side shaped with tc's token bucket filter. It needs Linux,
// root, and the ip and tc tools (iproute2). Close removes everything, and
// a Pair left behind by a killed process is found by its name prefix
// (Cleanup).
package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Prefix starts the name of every namespace and device this package
// makes.
const Prefix = "tpl"

// ErrUnsupported is returned where namespaces cannot be made (not Linux,
// not root, no ip or tc).
var ErrUnsupported = errors.New("netns: needs Linux, root and iproute2 (ip, tc)")

// Pair is two namespaces joined by a veth pair: the sender's end in A,
// the receiver's in B.
type Pair struct {
	A, B         string     // namespace names
	DevA, DevB   string     // veth ends, in A and B
	AddrA, AddrB netip.Addr // their addresses (one /30)
}

// plan picks names and addresses for a new pair: id makes them unique.
func plan(id uint32) *Pair {
	// 169.254.x.y/30 with x in 1..254 (not 0 and 255, reserved) and the
	// /30's first host address.
	x := 1 + byte(id%254)
	y := byte((id/254)%63)*4 + 1
	tag := strconv.FormatUint(uint64(id), 36)
	return &Pair{
		A: Prefix + "-" + tag + "-a", B: Prefix + "-" + tag + "-b",
		DevA: Prefix + tag + "a", DevB: Prefix + tag + "b",
		AddrA: netip.AddrFrom4([4]byte{169, 254, x, y}),
		AddrB: netip.AddrFrom4([4]byte{169, 254, x, y + 1}),
	}
}

// run runs a command and returns its error with its output.
func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupCommands are the commands that build p.
func (p *Pair) setupCommands() [][]string {
	a, b := p.AddrA.String()+"/30", p.AddrB.String()+"/30"
	return [][]string{
		{"ip", "netns", "add", p.A},
		{"ip", "netns", "add", p.B},
		{"ip", "link", "add", p.DevA, "netns", p.A, "type", "veth", "peer", "name", p.DevB, "netns", p.B},
		{"ip", "-n", p.A, "addr", "add", a, "dev", p.DevA},
		{"ip", "-n", p.B, "addr", "add", b, "dev", p.DevB},
		{"ip", "-n", p.A, "link", "set", "lo", "up"},
		{"ip", "-n", p.B, "link", "set", "lo", "up"},
		{"ip", "-n", p.A, "link", "set", p.DevA, "up"},
		{"ip", "-n", p.B, "link", "set", p.DevB, "up"},
	}
}

// New builds a pair. On failure it removes what it made.
func New() (*Pair, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not root", ErrUnsupported)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
	}
	p := plan(rand.Uint32() % (254 * 63))
	for _, c := range p.setupCommands() {
		if err := run(c...); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// shapeCommand is the tc command that shapes A's egress (toward B) to
// rate bits per second; rate 0 removes the shaping.
func (p *Pair) shapeCommand(rate float64) []string {
	if rate <= 0 {
		return []string{"tc", "-n", p.A, "qdisc", "del", "dev", p.DevA, "root"}
	}
	return tbfCommand(p.A, p.DevA, rate, "root")
}

// Shape sets the rate of the link from A to B in bits per second (0:
// unshaped). It may be called while data flows.
func (p *Pair) Shape(rate float64) error {
	err := run(p.shapeCommand(rate)...)
	if rate <= 0 && err != nil && (strings.Contains(err.Error(), "No such file") || strings.Contains(err.Error(), "handle of zero")) {
		return nil // nothing to remove
	}
	return err
}

// linkCommands are the tc commands that shape egress of device dev in
// namespace ns to rate bits per second (0: no limit) after a one-way
// delay (0: none): netem for the delay, tbf under it for the rate.
func linkCommands(ns, dev string, rate float64, delay time.Duration) [][]string {
	if delay <= 0 {
		if rate <= 0 {
			return [][]string{{"tc", "-n", ns, "qdisc", "del", "dev", dev, "root"}}
		}
		return [][]string{tbfCommand(ns, dev, rate, "root")}
	}
	// netem's queue holds what the delay keeps in flight: 10000 packets.
	cmds := [][]string{{"tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "netem",
		"delay", strconv.FormatInt(delay.Microseconds(), 10) + "us", "limit", "10000"}}
	if rate > 0 {
		cmds = append(cmds, tbfCommand(ns, dev, rate, "parent", "1:", "handle", "10:"))
	}
	return cmds
}

// tbfCommand is a tbf qdisc of rate bits per second on dev, at where
// ("root", or "parent", "1:", "handle", "10:").
func tbfCommand(ns, dev string, rate float64, where ...string) []string {
	// A bucket of at least one MTU-sized packet and about 4 ms of traffic;
	// packets wait up to 500 ms in the queue before being dropped.
	burst := max(int64(rate/8*0.004), 3000)
	cmd := append([]string{"tc", "-n", ns, "qdisc", "replace", "dev", dev}, where...)
	return append(cmd, "tbf", "rate", strconv.FormatInt(int64(rate), 10)+"bit",
		"burst", strconv.FormatInt(burst, 10), "latency", "500ms")
}

// ErrNoNetem is returned by ShapeLink where the kernel has no netem
// qdisc (sch_netem): the rates can be shaped, not the delay.
var ErrNoNetem = errors.New("netns: the kernel has no netem qdisc (sch_netem) for the delay")

// ShapeLink shapes both directions: A to B at up bits per second, B to
// A at down (0: no limit), each delayed by delay (half the round trip).
// Called again while data flows, it changes the rates.
func (p *Pair) ShapeLink(up, down float64, delay time.Duration) error {
	for _, c := range append(linkCommands(p.A, p.DevA, up, delay), linkCommands(p.B, p.DevB, down, delay)...) {
		if err := run(c...); err != nil {
			if slices.Contains(c, "netem") && strings.Contains(err.Error(), "unknown") {
				return fmt.Errorf("%w: %v", ErrNoNetem, err)
			}
			return err
		}
	}
	return nil
}

// Close removes both namespaces (the veth pair goes with them).
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range []string{p.A, p.B} {
		if err := run("ip", "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cleanup removes namespaces left by pairs of killed processes (names
// starting with Prefix), and reports how many it removed.
func Cleanup() (int, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return 0, fmt.Errorf("netns: ip netns list: %v", err)
	}
	n := 0
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, Prefix+"-") {
			if err := run("ip", "netns", "del", name); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}
