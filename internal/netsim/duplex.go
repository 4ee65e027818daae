package netsim

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Duplex is a connection whose two directions cross links of their own,
// as a client behind an asymmetric access link sees it: its writes cross
// the uplink before they reach the underlying connection, and what the
// underlying connection receives crosses the downlink before it can be
// read. Both rates can change while data flows.
type Duplex struct {
	c    net.Conn
	out  *Conn    // c's writes, at the uplink's pace
	in   *Conn    // the downlink: the reader goroutine writes into it
	r    net.Conn // the downlink's far end, which Read reads
	done chan struct{}

	read, written atomic.Int64
}

// NewDuplex returns c with its writes crossing up and its reads crossing
// down. Close it, not c.
func NewDuplex(c net.Conn, up, down Link) *Duplex {
	a, b := net.Pipe()
	d := &Duplex{c: c, out: Shape(c, up), in: Shape(b, down), r: a, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		io.Copy(d.in, c)
		d.in.CloseWrite() // what was received still arrives, then EOF
	}()
	return d
}

// Read reads what came down the link.
func (d *Duplex) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.read.Add(int64(n))
	return n, err
}

// Write sends p up the link.
func (d *Duplex) Write(p []byte) (int, error) {
	n, err := d.out.Write(p)
	d.written.Add(int64(n))
	return n, err
}

// SetRates changes the links' rates in bytes per second (0: unlimited).
func (d *Duplex) SetRates(up, down float64) {
	d.out.SetRate(up)
	d.in.SetRate(down)
}

// Bytes returns the bytes read and written so far.
func (d *Duplex) Bytes() (read, written int64) { return d.read.Load(), d.written.Load() }

// Close closes the connection and both links.
func (d *Duplex) Close() error {
	err := d.out.Close()
	d.r.Close()
	d.in.Close()
	<-d.done
	return err
}

func (d *Duplex) LocalAddr() net.Addr  { return d.c.LocalAddr() }
func (d *Duplex) RemoteAddr() net.Addr { return d.c.RemoteAddr() }

// SetDeadline sets the read and write deadlines.
func (d *Duplex) SetDeadline(t time.Time) error {
	d.r.SetReadDeadline(t)
	return d.out.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline of Read.
func (d *Duplex) SetReadDeadline(t time.Time) error { return d.r.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline of Write's delivery.
func (d *Duplex) SetWriteDeadline(t time.Time) error { return d.out.SetWriteDeadline(t) }

// Rates returns the links' rates in bytes per second.
func (d *Duplex) Rates() (up, down float64) { return d.out.Rate(), d.in.Rate() }
