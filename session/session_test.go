package session

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gpu"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/testvectors"
	"github.com/tensorpress/tensorpress/transport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var zstd1 = codec.MustParseRecipe("*:zstd(1)")

// updateProfile sends tensors named *.grad as TopK(0.05) updates with
// error feedback and keeps everything else lossless.
func updateProfile(t *testing.T) *profile.Profile {
	t.Helper()
	p, err := profile.Load([]byte(`version: 1
rules:
  - match: {name: ["*.grad"], dtype: f32}
    recipes: ["*:zstd(1)"]
    gradient: ["topk(0.05)"]
  - match: {}
    require_lossless: true
    recipes: ["*:zstd(1)"]
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// relay forwards bytes between two connections until it is told to drop
// them (the network loses what is in flight), and can be cut.
type relay struct {
	mu   sync.Mutex
	drop bool
	a, b net.Conn // the ends the relay holds
	done sync.WaitGroup
}

// newRelay returns the client's and the server's ends of a connection
// that passes through a relay.
func newRelay() (client, server net.Conn, r *relay) {
	client, ra := net.Pipe()
	rb, server := net.Pipe()
	r = &relay{a: ra, b: rb}
	r.done.Add(2)
	go r.copy(rb, ra)
	go r.copy(ra, rb)
	return client, server, r
}

func (r *relay) copy(dst, src net.Conn) {
	defer r.done.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		r.mu.Lock()
		drop := r.drop
		r.mu.Unlock()
		if n > 0 && !drop {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// blackhole makes the relay swallow everything from now on.
func (r *relay) blackhole() {
	r.mu.Lock()
	r.drop = true
	r.mu.Unlock()
}

// cut closes both of the relay's ends: each side's connection fails.
func (r *relay) cut() {
	r.a.Close()
	r.b.Close()
	r.done.Wait()
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

func gradTensor(name string, seed uint64) *codec.Tensor {
	g := testvectors.Normal(name, 4096, 0.01, seed)
	g.Shape = []int64{64, 64}
	return g
}

func f32s(t *testing.T, x *codec.Tensor) []float32 {
	t.Helper()
	v, err := codec.View[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestUpdateSurvivesCutConnection kills the connection after WriteTensor
// sent a gradient update and before it was delivered: nothing of the
// update is lost. The residual holds all of it, and after a reconnect of
// the same peer ID the next update carries it: what the server received
// plus the residual left is exactly the sum of both gradients.
func TestUpdateSurvivesCutConnection(t *testing.T) {
	prof := updateProfile(t)
	peers := gradient.NewPeers()
	g1, g2 := gradTensor("layer.grad", 1), gradTensor("layer.grad", 2)

	// Connection 1: the update is written, then lost in the network.
	cc, sc, rl := newRelay()
	client, err := Wrap(cc, WithProfile(prof), WithPeers(peers), WithConn(transport.WithPeerID("client")))
	if err != nil {
		t.Fatal(err)
	}
	server, err := transport.Wrap(sc, transport.WithPeerID("server"))
	if err != nil {
		t.Fatal(err)
	}
	warm := &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{4}, Data: make([]byte, 16)}
	errc := make(chan error, 1)
	go func() { errc <- client.WriteTensor(warm) }()
	if got, err := server.ReadTensor(); err != nil || got.Name != "w" || !got.Tags.Lossless {
		t.Fatalf("warm-up tensor: %v, %v", got, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	rl.blackhole()
	if err := client.WriteTensor(g1); err != nil {
		t.Fatalf("WriteTensor of the update: %v", err) // written: the relay took it
	}
	rl.cut()
	client.Close()
	server.Close()

	mem := peers.Memory("server")
	if mem == nil || mem.Get("layer.grad") == nil {
		t.Fatal("no state for the peer's tensor")
	}
	if res := mem.Get("layer.grad").Residual(); !slices.EqualFunc(res, f32s(t, g1), sameBits) {
		t.Fatal("after the lost update the residual is not the whole gradient")
	}

	// Connection 2, the same peer ID: the next update carries both.
	a, b := net.Pipe()
	client, err = Wrap(a, WithProfile(prof), WithPeers(peers), WithConn(transport.WithPeerID("client")))
	if err != nil {
		t.Fatal(err)
	}
	server, err = transport.Wrap(b, transport.WithPeerID("server"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		err := client.WriteTensor(g2)
		if err == nil {
			err = client.Close()
		}
		errc <- err
	}()
	got, err := server.ReadTensor()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.ReadTensor(); err != io.EOF {
		t.Fatalf("after the update: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	server.Close()
	recv := f32s(t, got)
	res := peers.Memory("server").Get("layer.grad").Residual()
	v1, v2 := f32s(t, g1), f32s(t, g2)
	kept := 0
	for i := range recv {
		if recv[i] != 0 {
			kept++
		}
		if want := v1[i] + v2[i]; recv[i]+res[i] != want || recv[i] != 0 && res[i] != 0 {
			t.Fatalf("element %d: received %g + residual %g, want %g", i, recv[i], res[i], want)
		}
	}
	if want := int(math.Ceil(0.05 * float64(len(recv)))); kept < want*9/10 || kept > want {
		t.Fatalf("%d elements received, want about %d", kept, want)
	}
	if st := peers.Memory("server").Get("layer.grad"); st.Step() != 1 {
		t.Fatalf("%d updates committed, want 1 (the lost one was not)", st.Step())
	}
}

// TestUpdatesCommitOnAcknowledgement sends several updates of the same
// tensors: each is committed once the peer acknowledged its frame, the
// next waits for that, and what the server received plus the residual is
// the sum of all gradients.
func TestUpdatesCommitOnAcknowledgement(t *testing.T) {
	prof := updateProfile(t)
	peers := gradient.NewPeers()
	a, b := net.Pipe()
	client, err := Wrap(a, WithProfile(prof), WithPeers(peers), WithConn(transport.WithPeerID("client"), transport.WithFeedbackInterval(time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	server, err := transport.Wrap(b, transport.WithPeerID("server"), transport.WithFeedbackInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 5
	names := []string{"a.grad", "b.grad"}
	sum := map[string][]float32{}
	errc := make(chan error, 1)
	go func() {
		for r := range rounds {
			for i, n := range names {
				g := gradTensor(n, uint64(10*r+i))
				v := f32s(t, g)
				if sum[n] == nil {
					sum[n] = make([]float32, len(v))
				}
				for j := range v {
					sum[n][j] += v[j]
				}
				if err := client.WriteTensor(g); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- client.CloseWrite()
	}()
	got := map[string][]float32{}
	for {
		x, err := server.ReadTensor()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		v := f32s(t, x)
		if got[x.Name] == nil {
			got[x.Name] = make([]float32, len(v))
		}
		for j := range v {
			got[x.Name][j] += v[j]
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	server.Close()
	client.Close()
	// Every update was acknowledged and committed: the residuals are
	// what was not sent.
	for _, n := range names {
		st := peers.Memory("server").Get(n)
		if st == nil || st.Step() != rounds || len(got[n]) == 0 {
			t.Fatalf("%s: state %v, %d elements received", n, st, len(got[n]))
		}
		res := st.Residual()
		for j := range got[n] {
			// The same sums in float32, in other orders: equal to rounding.
			if d := math.Abs(float64(got[n][j] + res[j] - sum[n][j])); d > 1e-6 {
				t.Fatalf("%s[%d]: received %g + residual %g, sent %g", n, j, got[n][j], res[j], sum[n][j])
			}
		}
	}
}

// TestUpdateWaitHonoursWriteDeadline: the next update of a tensor waits
// for the peer to acknowledge the previous one; a peer that sends no
// feedback holds it until the write deadline.
func TestUpdateWaitHonoursWriteDeadline(t *testing.T) {
	a, b := net.Pipe()
	client, err := Wrap(a, WithProfile(updateProfile(t)))
	if err != nil {
		t.Fatal(err)
	}
	server, err := transport.Wrap(b, transport.WithFeedbackInterval(-1)) // never acknowledges
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := server.ReadTensor(); err != nil {
				return
			}
		}
	}()
	if err := client.WriteTensor(gradTensor("a.grad", 1)); err != nil {
		t.Fatal(err)
	}
	if err := client.WriteTensor(gradTensor("b.grad", 2)); err != nil {
		t.Fatal(err) // another tensor does not wait
	}
	client.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if err := client.WriteTensor(gradTensor("a.grad", 3)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second update of a tensor without acknowledgement: %v", err)
	}
	client.SetWriteDeadline(time.Time{})
	client.Close()
	server.Close()
}

// TestUpdateNeedsPeerStages: a peer that does not decode a stage of the
// update's recipe (huff0 in topk's default tail) gets no frame it cannot
// decode; the update stays in the residual.
func TestUpdateNeedsPeerStages(t *testing.T) {
	huff0, _, ok := codec.LookupName("huff0")
	if !ok {
		t.Fatal("huff0 not registered")
	}
	var stages []codec.StageID
	for _, s := range codec.Stages() {
		if s.ID != huff0.ID {
			stages = append(stages, s.ID)
		}
	}
	peers := gradient.NewPeers()
	a, b := net.Pipe()
	client, err := Wrap(a, WithProfile(updateProfile(t)), WithPeers(peers), WithConn(transport.WithCloseTimeout(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, b) // the peer reads what comes
	if _, err := b.Write(codec.AppendHello(nil, &codec.Hello{MinVersion: 1, MaxVersion: 1, Peer: "old", Stages: stages})); err != nil {
		t.Fatal(err)
	}
	g := gradTensor("x.grad", 4)
	if err := client.WriteTensor(g); !errors.Is(err, codec.ErrUnsupported) || !strings.Contains(err.Error(), "huff0") {
		t.Fatalf("update for a peer without huff0: %v", err)
	}
	client.Close()
	b.Close()
	st := peers.Memory("old").Get("x.grad")
	if st == nil || st.Step() != 0 || !slices.EqualFunc(st.Residual(), f32s(t, g), sameBits) {
		t.Fatal("the update that was not sent is not all in the residual")
	}
}

// TestTensorsWithDecoders sends tensors of many chunks, some as updates,
// to a receiver that decodes with several goroutines.
func TestTensorsWithDecoders(t *testing.T) {
	a, b := net.Pipe()
	client, err := Wrap(a, WithProfile(updateProfile(t)), WithConn(transport.WithCodec(codec.WithChunkSize(4096)), transport.WithRecipe(zstd1)))
	if err != nil {
		t.Fatal(err)
	}
	server, err := transport.Wrap(b, transport.WithDecoderConcurrency(3))
	if err != nil {
		t.Fatal(err)
	}
	var sent []*codec.Tensor
	for i := range 6 {
		x := testvectors.Normal("layer", 10000+i*777, 0.02, uint64(i))
		sent = append(sent, x)
	}
	errc := make(chan error, 1)
	go func() {
		for _, x := range sent {
			if err := client.WriteTensor(x); err != nil {
				errc <- err
				return
			}
		}
		errc <- client.CloseWrite()
	}()
	for i := range sent {
		got, err := server.ReadTensor()
		if err != nil || !bytes.Equal(got.Data, sent[i].Data) {
			t.Fatalf("tensor %d: %v", i, err)
		}
	}
	if _, err := server.ReadTensor(); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	client.Close()
	server.Close()
	if _, err := transport.Wrap(b, transport.WithDecoderConcurrency(0)); err == nil {
		t.Fatal("concurrency 0 accepted")
	}
}

// TestProfileDevice: a profile that says device: cuda fails an update
// where no GPU opens, with the reason; device: auto sends it on the CPU.
func TestProfileDevice(t *testing.T) {
	if gpu.Available() == nil {
		t.Skip("a GPU is here: the device tests of package gpu cover it")
	}
	for _, dev := range []string{"auto", "cuda"} {
		p, err := profile.Load([]byte("version: 1\ndevice: " + dev + `
rules:
  - match: {name: ["*.grad"], dtype: f32}
    recipes: ["*:zstd(1)"]
    gradient: ["topk(0.05)"]
`))
		if err != nil {
			t.Fatal(err)
		}
		a, b := net.Pipe()
		client, err := Wrap(a, WithProfile(p))
		if err != nil {
			t.Fatal(err)
		}
		server, err := transport.Wrap(b)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			err := client.WriteTensor(gradTensor("w.grad", 1))
			client.CloseWrite()
			errc <- err
		}()
		var n int
		for {
			_, err := server.ReadTensor()
			if err != nil {
				break
			}
			n++
		}
		err = <-errc
		switch dev {
		case "auto":
			if err != nil || n != 1 {
				t.Errorf("auto: %v, %d tensors", err, n)
			}
		case "cuda":
			if !errors.Is(err, gpu.ErrNoDevice) || !strings.Contains(err.Error(), "device: cuda") {
				t.Errorf("cuda: %v", err)
			}
		}
		server.Close()
		client.Close()
	}
}

// TestWrapChecksProfile: a profile whose gradient compressor does not
// parse is refused by Wrap, with its place in the profile.
func TestWrapChecksProfile(t *testing.T) {
	p, err := profile.Load([]byte("version: 1\nrules:\n  - gradient: [\"topk(7)\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if s, err := Wrap(a, WithProfile(p)); !errors.Is(err, profile.ErrInvalid) || !errors.Is(err, codec.ErrRecipe) || !strings.Contains(err.Error(), "line 3, column 16") {
		t.Fatalf("Wrap: %v, %v", s, err)
	}
	for _, opt := range []Option{WithProfile(nil), WithPeers(nil), WithUpdateDeadline(-time.Second)} {
		if _, err := Wrap(a, opt); err == nil {
			t.Error("a bad option accepted")
		}
	}
}

// TestCloseEndsWaitingUpdate: an update waiting for the peer to
// acknowledge the tensor's previous one returns when the Session closes,
// and the Session's goroutines end.
func TestCloseEndsWaitingUpdate(t *testing.T) {
	a, b := net.Pipe()
	client, err := Wrap(a, WithProfile(updateProfile(t)), WithConn(transport.WithCloseTimeout(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	server, err := transport.Wrap(b, transport.WithFeedbackInterval(-1)) // never reports frames
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := server.ReadTensor(); err != nil {
				return
			}
		}
	}()
	if err := client.WriteTensor(gradTensor("a.grad", 1)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- client.WriteTensor(gradTensor("a.grad", 2)) }()
	client.Close()
	if err := <-errc; err == nil {
		t.Fatal("an update after Close was sent")
	}
	server.Close()
}
