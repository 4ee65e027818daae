package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/tensorfile"
	"github.com/tensorpress/tensorpress/testvectors"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(fanoutEnv); mode != "" {
		runFanoutServer(mode) // a server process of BenchmarkFanOut
	}
	if args := os.Getenv(memoryEnv); args != "" {
		runMemoryProcess(strings.Split(args, "\x1f")) // a process of BenchmarkMemory2GiB
	}
	goleak.VerifyTestMain(m)
}

// model returns n tensors: every fourth one 64-192 KiB of weights, the
// rest small (biases, norms), named in order.
func model(n int, seed uint64) []*codec.Tensor {
	var ts []*codec.Tensor
	for i := range n {
		elems := 64 + i%7*100
		if i%4 == 0 {
			elems = (1 + i%3) << 14
		}
		t := testvectors.Normal(fmt.Sprintf("layer%03d.weight", i), elems, 0.02, seed+uint64(i))
		ts = append(ts, t)
	}
	return ts
}

// serve runs h on a bufconn and returns a client and the RPC count.
func serve(t *testing.T, h *Hub) (hubpb.HubClient, *atomic.Int64) {
	t.Helper()
	var rpcs atomic.Int64
	s := grpc.NewServer(countRPCs(&rpcs)...)
	hubpb.RegisterHubServer(s, NewServer(h))
	return hubpb.NewHubClient(grpctest.Serve(t, s)), &rpcs
}

// countRPCs are server options that count the RPCs served in n.
func countRPCs(n *atomic.Int64) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			n.Add(1)
			return h(srv, ss)
		}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			n.Add(1)
			return h(ctx, req)
		}),
	}
}

// openFetch opens a fetch of the newest version by hand, granting credit
// chunks, for tests that pace the reading themselves.
func openFetch(t *testing.T, c hubpb.HubClient, credit uint32) hubpb.Hub_FetchClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := c.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: &hubpb.FetchRequest{Credit: credit}}}); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestPublishAndVersions(t *testing.T) {
	h, err := New(WithRetention(2))
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 3; v++ {
		if err := h.Publish(v, model(5, v)); err != nil {
			t.Fatal(err)
		}
	}
	vs := h.Versions()
	if len(vs) != 2 || vs[0].Version != 3 || vs[1].Version != 2 || vs[0].Tensors != 5 {
		t.Fatalf("versions %+v", vs)
	}
	for name, bad := range map[string]func() error{
		"version 0":  func() error { return h.Publish(0, model(1, 0)) },
		"again":      func() error { return h.Publish(3, model(1, 0)) },
		"nil tensor": func() error { return h.Publish(9, []*codec.Tensor{nil}) },
		"twice": func() error {
			m := model(1, 0)
			return h.Publish(9, append(m, m[0]))
		},
		"chunk": func() error {
			c := model(1, 0)[0]
			c.Offset, c.Data = 4, c.Data[16:]
			return h.Publish(9, []*codec.Tensor{c})
		},
	} {
		if err := bad(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(WithRetention(0)); err == nil {
		t.Error("retention 0 accepted")
	}
}

// TestBatchedFetch: 8 clients fetch a model of 160 tensors at once, one
// RPC each; every tensor arrives bit for bit, and each chunk is encoded
// once for all of them.
func TestBatchedFetch(t *testing.T) {
	h, err := New(WithChunkSize(32 << 10))
	if err != nil {
		t.Fatal(err)
	}
	m := model(160, 1)
	if err := h.Publish(7, m); err != nil {
		t.Fatal(err)
	}
	c, rpcs := serve(t, h)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := 0
			res, err := Fetch(context.Background(), c, Request{}, func(t *codec.Tensor) error {
				if t.Name != m[i].Name || !bytes.Equal(t.Data, m[i].Data) || t.Version != 7 {
					return fmt.Errorf("tensor %d (%q) differs", i, m[i].Name)
				}
				i++
				return nil
			})
			if err == nil && (res.Version != 7 || i != len(m) || res.Full != len(m)) {
				err = fmt.Errorf("%+v, %d tensors", res, i)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := h.Stats()
	items := int64(len(h.plan(m)))
	if rpcs.Load() != 8 || st.Fetches != 8 || st.Encodes != items || st.ChunksSent != 8*items {
		t.Fatalf("%d RPCs, stats %+v, %d chunks in the plan", rpcs.Load(), st, items)
	}
}

// TestFetchSelect fetches by glob and by tags, and refuses what is wrong
// with the right status.
func TestFetchSelect(t *testing.T) {
	h, _ := New(WithChunkSize(64 << 10))
	m := model(12, 2)
	m[3].Tags.Extra = []codec.Tag{{Key: "role", Value: "head"}}
	h.Publish(1, m)
	c, _ := serve(t, h)
	var names []string
	collect := func(t *codec.Tensor) error { names = append(names, t.Name); return nil }
	if _, err := Fetch(context.Background(), c, Request{Specs: []Spec{{Names: []string{"layer00[12].*"}}, {Tags: map[string]string{"role": "head"}}}}, collect); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != "[layer001.weight layer002.weight layer003.weight]" {
		t.Fatalf("selected %v", names)
	}
	for name, tc := range map[string]struct {
		req  Request
		code codes.Code
	}{
		"unknown version": {Request{Version: 99}, codes.NotFound},
		"no match":        {Request{Specs: []Spec{{Names: []string{"nothing*"}}}}, codes.NotFound},
		"bad pattern":     {Request{Specs: []Spec{{Names: []string{"[z-a"}}}}, codes.InvalidArgument},
	} {
		_, err := Fetch(context.Background(), c, tc.req, collect)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", name, err, tc.code)
		}
	}
	// A stream that opens with credit instead of a request.
	st, err := c.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: 3}})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("credit first: %v", err)
	}
}

