package proxy

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// hopMessage is a message of n bytes split into buffers of at most 64 KiB,
// as gRPC hands them over.
func hopMessage(n int) mem.BufferSlice {
	b := grpctest.Message(n)
	var m mem.BufferSlice
	for len(b) > 0 {
		k := min(len(b), 64<<10)
		m = append(m, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return m
}

func decodeErrs(st *Stats) map[string]int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := map[string]int64{}
	for k, v := range st.errs {
		out[k] = v.Load()
	}
	return out
}

// TestHopRoundTrip: each message comes back bit for bit, as it is after
// mark 0 on loopback and coded after mark 1 elsewhere, from empty to
// several MiB; coded float data takes fewer bytes.
func TestHopRoundTrip(t *testing.T) {
	loop := &hopConn{}
	loop.loop.Store(true)
	for _, c := range []struct {
		name string
		conn *hopConn
		mark byte
	}{{"loopback", loop, markPlain}, {"coded", nil, markFrames}} {
		for _, n := range []int{0, 1, 100, 64 << 10, 3<<20 + 5} {
			st := new(Stats)
			m := hopMessage(n)
			enc, err := encode(c.conn, m, st)
			if err != nil {
				t.Fatalf("%s %d: %v", c.name, n, err)
			}
			wire := enc.Materialize()
			if wire[0] != c.mark {
				t.Fatalf("%s %d: mark %d", c.name, n, wire[0])
			}
			if c.mark == markFrames && n >= 64<<10 && len(wire) >= n {
				t.Errorf("%s %d: %d bytes coded", c.name, n, len(wire))
			}
			dec, err := decode(c.conn, mem.BufferSlice{mem.SliceBuffer(wire)}, n, st)
			if err != nil {
				t.Fatalf("%s %d: %v", c.name, n, err)
			}
			if !bytes.Equal(dec.Materialize(), m.Materialize()) {
				t.Fatalf("%s %d: differs", c.name, n)
			}
			dec.Free()
			enc.Free()
		}
	}
}

// TestHopDecodeErrors: what the other proxy might send wrong gets the
// right status and is counted by kind, never a panic.
func TestHopDecodeErrors(t *testing.T) {
	coded, err := encode(nil, hopMessage(1<<20), new(Stats))
	if err != nil {
		t.Fatal(err)
	}
	good := coded.Materialize()
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)/2] ^= 0xff
	for _, c := range []struct {
		name string
		msg  []byte
		max  int
		code codes.Code
		kind string
	}{
		{"empty", nil, 1 << 20, codes.Internal, "unmarked"},
		{"unknown mark", []byte{7, 1, 2}, 1 << 20, codes.Internal, "unmarked"},
		{"over the limit", good, 1000, codes.ResourceExhausted, "limit"},
		{"as it is, over the limit", append([]byte{markPlain}, make([]byte, 1001)...), 1000, codes.ResourceExhausted, "limit"},
		{"truncated", good[:len(good)/2], 1 << 20, codes.Internal, ""},
		{"corrupt", corrupt, 1 << 20, codes.Internal, ""},
	} {
		st := new(Stats)
		_, err := decode(nil, mem.BufferSlice{mem.SliceBuffer(c.msg)}, c.max, st)
		if status.Code(err) != c.code {
			t.Errorf("%s: %v, want %v", c.name, err, c.code)
		}
		errs := decodeErrs(st)
		if c.kind != "" && errs[c.kind] != 1 || len(errs) != 1 {
			t.Errorf("%s: decode errors %v, want one of kind %q", c.name, errs, c.kind)
		}
	}
}

// TestMeter: the rate of a message is its bytes after the first read
// over the time from that read to the last.
func TestMeter(t *testing.T) {
	var m meter
	t0 := time.Unix(1000, 0)
	m.read(1000, t0) // the message's first bytes
	for i := 1; i <= 99; i++ {
		m.read(1000, t0.Add(time.Duration(i)*time.Millisecond))
	}
	m.message(100_000)
	if got, want := m.rate(), 99_000/0.099; got < want*0.999 || got > want*1.001 {
		t.Fatalf("rate %v, want %v", got, want)
	}
	m.message(100) // too small to time: the rate stays
	if m.rate() == 0 {
		t.Fatal("a small message reset the rate")
	}
}

// FuzzHopDecode: arbitrary messages from the other proxy decode or fail
// with a status, within the limit, never panic.
func FuzzHopDecode(f *testing.F) {
	for _, n := range []int{0, 10, 70 << 10} {
		enc, err := encode(nil, hopMessage(n), new(Stats))
		if err != nil {
			f.Fatal(err)
		}
		w := enc.Materialize()
		f.Add(w)
		f.Add(w[:len(w)/2])
	}
	f.Add([]byte{markPlain, 1, 2, 3})
	f.Add([]byte{9})
	const max = 1 << 20
	f.Fuzz(func(t *testing.T, msg []byte) {
		st := new(Stats)
		out, err := decode(nil, mem.BufferSlice{mem.SliceBuffer(msg)}, max, st)
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				t.Fatalf("not a status: %v", err)
			}
			return
		}
		if out.Len() > max {
			t.Fatalf("%d bytes past the limit %d", out.Len(), max)
		}
		out.Free()
	})
}

// TestHopLimit: a message of the largest size the proxy allows fits on
// the hop however it is coded, with its mark byte.
func TestHopLimit(t *testing.T) {
	const max = 1 << 20
	noise := make([]byte, max) // incompressible: every frame stored raw
	x := uint64(0x9e3779b97f4a7c15)
	for i := range noise {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		noise[i] = byte(x >> 32)
	}
	for _, msg := range []mem.BufferSlice{hopMessage(max), {mem.SliceBuffer(make([]byte, max))}, {mem.SliceBuffer(noise)}} {
		enc, err := encode(nil, msg, new(Stats))
		if err != nil {
			t.Fatal(err)
		}
		if n := enc.Len(); n > hopLimit(max) {
			t.Errorf("%d bytes on the hop, limit %d", n, hopLimit(max))
		}
		enc.Free()
	}
	if hopLimit(max) > max+max/200+64 {
		t.Errorf("hopLimit(%d) = %d: more room than the frames need", max, hopLimit(max))
	}
}
