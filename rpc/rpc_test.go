package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/grpctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer serves the echo service on a bufconn listener and returns a
// client connection to it.
func echoServer(t *testing.T) *grpc.ClientConn {
	t.Helper()
	return grpctest.Serve(t, grpc.NewServer(grpctest.ServerOptions()...))
}

func echo(conn *grpc.ClientConn, compressor string, msg []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var back []byte
	err := conn.Invoke(ctx, grpctest.EchoMethod, &msg, &back, grpctest.CallOptions(compressor)...)
	return back, err
}

func TestRegistered(t *testing.T) {
	if _, ok := encoding.GetCompressor(Name).(*Compressor); !ok {
		t.Fatalf("%q is %T", Name, encoding.GetCompressor(Name))
	}
	if _, ok := encoding.GetCompressor(ZstdName).(*Zstd); !ok {
		t.Fatalf("%q is %T (no other zstd is linked into this test)", ZstdName, encoding.GetCompressor(ZstdName))
	}
}

// TestEcho sends messages of many sizes and kinds through both
// compressors on a real gRPC connection, both ways (the server answers with
// the request's compressor).
func TestEcho(t *testing.T) {
	conn := echoServer(t)
	sparse := make([]byte, 3<<20)
	for i := 0; i < len(sparse); i += 997 {
		sparse[i] = byte(i)
	}
	mixed := append(append([]byte("a protobuf header\x12\x80\x80\x04"), grpctest.Message(2<<20)...), sparse[:1<<20]...)
	msgs := map[string][]byte{
		"empty": {}, "one byte": {7}, "1 KiB": grpctest.Message(1 << 10),
		"floats 5 MiB": grpctest.Message(5 << 20), "sparse 3 MiB": sparse, "mixed": mixed,
		"text": bytes.Repeat([]byte("tensorpress compresses tensor traffic. "), 3000),
	}
	for _, comp := range []string{Name, ZstdName} {
		for name, m := range msgs {
			back, err := echo(conn, comp, m)
			if err != nil || !bytes.Equal(back, m) {
				t.Fatalf("%s, %s: %d of %d bytes back, %v", comp, name, len(back), len(m), err)
			}
		}
	}
}

// TestCompressorRatio checks that messages are coded, not stored: float
// runs by plane coding, zeros by the sparse layout.
func TestCompressorRatio(t *testing.T) {
	c := encoding.GetCompressor(Name)
	for name, tc := range map[string]struct {
		msg []byte
		max float64 // largest wire/raw
	}{
		"floats": {grpctest.Message(4 << 20), 0.95},
		"zeros":  {make([]byte, 1<<20), 0.01},
	} {
		var wire bytes.Buffer
		w, err := c.Compress(&wire)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(tc.msg); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if r := float64(wire.Len()) / float64(len(tc.msg)); r > tc.max {
			t.Errorf("%s: wire/raw %.3f, want at most %.2f", name, r, tc.max)
		}
		rd, err := c.Decompress(&wire)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rd)
		rd.(io.Closer).Close()
		if err != nil || !bytes.Equal(got, tc.msg) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// hugeClaims are messages of about 100 bytes that claim a terabyte once
// decoded.
func hugeClaims(t *testing.T) map[string][]byte {
	t.Helper()
	// A bytes frame stored raw whose header says 2^40 bytes.
	hdr := binary.AppendUvarint([]byte{0}, 1<<40)
	lead := byte(codec.Version<<5) | byte(codec.FrameBytes) | 1<<4
	tp := append([]byte{lead}, binary.AppendUvarint(nil, uint64(len(hdr)))...)
	tp = append(tp, hdr...)
	tp = binary.LittleEndian.AppendUint32(tp, crc32.Checksum(tp, crc32.MakeTable(crc32.Castagnoli)))
	tp = append(tp, make([]byte, 100-len(tp))...)
	// A zstd frame whose header declares 2^40 bytes of content.
	zs := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xc0} // magic, FCS 8 bytes, single segment
	zs = binary.LittleEndian.AppendUint64(zs, 1<<40)
	zs = append(zs, 0x01+8*5, 0x00, 0x00, 'h', 'e', 'l', 'l', 'o') // a raw last block of 5 bytes
	zs = append(zs, make([]byte, 100-len(zs))...)
	return map[string][]byte{Name: tp, ZstdName: zs}
}