// TestFetchPullBased: a client that stops reading holds the hub at its
// credit; the hub sends nothing more until it reads again. (The hub says
// when it waits for credit: testHookNoCredit.)
func TestFetchPullBased(t *testing.T) {
	waiting := make(chan struct{}, 16)
	testHookNoCredit = func() {
		select {
		case waiting <- struct{}{}:
		default: // nobody waits for this one
		}
	}
	t.Cleanup(func() { testHookNoCredit = nil }) // after the server stops
	h, _ := New(WithChunkSize(4 << 10))
	h.Publish(1, model(8, 3)) // 2 large tensors in 4 KiB chunks: many chunks
	c, _ := serve(t, h)
	st := openFetch(t, c, 2)
	<-waiting // the client reads nothing
	if n := h.Stats().ChunksSent; n != 2 {
		t.Fatalf("%d chunks sent on a credit of 2", n)
	}
	st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Credit{Credit: 3}})
	for range 5 {
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	<-waiting
	if n := h.Stats().ChunksSent; n != 5 {
		t.Fatalf("%d chunks sent on a credit of 5", n)
	}
}

// evolve returns m after a training step: every element of the tensors
// picked by change moved a little, the others untouched.
func evolve(m []*codec.Tensor, seed uint64, change func(i int) bool) []*codec.Tensor {
	out := make([]*codec.Tensor, len(m))
	for i, t := range m {
		c := *t
		c.Data = append([]byte(nil), t.Data...)
		if change(i) {
			d := testvectors.Normal("d", len(t.Data)/4, 0.0005, seed+uint64(i))
			v, _ := codec.View[float32](&c)
			dv, _ := codec.View[float32](d)
			for j := range v {
				v[j] += dv[j]
			}
		}
		out[i] = &c
	}
	return out
}

