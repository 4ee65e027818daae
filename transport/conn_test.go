package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/netsim"
	_ "github.com/tensorpress/tensorpress/lossless"
	"github.com/tensorpress/tensorpress/testvectors"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var zstd1 = codec.MustParseRecipe("*:zstd(1)")

// floats returns n bytes of N(0, 0.02) float32s (testvectors.Normal): data
// that compresses a little. A partial last element stays zero.
func floats(n int, seed uint64) []byte {
	b := make([]byte, n)
	copy(b, testvectors.Normal("w", n/4, 0.02, seed).Data)
	return b
}

// pair wraps both ends of a connection.
func pair(t *testing.T, a, b net.Conn, opts ...Option) (*Conn, *Conn) {
	t.Helper()
	ca, err := Wrap(a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := Wrap(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ca, cb
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		acc <- res{c, err}
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a.(*net.TCPConn), r.c.(*net.TCPConn)
}

// conns returns both ends of a net.Pipe ("pipe") or of a loopback TCP
// connection (anything else).
func conns(t *testing.T, link string) (net.Conn, net.Conn) {
	if link == "pipe" {
		return net.Pipe()
	}
	a, b := tcpPair(t)
	return a, b
}

// Both directions at once, over net.Pipe and loopback TCP, with writes of
// every size from 0 to several chunks: everything arrives, in order.
func TestRoundTripBothWays(t *testing.T) {
	for _, link := range []string{"pipe", "tcp"} {
		t.Run(link, func(t *testing.T) {
			a, b := conns(t, link)
			ca, cb := pair(t, a, b, WithRecipe(zstd1), WithCodec(codec.WithChunkSize(64<<10)))
			defer ca.Close()
			defer cb.Close()
			send := func(c *Conn, seed uint64) []byte {
				var all []byte
				rng := rand.New(rand.NewPCG(seed, 9))
				for _, n := range []int{0, 1, 7, 4096, 65535, 65536, 65537, 300000, 1 << 20} {
					p := floats(n, rng.Uint64())
					all = append(all, p...)
					if k, err := c.Write(p); err != nil || k != n {
						t.Errorf("write %d bytes: %d, %v", n, k, err)
					}
				}
				if err := c.CloseWrite(); err != nil {
					t.Error(err)
				}
				return all
			}
			var wg sync.WaitGroup
			var sentA, sentB, gotA, gotB []byte
			var errA, errB error
			wg.Add(4)
			go func() { defer wg.Done(); sentA = send(ca, 1) }()
			go func() { defer wg.Done(); sentB = send(cb, 2) }()
			go func() { defer wg.Done(); gotB, errB = io.ReadAll(cb) }()
			go func() { defer wg.Done(); gotA, errA = io.ReadAll(ca) }()
			wg.Wait()
			if errA != nil || errB != nil {
				t.Fatalf("read errors: %v, %v", errA, errB)
			}
			if !bytes.Equal(gotB, sentA) || !bytes.Equal(gotA, sentB) {
				t.Fatalf("received %d and %d bytes, sent %d and %d, or they differ", len(gotB), len(gotA), len(sentA), len(sentB))
			}
			if h := cb.Peer(); h == nil || len(h.Stages) == 0 {
				t.Fatalf("peer hello %+v", h)
			}
		})
	}
}

// Data written and then Close: the peer reads all of it and then io.EOF.
func TestCloseDeliversAndEOF(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := pair(t, a, b, WithRecipe(zstd1))
	defer cb.Close()
	want := floats(3<<20, 5)
	go func() {
		ca.Write(want)
		ca.Close()
	}()
	got, err := io.ReadAll(cb)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d of %d bytes: %v", len(got), len(want), err)
	}
	if _, err := ca.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// Half-close: after CloseWrite the peer reads io.EOF and can still answer;
// over TCP the underlying connection is half-closed too.
func TestHalfClose(t *testing.T) {
	for _, link := range []string{"pipe", "tcp"} {
		t.Run(link, func(t *testing.T) {
			a, b := conns(t, link)
			ca, cb := pair(t, a, b, WithRecipe(zstd1))
			defer ca.Close()
			defer cb.Close()
			req := floats(200000, 7)
			go func() {
				ca.Write(req)
				ca.CloseWrite()
			}()
			got, err := io.ReadAll(cb)
			if err != nil || !bytes.Equal(got, req) {
				t.Fatalf("request: %d of %d bytes, %v", len(got), len(req), err)
			}
			if _, err := ca.Write([]byte("late")); !errors.Is(err, ErrWriteClosed) {
				t.Fatalf("write after CloseWrite: %v", err)
			}
			resp := floats(100000, 8)
			go func() {
				cb.Write(resp)
				cb.CloseWrite()
			}()
			got, err = io.ReadAll(ca)
			if err != nil || !bytes.Equal(got, resp) {
				t.Fatalf("response: %d of %d bytes, %v", len(got), len(resp), err)
			}
		})
	}
}

// rawPeer writes a stream made by a codec.Writer, cut after cut bytes, to
// c, and closes it (or resets it, over TCP).
func cutStream(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := codec.NewWriter(&buf, codec.WithRecipe(zstd1), codec.WithChunkSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A peer that stops mid-frame (closed, or reset over TCP): Read delivers
// the data of the frames that arrived whole, then an error: never a short
// stream passed off as complete.
func TestPeerCutMidFrame(t *testing.T) {
	data := floats(300000, 11) // 5 frames of 64 KiB
	stream := cutStream(t, data)
	for _, link := range []string{"pipe", "tcp-reset"} {
		t.Run(link, func(t *testing.T) {
			a, b := conns(t, link)
			cb, err := Wrap(b)
			if err != nil {
				t.Fatal(err)
			}
			defer cb.Close()
			go func() {
				go io.Copy(io.Discard, a) // the wrapped end's hello and feedback
				a.Write(stream[:len(stream)*3/4])
				if tc, ok := a.(*net.TCPConn); ok {
					time.Sleep(10 * time.Millisecond)
					tc.SetLinger(0) // RST
				}
				a.Close()
			}()
			got, err := io.ReadAll(cb)
			if err == nil {
				t.Fatalf("read %d bytes of a stream cut short, and no error", len(got))
			}
			if !bytes.Equal(got, data[:len(got)]) || len(got)%(64<<10) != 0 || len(got) == 0 {
				t.Fatalf("read %d bytes (want whole frames of the data first)", len(got))
			}
			t.Logf("%d of %d bytes, then: %v", len(got), len(data), err)
		})
	}
}

// Garbage from a peer that is not a tensorpress peer is an error on Read.
func TestNotAPeer(t *testing.T) {
	a, b := net.Pipe()
	cb, err := Wrap(b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	go func() {
		go io.Copy(io.Discard, a)
		a.Write([]byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"))
		a.Close()
	}()
	if _, err := io.ReadAll(cb); err == nil {
		t.Fatal("no error for a peer that sends HTTP")
	}
	if _, err := cb.Write([]byte("x")); err == nil {
		t.Fatal("write to a peer that sent no hello succeeded")
	}
}

// A slow reader holds the writer back without losing or reordering data,
// and the reader's memory stays bounded by the read-ahead.
func TestSlowReader(t *testing.T) {
	a, b := netsim.Pipe(netsim.Link{Rate: 64 << 20})
	ca, cb := pair(t, a, b, WithRecipe(zstd1), WithCodec(codec.WithChunkSize(32<<10)), WithReadAhead(2))
	defer ca.Close()
	defer cb.Close()
	want := floats(2<<20, 13)
	done := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		if _, err := ca.Write(want); err != nil {
			t.Error(err)
		}
		done <- time.Since(t0)
		ca.CloseWrite()
	}()
	var got []byte
	buf := make([]byte, 1000)
	for {
		n, err := cb.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got)%(256<<10) < 1000 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d of %d bytes, or they differ", len(got), len(want))
	}
	<-done
}

// A read deadline interrupts Read with a timeout, and Read works again
// once the deadline moves: the stream is intact. A write deadline on a
// peer that does not read fails the Write with a timeout.
func TestDeadlines(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := pair(t, a, b, WithRecipe(zstd1), WithReadAhead(1), WithCloseTimeout(50*time.Millisecond))
	defer ca.Close()
	defer cb.Close()
	cb.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := cb.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	cb.SetReadDeadline(time.Time{})
	go ca.Write([]byte("after the timeout"))
	buf := make([]byte, 100)
	n, err := cb.Read(buf)
	if err != nil || string(buf[:n]) != "after the timeout" {
		t.Fatalf("read after the deadline moved: %q, %v", buf[:n], err)
	}
	// cb reads nothing more: a large write fills the read-ahead and the pipe.
	ca.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = ca.Write(floats(8<<20, 3))
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("write to a peer that does not read, past the deadline: %v", err)
	}
	if _, err := ca.Write([]byte("x")); err == nil {
		t.Fatal("write after a timed-out write succeeded (the stream is broken)")
	}
}

// Close unblocks a blocked Read and a blocked Write at once, without
// waiting for the close timeout (an hour here: a Close that waited would
// hang the test until go test's timeout reports it).
func TestCloseUnblocks(t *testing.T) {
	a, b := net.Pipe()
	sent := make(chan struct{})
	wa := &signalConn{Conn: a, after: 4 << 10, reached: sent} // beyond the hello
	ca, cb := pair(t, wa, b, WithReadAhead(1), WithCloseTimeout(time.Hour))
	defer cb.Close()
	rerr := make(chan error, 1)
	go func() {
		_, err := ca.Read(make([]byte, 10))
		rerr <- err
	}()
	werr := make(chan error, 1)
	go func() {
		_, err := ca.Write(make([]byte, 8<<20)) // cb never reads: the Write blocks
		werr <- err
	}()
	<-sent // the Write is under way
	ca.Close()
	if err := <-rerr; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked read after Close: %v", err)
	}
	if err := <-werr; err == nil {
		t.Fatal("blocked write after Close: no error")
	}
}

// signalConn closes reached once more than after bytes were written.
type signalConn struct {
	net.Conn
	after   int
	n       int
	reached chan struct{}
}

func (c *signalConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.n <= c.after && c.n+n > c.after {
		close(c.reached)
	}
	c.n += n
	return n, err
}

// Concurrent Writes each arrive contiguous.
func TestConcurrentWrites(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := pair(t, a, b, WithRecipe(zstd1), WithCodec(codec.WithChunkSize(4096)))
	defer ca.Close()
	defer cb.Close()
	const writers, each, size = 4, 20, 10000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				msg := bytes.Repeat([]byte{byte(w*each + i)}, size)
				if _, err := ca.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); ca.CloseWrite() }()
	got, err := io.ReadAll(cb)
	if err != nil || len(got) != writers*each*size {
		t.Fatalf("read %d bytes: %v", len(got), err)
	}
	seen := map[byte]bool{}
	for off := 0; off < len(got); off += size {
		m := got[off : off+size]
		if !bytes.Equal(m, bytes.Repeat(m[:1], size)) || seen[m[0]] {
			t.Fatalf("message at %d is interleaved or repeated", off)
		}
		seen[m[0]] = true
	}
}

