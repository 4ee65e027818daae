package cabi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
)

// serveHub serves a hub holding versions 1 and 2 of a small model (2
// differs from 1 a little, so that it goes as deltas) on loopback.
func serveHub(t *testing.T) (*hub.Hub, string, map[uint64][]*codec.Tensor) {
	t.Helper()
	h, err := hub.New(hub.WithChunkSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	models := map[uint64][]*codec.Tensor{}
	for v := uint64(1); v <= 2; v++ {
		var m []*codec.Tensor
		for i, n := range []int{3000, 17} {
			x := make([]float32, n)
			for j := range x {
				x[j] = float32(math.Sin(float64(i*n+j))) + float32(v-1)*1e-3*float32(j%7)
			}
			b := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*n)
			m = append(m, &codec.Tensor{Name: []string{"fc.w", "fc.b"}[i], DType: codec.F32, Shape: []int64{int64(n)}, Data: bytes.Clone(b)})
		}
		if err := h.Publish(v, m); err != nil {
			t.Fatal(err)
		}
		models[v] = m
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hub.Serve(ctx, ln, h, hub.ServeConfig{Drain: -1}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return h, ln.Addr().String(), models
}

func dial(t *testing.T, addr string) uint64 {
	t.Helper()
	h, code, msg := HubDial(addr, HubAuth{})
	if code != OK {
		t.Fatalf("dial: %d %s", code, msg)
	}
	t.Cleanup(func() { Close(h) })
	return h
}

// fetchGo runs HubFetch into Go memory and returns the tensors, the
// result and the code.
func fetchGo(t *testing.T, h uint64, req string, bases []*codec.Tensor) (map[string][]byte, FetchResult, int32, string) {
	t.Helper()
	got := map[string][]byte{}
	alloc := func(name string, dtype int32, shape []int64, nb int64) unsafe.Pointer {
		b := make([]byte, nb)
		got[strings.Clone(name)] = b
		return unsafe.Pointer(unsafe.SliceData(b))
	}
	ds := make([]Tensor, len(bases))
	for i, b := range bases {
		d, _ := desc(b)
		ds[i] = *d
	}
	var bp *Tensor
	if len(ds) > 0 {
		bp = &ds[0]
	}
	out := make([]byte, 16)
	n, spill, code, msg := HubFetch(h, []byte(req), nil, bp, int32(len(ds)), alloc, unsafe.Pointer(&out[0]), int64(len(out)))
	var r FetchResult
	if n > 0 {
		if spill == 0 {
			t.Fatal("a 16-byte buffer held the result")
		}
		out = make([]byte, n)
		if _, c, m := Take(spill, unsafe.Pointer(&out[0]), n); c != OK {
			t.Fatal(m)
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
	}
	return got, r, code, msg
}

func checkModel(t *testing.T, got map[string][]byte, r FetchResult, m []*codec.Tensor) {
	t.Helper()
	for _, x := range m {
		sum := sha256.Sum256(x.Data)
		if !bytes.Equal(got[x.Name], x.Data) || r.Digests[x.Name] != hex.EncodeToString(sum[:]) {
			t.Errorf("tensor %s differs", x.Name)
		}
	}
}

// TestHubFetch fetches a version whole, then the next as deltas against
// it, then with a base copy that is not the hub's.
func TestHubFetch(t *testing.T) {
	_, addr, models := serveHub(t)
	h := dial(t, addr)
	got, r, code, msg := fetchGo(t, h, `{"version":1}`, nil)
	if code != OK {
		t.Fatal(code, msg)
	}
	checkModel(t, got, r, models[1])
	if r.Version != 1 || r.Full != 2 || r.Deltas != 0 || r.BytesReceived < 100 {
		t.Errorf("%+v", r)
	}
	got, r, code, msg = fetchGo(t, h, `{"version":2,"base":1}`, models[1])
	if code != OK {
		t.Fatal(code, msg)
	}
	checkModel(t, got, r, models[2])
	if r.Deltas != 2 {
		t.Errorf("deltas %d", r.Deltas)
	}
	wrong := []*codec.Tensor{{Name: "fc.w", DType: codec.F32, Shape: []int64{3000}, Data: make([]byte, 12000)}}
	_, r, code, msg = fetchGo(t, h, `{"version":2,"base":1}`, wrong)
	if code != EBASE || r.BaseError == nil || r.BaseError.Base != 1 || len(r.BaseError.Names) != 2 || !strings.Contains(msg, "version 1") {
		t.Errorf("wrong base: %d %q %+v", code, msg, r.BaseError)
	}
	if _, _, code, msg = fetchGo(t, h, `{"version":9}`, nil); code != ENOTFOUND || !strings.Contains(msg, addr) {
		t.Errorf("version 9: %d %q", code, msg)
	}
	if _, _, code, _ = fetchGo(t, h, `{"version":`, nil); code != EARG {
		t.Errorf("bad JSON: %d", code)
	}
	alloc := func(string, int32, []int64, int64) unsafe.Pointer { return nil }
	if _, _, code, _ := HubFetch(h, []byte(`{}`), nil, nil, 0, alloc, nil, 0); code != ECANCELED {
		t.Errorf("NULL alloc: %d", code)
	}
}

// TestHubVersionsAndErrors: versions, an address that does not parse, a
// hub that is not there, a closed handle.
func TestHubVersionsAndErrors(t *testing.T) {
	_, addr, _ := serveHub(t)
	h := dial(t, addr)
	out := make([]byte, 256)
	n, spill, code, msg := HubVersions(h, 10000, unsafe.Pointer(&out[0]), int64(len(out)))
	if code != OK || spill != 0 || !strings.Contains(string(out[:n]), `"version":2`) {
		t.Fatalf("%d %s %s", code, msg, out[:n])
	}
	if _, code, msg := HubDial("grpc://x:1", HubAuth{}); code != EARG || !strings.Contains(msg, "scheme") {
		t.Errorf("%d %s", code, msg)
	}
	if _, code, msg := HubDial("http://x:1", HubAuth{CAFile: "ca.pem"}); code != EARG || !strings.Contains(msg, "plain text") {
		t.Errorf("%d %s", code, msg)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := ln.Addr().String()
	ln.Close()
	g := dial(t, gone)
	if _, _, code, msg := HubVersions(g, 10000, unsafe.Pointer(&out[0]), int64(len(out))); code != EUNAVAILABLE || !strings.Contains(msg, gone+": unreachable") {
		t.Errorf("%d %s", code, msg)
	}
	Close(g)
	if _, _, code, _ := HubVersions(g, 0, nil, 0); code != EHANDLE {
		t.Errorf("closed: %d", code)
	}
}

// TestHubUpload uploads through a Sender and reads the hub's sum.
func TestHubUpload(t *testing.T) {
	hb, addr, _ := serveHub(t)
	h := dial(t, addr)
	s, _, _ := SenderNew(cstr("topk(0.5)"))
	defer Close(s)
	x := []float32{1, -2, 3, -4}
	ct := &codec.Tensor{Name: "g", DType: codec.F32, Shape: []int64{4}, Data: unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 16)}
	d, _ := desc(ct)
	out := make([]byte, 256)
	n, _, code, msg := HubUpload(h, s, []byte(`{"round":7,"weight":2,"peer":"p1"}`), d, 1, unsafe.Pointer(&out[0]), int64(len(out)))
	if code != OK || !strings.Contains(string(out[:n]), `"updates":1`) {
		t.Fatalf("%d %s %s", code, msg, out[:n])
	}
	sum, ok := hb.Sum(7)
	if !ok || len(sum.Tensors) != 1 || sum.Weights["g"] != 2 {
		t.Fatalf("sum %+v", sum)
	}
	got := unsafe.Slice((*float32)(unsafe.Pointer(&sum.Tensors[0].Data[0])), 4)
	if got[0] != 0 || got[1] != 0 || got[2] != 6 || got[3] != -8 { // top 2 of 4, weight 2
		t.Errorf("sum %v", got)
	}
	if p, _, _ := SenderPending(s); p != 0 {
		t.Errorf("%d pending after the acknowledgement", p)
	}
	if _, _, code, _ := HubUpload(h, s, []byte(`{"round":7,"spec":"nope("}`), d, 1, nil, 0); code != ERECIPE {
		t.Errorf("bad spec: %d", code)
	}
	// A second update of the tensor from the peer, and one for a round
	// the hub closed: the hub refuses both (AlreadyExists,
	// FailedPrecondition), and the sender keeps each in its residual.
	if _, _, code, msg := HubUpload(h, s, []byte(`{"round":7,"peer":"p1"}`), d, 1, nil, 0); code != ESTATE || !strings.Contains(msg, "already") {
		t.Errorf("a second update: %d %s, want ESTATE (already counted)", code, msg)
	}
	hb.CloseRound(8)
	if _, _, code, msg := HubUpload(h, s, []byte(`{"round":8,"peer":"p1"}`), d, 1, nil, 0); code != ESTATE || !strings.Contains(msg, "closed") {
		t.Errorf("an update for a closed round: %d %s, want ESTATE (round closed)", code, msg)
	}
	if p, _, _ := SenderPending(s); p != 0 {
		t.Errorf("%d pending after refused uploads", p)
	}
}

// TestHubUploadWithin: an upload with a time chooses its density through
// the connection's tuner: the largest sparse one with the link not yet
// measured, the update whole once loopback is measured; requests that
// cannot choose are EARG.
func TestHubUploadWithin(t *testing.T) {
	_, addr, _ := serveHub(t)
	h := dial(t, addr)
	s, _, _ := SenderNew(cstr("topk(0.01)"))
	defer Close(s)
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%97) - 48
	}
	ct := &codec.Tensor{Name: "g", DType: codec.F32, Shape: []int64{int64(len(x))}, Data: unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))}
	d, _ := desc(ct)
	out := make([]byte, 512)
	for i, want := range []float64{0.3, 1} {
		rq := fmt.Sprintf(`{"round":9,"peer":"p%d","within_ms":60000}`, i)
		n, _, code, msg := HubUpload(h, s, []byte(rq), d, 1, unsafe.Pointer(&out[0]), int64(len(out)))
		if code != OK {
			t.Fatalf("%d %s", code, msg)
		}
		var r UploadResult
		if err := json.Unmarshal(out[:n], &r); err != nil {
			t.Fatal(err)
		}
		if r.Densities["g"] != want || r.Uplink <= 0 {
			t.Fatalf("upload %d: %s, want density %v", i, out[:n], want)
		}
	}
	for _, tc := range []struct {
		sender  uint64
		rq, msg string
	}{
		{0, `{"round":9,"within_ms":100}`, "gradient compressor"},
		{s, `{"round":9,"densities":[0.1]}`, "positive time"},
		{s, `{"round":9,"within_ms":100,"densities":[0]}`, "not in (0, 1]"},
		{s, `{"round":9,"within_ms":100,"spec":"fp16"}`, "no density"},
	} {
		if _, _, code, msg := HubUpload(h, tc.sender, []byte(tc.rq), d, 1, nil, 0); code == OK || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %s, want an error saying %q", tc.rq, code, msg, tc.msg)
		}
	}
}

// TestHubCancel: a call to a peer that never answers, with no deadline,
// ends with ECANCELED when HubCancel is called.
func TestHubCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan []net.Conn)
	go func() {
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				accepted <- conns
				return
			}
			conns = append(conns, c) // held open, silent
		}
	}()
	defer func() {
		ln.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	}()
	h := dial(t, ln.Addr().String())
	done := make(chan int32)
	go func() {
		_, _, code, _ := HubVersions(h, 0, nil, 0)
		done <- code
	}()
	for {
		select {
		case code := <-done:
			if code != ECANCELED {
				t.Fatalf("code %d, want ECANCELED", code)
			}
			if n, _, _ := HubCancel(h); n != 0 {
				t.Errorf("%d calls in flight after the end", n)
			}
			return
		default:
			HubCancel(h) // until the call has started and seen it
			runtime.Gosched()
		}
	}
}