// TestHugeClaimRefused decodes a 100-byte message claiming a terabyte:
// refused, with less than 1 MiB allocated.
func TestHugeClaimRefused(t *testing.T) {
	for name, msg := range hugeClaims(t) {
		c := encoding.GetCompressor(name)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rd, err := c.Decompress(bytes.NewReader(msg))
		if err == nil {
			_, err = io.Copy(io.Discard, rd)
			if cl, ok := rd.(io.Closer); ok {
				cl.Close()
			}
		}
		runtime.ReadMemStats(&after)
		if !errors.Is(err, codec.ErrLimit) && !errors.Is(err, zstd.ErrWindowSizeExceeded) && !errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			t.Fatalf("%s: a terabyte claim gave %v, want a limit error", name, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc >= 1<<20 {
			t.Errorf("%s: %d bytes allocated refusing it", name, alloc)
		}
		t.Logf("%s: %v (%d bytes allocated)", name, err, after.TotalAlloc-before.TotalAlloc)
	}
}

// TestZstdInteropMostynb runs a peer whose "zstd" is
// github.com/mostynb/go-grpc-compression's (testdata/mostynb, a process
// of its own): its client against our server, and our client against its
// server, messages of 1 KiB to 64 MiB each way.
func TestZstdInteropMostynb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := filepath.Join(t.TempDir(), "mostynb")
	if out, err := exec.Command(gobin, "build", "-o", bin, "./testdata/mostynb").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sizes := []string{"1024", "65536", "1048576", "16777216", "67108864"}

	// Their client, our server (on loopback).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpctest.ServerOptions()...)
	go s.Serve(ln)
	out, err := exec.Command(bin, append([]string{"client", ln.Addr().String()}, sizes...)...).CombinedOutput()
	s.Stop()
	if err != nil || strings.Count(string(out), "OK ") != len(sizes) {
		t.Fatalf("their client, our server: %v\n%s", err, out)
	}

	// Our client, their server.
	cmd := exec.Command(bin, "server")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		t.Fatalf("their server: %q, %v", line, err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, n := range []int{1 << 10, 1 << 16, 1 << 20, 16 << 20, 64 << 20} {
		m := grpctest.Message(n)
		back, err := echo(conn, ZstdName, m)
		if err != nil || !bytes.Equal(back, m) {
			t.Fatalf("our client, their server, %d bytes: %v", n, err)
		}
	}
}

// TestOptions checks NewCompressor's validation.
func TestOptions(t *testing.T) {
	for name, o := range map[string]Option{
		"empty name": WithName(""),
		"chunk 1":    WithChunkSize(1),
		"nil policy": WithPolicy(nil),
		"nil option": nil,
	} {
		if _, err := NewCompressor(o); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	c, err := NewCompressor(WithName("tp-small"), WithChunkSize(4096), WithLimits(codec.Limits{MaxDecodedSize: 4096}))
	if err != nil {
		t.Fatal(err)
	}
	var wire bytes.Buffer
	w, _ := c.Compress(&wire)
	w.Write(grpctest.Message(100000))
	w.Close()
	rd, _ := c.Decompress(&wire)
	got, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(got, grpctest.Message(100000)) {
		t.Fatalf("4 KiB chunks: %v", err)
	}
	// A receiver whose frames may hold 4 KiB refuses the default's 1 MiB.
	wire.Reset()
	w, _ = encoding.GetCompressor(Name).Compress(&wire)
	w.Write(grpctest.Message(1 << 20))
	w.Close()
	rd, _ = c.Decompress(&wire)
	if _, err := io.ReadAll(rd); !errors.Is(err, codec.ErrLimit) {
		t.Fatalf("a 1 MiB frame at a 4 KiB limit: %v", err)
	}
}

// TestTunerConcurrent: a Compressor whose policy is an autotune.Tuner
// serves concurrent messages (run with -race): each comes back bit for
// bit, and the Tuner saw every frame under a number of its own.
func TestTunerConcurrent(t *testing.T) {
	tu, err := autotune.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCompressor(WithName("tensorpress-test-tuned"), WithPolicy(tu), WithChunkSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 4)
	for g := range 4 {
		go func() {
			msg := make([]byte, 300<<10)
			for i := 0; i < len(msg); i += 4 {
				binary.LittleEndian.PutUint32(msg[i:], uint32(g*977+i)&0x3c00ffff)
			}
			for range 5 {
				var buf bytes.Buffer
				w, _ := c.Compress(&buf)
				w.Write(msg)
				if err := w.Close(); err != nil {
					errc <- err
					return
				}
				r, _ := c.Decompress(&buf)
				got, err := io.ReadAll(r)
				r.(io.Closer).Close()
				if err != nil || !bytes.Equal(got, msg) {
					errc <- fmt.Errorf("message of %d bytes: %d back, %v", len(msg), len(got), err)
					return
				}
			}
			errc <- nil
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := c.seq.Load(); n < 4*5*5 {
		t.Errorf("%d frame numbers for at least 100 frames", n)
	}
}

// TestCompressorRefusesSlowStages: a message whose frame decodes through
// floatcm (a tensor frame of zeros: a few KB for each MiB, at some MB/s)
// is refused with ErrLimit by a Compressor's default limits, from its
// header; with limits that allow it, the frame is decoded and then
// refused for what it is (a message's frames hold bytes).
func TestCompressorRefusesSlowStages(t *testing.T) {
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	frame, err := enc.AppendTensor(nil, codec.FromFloat32("w", make([]float32, 1<<16), 1<<16), codec.MustParseRecipe("floatcm"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(c *Compressor) error {
		rd, err := c.Decompress(bytes.NewReader(frame))
		if err != nil {
			return err
		}
		defer rd.(io.Closer).Close()
		_, err = io.ReadAll(rd)
		return err
	}
	def, _ := NewCompressor(WithName("slow-default"))
	if err := read(def); !errors.Is(err, codec.ErrLimit) {
		t.Errorf("default limits: %v, want ErrLimit", err)
	}
	raised, _ := NewCompressor(WithName("slow-raised"), WithLimits(codec.Limits{MaxSlowDecoded: 1 << 20}))
	if err := read(raised); !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), "tensor frame") {
		t.Errorf("slow bytes allowed: %v, want the tensor frame refused", err)
	}
}
