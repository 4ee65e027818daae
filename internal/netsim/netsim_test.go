package netsim

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// The link delivers every byte in order, never faster than its rate allows
// and never before its latency (lower bounds only: a busy machine is
// slower, never faster).
func TestPipeRateAndLatency(t *testing.T) {
	const n = 512 << 10
	l := Link{Rate: 4 << 20, Latency: 30 * time.Millisecond, Burst: 16 << 10}
	a, b := Pipe(l)
	defer b.Close()
	src := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	start := time.Now()
	go func() {
		for off := 0; off < n; off += 10000 {
			if _, err := a.Write(src[off:min(off+10000, n)]); err != nil {
				t.Error(err)
				return
			}
		}
		a.CloseWrite()
	}()
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if !bytes.Equal(got, src) {
		t.Fatalf("received %d bytes, differing from the %d sent", len(got), n)
	}
	if least := time.Duration(float64(n-l.Burst)/l.Rate*float64(time.Second)) + l.Latency; took < least {
		t.Errorf("%d bytes took %v, faster than the link allows (%v)", n, took, least)
	}
}

// SetRate takes effect for what is written next; Close stops a blocked
// writer. In a bubble of testing/synctest, synctest.Wait sees the writer
// blocked on the slow link before Close.
func TestSetRateAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(Link{Rate: 1 << 30})
		go io.Copy(io.Discard, b)
		if _, err := a.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		a.SetRate(1 << 10) // 1 KiB/s: a 1 MiB write would take 17 minutes
		if a.Rate() != 1<<10 {
			t.Fatalf("rate %v", a.Rate())
		}
		errc := make(chan error, 1)
		go func() {
			_, err := a.Write(make([]byte, 1<<20))
			errc <- err
		}()
		synctest.Wait() // the write is blocked
		start := time.Now()
		a.Close()
		if err := <-errc; err == nil {
			t.Fatal("a write blocked on a slow link returned no error when the link was closed")
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Close took %v of the clock to stop the write", d)
		}
		b.Close()
	})
}