// A peer that announces fewer stages gets raw frames for recipes it could
// not decode.
func TestPeerStages(t *testing.T) {
	a, b := net.Pipe()
	ca, err := Wrap(a, WithRecipe(zstd1))
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	hello := codec.AppendHello(nil, &codec.Hello{MinVersion: 1, MaxVersion: 1, Peer: "old", Stages: []codec.StageID{0}})
	go func() {
		b.Write(hello)
	}()
	werr := make(chan error, 1)
	go func() {
		_, err := ca.Write(floats(100000, 1))
		werr <- err
	}()
	r, err := codec.NewReader(b)
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Header.Type == codec.FrameBytes {
			if e := f.Header.Entries[0]; e.Coded {
				t.Fatalf("a coded frame for a peer without zstd")
			}
			break
		}
	}
	go io.Copy(io.Discard, b) // the rest of the Write: it starts with small frames
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if p := ca.Peer(); p == nil || p.Peer != "old" {
		t.Fatalf("peer %+v", p)
	}
	b.Close()
}

// The receiver reports what it decoded and what its application read; the
// sender's handler sees the totals reach what it sent.
func TestFeedback(t *testing.T) {
	a, b := tcpPair(t)
	var mu sync.Mutex
	var last Feedback
	got := make(chan struct{})
	want := floats(1<<20, 21)
	ca, err := Wrap(a, WithRecipe(zstd1), WithFeedbackHandler(func(f Feedback) {
		mu.Lock()
		defer mu.Unlock()
		last = f
		if f.Consumed == uint64(len(want)) && last.RawBytes == uint64(len(want)) {
			select {
			case <-got:
			default:
				close(got)
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := Wrap(b, WithFeedbackInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	go ca.Write(want)
	if _, err := io.ReadFull(cb, make([]byte, len(want))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		mu.Lock()
		t.Fatalf("no feedback saying all was read; last %+v", last)
	}
	mu.Lock()
	defer mu.Unlock()
	// 1 MiB in frames of 16, 32, ... 512 KiB (the start) and the 16 KiB left.
	if last.Frames != 7 || last.WireBytes >= last.RawBytes || last.DecodeTime <= 0 || last.DecodeSpeed() <= 0 {
		t.Fatalf("feedback %+v", last)
	}
}

// Application control frames reach the peer's handler; reserved kinds are
// refused.
func TestControlFrames(t *testing.T) {
	a, b := net.Pipe()
	got := make(chan string, 1)
	ca, err := Wrap(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := Wrap(b, WithControlHandler(func(kind uint64, p []byte) { got <- fmt.Sprint(kind, string(p)) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if err := ca.WriteControl(7, nil); err == nil {
		t.Fatal("reserved control kind accepted")
	}
	if err := ca.WriteControl(2048, []byte("ack 17")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "2048ack 17" {
		t.Fatalf("control %q", s)
	}
}

func TestFeedbackRoundTrip(t *testing.T) {
	f := Feedback{Frames: 3, WireBytes: 1 << 40, RawBytes: 5, Consumed: 4, DecodeTime: time.Hour}
	g, err := ParseFeedback(append(f.AppendBinary(nil), 1, 2, 3)) // later fields are skipped
	if err != nil || g != f {
		t.Fatalf("%+v, %v", g, err)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3, 4}, {0x80}, append(bytes.Repeat([]byte{0xff}, 10), 1)} {
		if _, err := ParseFeedback(bad); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

// io.Copy takes the chunks through WriteTo, as they are, to the end of
// the stream.
func TestWriteTo(t *testing.T) {
	a, b := tcpPair(t)
	ca, cb := pair(t, a, b, WithRecipe(zstd1), WithCodec(codec.WithChunkSize(100000)))
	defer ca.Close()
	defer cb.Close()
	want := floats(1<<20, 31)
	go func() {
		ca.Write(want[:12345])
		ca.Write(want[12345:])
		ca.CloseWrite()
	}()
	var got bytes.Buffer
	n, err := io.Copy(&got, cb)
	if err != nil || n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("copied %d of %d bytes: %v", n, len(want), err)
	}
	if fb := cb.Feedback(); fb.Consumed != uint64(len(want)) {
		t.Fatalf("consumed %d", fb.Consumed)
	}
}

// A write deadline that passes while the application only reads does not
// break the stream: the feedback the reads trigger waits until the
// deadline moves, and writes after that go through. In a bubble of
// testing/synctest the deadline passes on the bubble's clock, and
// synctest.Wait lets the control goroutine act on the read before the
// deadline is cleared.
func TestPassedWriteDeadlineKeepsStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		ca, cb := pair(t, a, b, WithFeedbackInterval(0))
		defer ca.Close()
		defer cb.Close()
		ca.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := ca.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		if n, err := cb.Read(buf); err != nil || string(buf[:n]) != "request" {
			t.Fatalf("request: %q, %v", buf[:n], err)
		}
		time.Sleep(100 * time.Millisecond) // the deadline passes
		if _, err := cb.Write([]byte("response")); err != nil {
			t.Fatal(err)
		}
		// Reading asks ca to send feedback, past its write deadline.
		if n, err := ca.Read(buf); err != nil || string(buf[:n]) != "response" {
			t.Fatalf("response: %q, %v", buf[:n], err)
		}
		synctest.Wait() // ca's control goroutine has seen the request for feedback
		ca.SetWriteDeadline(time.Time{})
		if _, err := ca.Write([]byte("next")); err != nil {
			t.Fatalf("write after the deadline was cleared: %v", err)
		}
		if n, err := cb.Read(buf); err != nil || string(buf[:n]) != "next" {
			t.Fatalf("next: %q, %v", buf[:n], err)
		}
	})
}

// The end-ack does not wait for the feedback interval: a peer that sends
// feedback seldom still acknowledges the end at once, so Close gets its
// acknowledgement well within its timeout. In a bubble of testing/synctest
// the clock moves only when every goroutine waits: a late end-ack would
// let the close timeout pass first.
func TestEndAckNotHeldByFeedbackInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		ca, err := Wrap(a, WithCloseTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cb, err := Wrap(b, WithFeedbackInterval(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer cb.Close()
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, cb) // sends feedback once, then waits a minute
			done <- err
		}()
		if _, err := ca.Write(floats(1<<20, 1)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // cb's feedback went; its interval runs
		t0 := time.Now()
		if err := ca.Close(); err != nil {
			t.Fatal(err)
		}
		if !isClosed(ca.acked) {
			t.Fatalf("Close returned after %v without the peer's end-ack", time.Since(t0))
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
