package netsim

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A Duplex carries both ways, each at its own link's pace: what the client
// sends takes the uplink's time, what it receives the downlink's.
func TestDuplex(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const up, down = 256 << 10, 1 << 20 // bytes
	srv := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srv <- err
			return
		}
		defer c.Close()
		got := make([]byte, up)
		if _, err := io.ReadFull(c, got); err != nil {
			srv <- err
			return
		}
		_, err = c.Write(bytes.Repeat([]byte{7}, down))
		srv <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	upLink := Link{Rate: 1 << 20, Latency: 10 * time.Millisecond, Burst: 16 << 10}
	downLink := Link{Rate: 8 << 20, Latency: 10 * time.Millisecond, Burst: 16 << 10}
	d := NewDuplex(raw, upLink, downLink)
	defer d.Close()
	start := time.Now()
	if _, err := d.Write(bytes.Repeat([]byte{1}, up)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, down)
	if _, err := io.ReadFull(d, got); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if err := <-srv; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{7}, down)) {
		t.Fatal("received bytes differ from those sent")
	}
	least := time.Duration(float64(up-upLink.Burst)/upLink.Rate*float64(time.Second)) +
		time.Duration(float64(down-downLink.Burst)/downLink.Rate*float64(time.Second)) + 20*time.Millisecond
	if took < least {
		t.Errorf("%d bytes up and %d down took %v, faster than the links allow (%v)", up, down, took, least)
	}
	if r, w := d.Bytes(); r != down || w != up {
		t.Errorf("Bytes: %d read, %d written; want %d, %d", r, w, down, up)
	}
	d.SetRates(1, 2)
	if up, down := d.Rates(); up != 1 || down != 2 {
		t.Errorf("Rates: %v, %v after SetRates(1, 2)", up, down)
	}
}

// Closing a Duplex ends its reader goroutine and unblocks a pending Read.
func TestDuplexClose(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	d := NewDuplex(a, Link{Rate: 1 << 10}, Link{Rate: 1 << 10})
	errc := make(chan error, 1)
	go func() {
		_, err := d.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	d.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Read after Close: no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked after Close")
	}
}