// TestDeltas fetches version 2 against version 1: the tensors come as
// deltas, decoded bit for bit; unchanged ones cost a few bytes; a base
// the hub no longer keeps gives full copies and a reason.
func TestDeltas(t *testing.T) {
	h, _ := New(WithRetention(2))
	v1 := model(40, 5)
	v2 := evolve(v1, 100, func(i int) bool { return i%10 == 0 }) // 90% unchanged
	h.Publish(1, v1)
	h.Publish(2, v2)
	c, _ := serve(t, h)
	base := map[string]*codec.Tensor{}
	for _, t := range v1 {
		base[t.Name] = t
	}
	wire := func(req Request) (Result, int64) {
		before := h.Stats()
		var got []*codec.Tensor
		res, err := Fetch(context.Background(), c, req, func(t *codec.Tensor) error { got = append(got, t); return nil })
		if err != nil {
			t.Fatal(err)
		}
		for i := range v2 {
			if !bytes.Equal(got[i].Data, v2[i].Data) || got[i].Base != 0 {
				t.Fatalf("%q differs", v2[i].Name)
			}
		}
		_ = before
		var n int64
		for _, it := range h.plan(v2) {
			b := uint64(0)
			if req.Base != 0 {
				b = req.Base
			}
			var bv *version
			if b != 0 {
				bv, _ = h.get(b)
			}
			cur, _ := h.get(2)
			f, _ := h.frames(nil, cur, &it, bv, false, DeltaCoding)
			n += int64(len(f))
		}
		return res, n
	}
	full, fullBytes := wire(Request{Version: 2})
	delta, deltaBytes := wire(Request{Version: 2, Base: 1, BaseTensor: func(n string) *codec.Tensor { return base[n] }})
	if full.Full != 40 || delta.Deltas != 40 || delta.BaseNote != "" {
		t.Fatalf("full %+v, delta %+v", full, delta)
	}
	// The changed tensors (every tenth) hold a quarter of the bytes here.
	t.Logf("90%% of the tensors unchanged: deltas %d bytes, full %d bytes (%.1f%%)", deltaBytes, fullBytes, 100*float64(deltaBytes)/float64(fullBytes))
	if deltaBytes >= fullBytes/2 {
		t.Errorf("deltas %d bytes, full copies %d", deltaBytes, fullBytes)
	}
	// Nothing changed: a few bytes a tensor.
	h2, _ := New()
	h2.Publish(1, v1)
	h2.Publish(2, evolve(v1, 0, func(int) bool { return false }))
	b1, _ := h2.get(1)
	var same int64
	for _, it := range h2.plan(v1) {
		cur2, _ := h2.get(2)
		f, err := h2.frames(nil, cur2, &it, b1, false, DeltaCoding)
		if err != nil {
			t.Fatal(err)
		}
		same += int64(len(f))
	}
	t.Logf("nothing changed: %d bytes for %d tensors", same, len(v1))
	if same > int64(len(v1))*64 {
		t.Errorf("an unchanged model costs %d bytes as deltas", same)
	}
	// The client lacks its base copy of a tensor: an error, not a wrong tensor.
	_, err := Fetch(context.Background(), c, Request{Version: 2, Base: 1, BaseTensor: func(string) *codec.Tensor { return nil }},
		func(*codec.Tensor) error { return nil })
	if err == nil {
		t.Fatal("a delta applied without its base")
	}
	// A base no longer kept: full copies, and the trailer says why.
	h.Publish(3, evolve(v2, 200, func(int) bool { return true }))
	res, err := Fetch(context.Background(), c, Request{Version: 3, Base: 1, BaseTensor: func(n string) *codec.Tensor { return base[n] }},
		func(*codec.Tensor) error { return nil })
	if err != nil || res.Full != 40 || res.BaseNote == "" {
		t.Fatalf("base gone: %+v, %v", res, err)
	}
}

// TestDiffRoundTrip: undiff(diff) gives every element back, bit for bit,
// at every width, on random bits (sign flips, NaNs, infinities included).
func TestDiffRoundTrip(t *testing.T) {
	for _, esz := range []int{1, 2, 4, 8, 3} {
		n := esz * 1000
		cur, base := make([]byte, n), make([]byte, n)
		for i := range cur {
			cur[i], base[i] = byte(i*7919>>3), byte(i*104729>>5)
		}
		copy(cur[:esz*10], base[:esz*10]) // some elements unchanged
		d := make([]byte, n)
		if !diff(d, cur, base, esz) {
			t.Fatalf("width %d: no change found", esz)
		}
		for i := 0; i < esz*10; i++ {
			if d[i] != 0 {
				t.Fatalf("width %d: unchanged element %d has delta bits", esz, i/esz)
			}
		}
		undiff(d, base, esz)
		if !bytes.Equal(d, cur) {
			t.Fatalf("width %d: round trip differs", esz)
		}
		if diff(d, base, base, esz) {
			t.Fatalf("width %d: a tensor against itself changed", esz)
		}
	}
}

// TestWireCodec: a chunk written by the hub's codec reads back with plain
// protobuf, its frames referenced, not copied.
func TestWireCodec(t *testing.T) {
	frames := bytes.Repeat([]byte("frames"), 2000)
	in := &hubpb.FetchChunk{Seq: 7, Version: 3, Frames: frames, Last: true,
		Digests: []*hubpb.TensorDigest{{Name: "w", Sha256: make([]byte, 32)}}}
	out, err := wireCodec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if d := out[1].ReadOnlyData(); &d[0] != &frames[0] {
		t.Error("the frames were copied")
	}
	var back hubpb.FetchChunk
	if err := protoCodec().Unmarshal(out, &back); err != nil || !proto.Equal(in, &back) {
		t.Fatalf("read back: %v", err)
	}
	small := &hubpb.FetchChunk{Seq: 1, Frames: []byte("x")}
	out, err = wireCodec{}.Marshal(small)
	if err != nil {
		t.Fatal(err)
	}
	if err := (wireCodec{}).Unmarshal(out, &back); err != nil || !proto.Equal(small, &back) {
		t.Fatalf("small chunk: %v", err)
	}
}

