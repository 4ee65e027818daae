package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// On loopback, where no coding pays for itself, the local proxy passes
// the application's connection through as it is (its HTTP/2, with every
// call, header and deadline in it) after rawMagic, and the remote proxy,
// seeing rawMagic first, passes it on to the server: the two proxies then
// cost two forwarded TCP connections, not two more gRPC legs per message.
// rawMagic cannot begin an HTTP/2 connection (its preface is "PRI * ...")
// or a TLS one (0x16).
const rawMagic = "TPRAW/1\n"

// onLoopback reports whether addr (host:port) names this host.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// forwardRaw passes c through to, after prefix (rawMagic on the local
// side, nothing on the remote one), both ways, half-closes included; the
// bytes written to and read from "to" are added to out and in as they
// pass (either may be nil).
func forwardRaw(c net.Conn, to, prefix string, out, in *atomic.Int64) error {
	defer c.Close()
	d, err := net.Dial("tcp", to)
	if err != nil {
		return err
	}
	defer d.Close()
	if prefix != "" {
		if _, err := io.WriteString(d, prefix); err != nil {
			return err
		}
	}
	errc := make(chan error, 2)
	pipe := func(dst, src net.Conn, n *atomic.Int64) {
		err := copyCounting(dst, src, n)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		errc <- err
	}
	go pipe(d, c, out)
	go pipe(c, d, in)
	return errors.Join(<-errc, <-errc)
}

// copyCounting copies src to dst until src ends, adding what it copies to
// n (if not nil) every few MiB at most. Between two TCP connections each
// step is a splice in the kernel (io.CopyN's LimitedReader keeps it so).
func copyCounting(dst io.Writer, src io.Reader, n *atomic.Int64) error {
	if n == nil {
		_, err := io.Copy(dst, src)
		return err
	}
	for {
		k, err := io.CopyN(dst, src, 4<<20)
		n.Add(k)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// sniffListener is the remote proxy's listener: a connection that opens
// with rawMagic is passed through to the server (raw), any other goes to
// the gRPC server through Accept, the bytes read to tell replayed.
type sniffListener struct {
	net.Listener
	to    string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu  sync.Mutex
	raw map[net.Conn]bool // passed through, open
	err error
}

func newSniffListener(ln net.Listener, to string) *sniffListener {
	l := &sniffListener{Listener: ln, to: to, conns: make(chan net.Conn), done: make(chan struct{}), raw: map[net.Conn]bool{}}
	go l.accept()
	return l
}

func (l *sniffListener) accept() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.sniff(c)
		}()
	}
}

func (l *sniffListener) sniff(c net.Conn) {
	buf := make([]byte, len(rawMagic))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.ReadFull(c, buf)
	c.SetReadDeadline(time.Time{})
	if err == nil && bytes.Equal(buf, []byte(rawMagic)) {
		l.mu.Lock()
		l.raw[c] = true
		l.mu.Unlock()
		forwardRaw(c, l.to, "", nil, nil)
		l.mu.Lock()
		delete(l.raw, c)
		l.mu.Unlock()
		return
	}
	select {
	case l.conns <- &replayConn{Conn: c, pre: buf[:n]}:
	case <-l.done:
		c.Close()
	}
}

func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections passed through stay until closeRaw.
func (l *sniffListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// closeRaw closes the connections passed through and waits for them.
func (l *sniffListener) closeRaw() {
	l.mu.Lock()
	for c := range l.raw {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// replayConn is a connection whose first bytes, already read, are read
// again first.
type replayConn struct {
	net.Conn
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
