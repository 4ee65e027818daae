package autotune

import (
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UseTCPInfo makes the estimator read the kernel's TCP_INFO of c (Linux
// TCP connections): the delivery rate and the round-trip time. It reports
// whether c offers it.
func (l *Link) UseTCPInfo(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var mu sync.Mutex
	var last tcpInfo
	var lastAt time.Time
	var lastOK bool
	read := func() (tcpInfo, bool) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(lastAt) >= 10*time.Millisecond { // one getsockopt per 10 ms at most
			lastAt = now
			var info *unix.TCPInfo
			var gerr error
			err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
			lastOK = err == nil && gerr == nil
			if lastOK {
				last = tcpInfo{DeliveryRate: float64(info.Delivery_rate), RTT: time.Duration(info.Rtt) * time.Microsecond, NotSent: int(info.Notsent_bytes)}
			}
		}
		return last, lastOK
	}
	if _, ok := read(); !ok {
		return false
	}
	l.mu.Lock()
	l.tcp = read
	l.mu.Unlock()
	return true
}