// TestPublishSafetensorsFetchChunks publishes a model from a safetensors
// file without holding it, and fetches it chunk by chunk: every chunk in
// order, the tensors bit for bit, digests checked as they complete.
func TestPublishSafetensorsFetchChunks(t *testing.T) {
	m := model(20, 11)
	var file bytes.Buffer
	if err := tensorfile.WriteSafetensors(&file, m, nil); err != nil {
		t.Fatal(err)
	}
	st, err := tensorfile.OpenSafetensors(bytes.NewReader(file.Bytes()), int64(file.Len()))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := New(WithChunkSize(16<<10), WithCacheBytes(64<<10))
	if err := h.PublishSafetensors(5, st); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, h)
	want := map[string][]byte{}
	for _, x := range m {
		want[x.Name] = x.Data
	}
	got := map[string][]byte{}
	chunks := 0
	res, err := FetchChunks(context.Background(), c, Request{Credit: 2}, func(x *codec.Tensor) error {
		if int64(len(got[x.Name])) != x.Offset*int64(x.DType.Size()) {
			return fmt.Errorf("%q: chunk at element %d after %d bytes", x.Name, x.Offset, len(got[x.Name]))
		}
		got[x.Name] = append(got[x.Name], x.Data...)
		chunks++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Fatalf("%q differs", name)
		}
	}
	if res.Version != 5 || res.Full != len(m) || chunks <= len(m) {
		t.Fatalf("%+v, %d chunks", res, chunks)
	}
}

// TestPublishNpy publishes two versions from .npy files without holding
// them and fetches the second in full and as deltas against the first:
// bit for bit both ways. Files np.load would refuse, or whose length
// disagrees with the header, are refused.
func TestPublishNpy(t *testing.T) {
	h, _ := New(WithChunkSize(16<<10), WithCacheBytes(64<<10))
	m1 := model(12, 3)
	m2 := model(12, 4)
	npy := func(m []*codec.Tensor) []NpyFile {
		var fs []NpyFile
		for _, x := range m {
			var b bytes.Buffer
			if err := tensorfile.WriteNpy(&b, x); err != nil {
				t.Fatal(err)
			}
			fs = append(fs, NpyFile{Name: x.Name, R: bytes.NewReader(b.Bytes()), Size: int64(b.Len())})
		}
		return fs
	}
	if err := h.PublishNpy(1, npy(m1)); err != nil {
		t.Fatal(err)
	}
	if err := h.PublishNpy(2, npy(m2)); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, h)
	for _, base := range []uint64{0, 1} {
		held := func(name string) *codec.Tensor {
			for _, x := range m1 {
				if x.Name == name {
					return x
				}
			}
			return nil
		}
		got := map[string][]byte{}
		res, err := Fetch(context.Background(), c, Request{Version: 2, Base: base, BaseTensor: held}, func(x *codec.Tensor) error {
			got[x.Name] = x.Data
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range m2 {
			if !bytes.Equal(got[x.Name], x.Data) {
				t.Fatalf("base %d: %q differs", base, x.Name)
			}
		}
		if base == 1 && res.Deltas == 0 {
			t.Fatalf("base 1: %+v: no deltas", res)
		}
	}

	good := npy(m1[:1])[0]
	buf := make([]byte, good.Size)
	good.R.ReadAt(buf, 0)
	fortran := bytes.Replace(buf, []byte("'fortran_order': False"), []byte("'fortran_order': True "), 1)
	for _, tc := range []struct {
		name string
		f    NpyFile
		want error
	}{
		{"truncated", NpyFile{Name: "x", R: bytes.NewReader(buf[:len(buf)-1]), Size: good.Size - 1}, codec.ErrCorrupt},
		{"longer", NpyFile{Name: "x", R: bytes.NewReader(append(buf, 0)), Size: good.Size + 1}, codec.ErrCorrupt},
		{"empty", NpyFile{Name: "x", R: bytes.NewReader(nil)}, codec.ErrCorrupt},
		{"fortran", NpyFile{Name: "x", R: bytes.NewReader(fortran), Size: good.Size}, codec.ErrUnsupported},
	} {
		if err := h.PublishNpy(9, []NpyFile{tc.f}); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := h.PublishNpy(9, []NpyFile{good, good}); err == nil {
		t.Error("a name twice was published")
	}
}
