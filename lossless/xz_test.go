package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// xz is slow (under 1 MB/s on floats): test inputs stay small.
func xzTestPayloads() []zstdTestPayload {
	return []zstdTestPayload{
		{"empty", []byte{}},
		{"one", []byte{7}},
		{"zeros-100", make([]byte, 100)},
		{"zeros-100k", make([]byte, 100<<10)},
		{"text", []byte(strings.Repeat("xz keeps the archive small and takes its time. ", 700))},
		{"random-20k", zstdTestRandom(20<<10, 11)},
		{"floats-64k", zstdTestFloats(16<<10, 12)},
		{"floats-shuffled-64k", zstdTestShuffle4(zstdTestFloats(16<<10, 13))},
	}
}

func xzTestEncode(t testing.TB, data []byte, dictLog int) []byte {
	t.Helper()
	op, err := xzStage.Load([]byte{byte(dictLog)})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := op.Encode(&codec.Ctx{Arena: &codec.Arena{}}, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Len: len(data)}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return outs[0].Data
}

func TestXzRecipeText(t *testing.T) {
	for in, want := range map[string]string{
		"xz":          "xz(dict=23)",
		"xz(dict=20)": "xz(dict=20)",
		"xz(17)":      "xz(dict=17)",
		"xz(dict=16)": "xz(dict=16)",
		"xz(30)":      "xz(dict=30)",
	} {
		r, err := codec.ParseRecipe(in)
		if err != nil {
			t.Fatalf("ParseRecipe(%q): %v", in, err)
		}
		if got := r.String(); got != want {
			t.Errorf("ParseRecipe(%q).String() = %q, want %q", in, got, want)
		}
		if r2, err := codec.ParseRecipe(want); err != nil || r2.String() != want {
			t.Errorf("reparse %q: %v, %v", want, r2, err)
		}
		op := r.Steps[0].Ops[0]
		if loaded, err := xzStage.Load(op.AppendParams(nil)); err != nil || loaded != op {
			t.Errorf("Load(AppendParams(%s)) = %v, %v", op, loaded, err)
		}
	}
	for _, bad := range []string{"xz(15)", "xz(12)", "xz(31)", "xz(dict=x)", "xz(dict=8MiB)", "xz(level=6)", "xz(20,21)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{nil, {12}, {15}, {31}, {23, 0}} {
		if _, err := xzStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x) = %v, want ErrCorrupt", p, err)
		}
	}
}

// TestXzRoundTrip round-trips through the op and checks the dictionary the
// stream declares.
func TestXzRoundTrip(t *testing.T) {
	for _, p := range xzTestPayloads() {
		for _, dictLog := range []int{16, 23} {
			frame := xzTestEncode(t, p.data, dictLog)
			dict, err := xzTestDict(frame)
			if len(p.data) == 0 && err != nil {
				dict, err = int64(xzDict(0, uint8(dictLog))), nil // liblzma writes no block for nothing
			}
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			if want := int64(xzDict(len(p.data), uint8(dictLog))); dict != want {
				t.Errorf("%s/dict=%d: stream declares a dictionary of %d bytes, want %d", p.name, dictLog, dict, want)
			}
			got, err := xzDecode(make([]byte, 0, len(p.data)), frame, len(p.data))
			if err != nil || !bytes.Equal(got, p.data) {
				t.Errorf("%s/dict=%d: %v (equal %v)", p.name, dictLog, err, bytes.Equal(got, p.data))
			}
		}
	}
}

// TestXzStoredChunks: incompressible input longer than the dictionary
// makes stored LZMA2 chunks; with the smallest dictionary allowed they
// must survive (see XzMinDictLog).
func TestXzStoredChunks(t *testing.T) {
	data := zstdTestRandom(160<<10, 20)
	frame := xzTestEncode(t, data, XzMinDictLog)
	if got, err := xzDecode(nil, frame, len(data)); err != nil || !bytes.Equal(got, data) {
		t.Errorf("dict=%d, %d random bytes: %v", XzMinDictLog, len(data), err)
	}
}

// xzTestDict returns the dictionary size the first block header of a
// one-stream frame declares.
func xzTestDict(frame []byte) (int64, error) {
	if len(frame) < 12+8 {
		return 0, errors.New("short stream")
	}
	props, err := xzTestPropsOffset(frame)
	if err != nil {
		return 0, err
	}
	return xzDictSize(frame[props]), nil
}

// xzTestPropsOffset finds the LZMA2 properties byte in the first block
// header of our encoders' streams: one filter, with or without the size
// fields (liblzma writes them, ulikunitz/xz does not).
func xzTestPropsOffset(frame []byte) (int, error) {
	h := frame[12:]
	if h[0] == 0 {
		return 0, errors.New("no block: the stream's index follows its header")
	}
	p := 2
	for _, bit := range []byte{0x40, 0x80} {
		if h[1]&bit != 0 {
			if _, ok := xzVLI(h, &p); !ok {
				return 0, errors.New("bad size field")
			}
		}
	}
	if h[1]&^0xc0 != 0 || h[p] != xzLZMA2 || h[p+1] != 1 {
		return 0, errors.New("unexpected block header " + string(h[:p+2]))
	}
	return 12 + p + 2, nil
}

// xzTestBackends are the backends of this build, by name.
func xzTestBackends() map[string]xzCoder {
	bs := map[string]xzCoder{"go": xzGo{}}
	if xzLiblzma != nil {
		bs["liblzma"] = xzLiblzma
	}
	return bs
}

// TestXzBackends: each backend decodes what each writes, and liblzma
// (where cgo is on) is the default.
func TestXzBackends(t *testing.T) {
	if xzLiblzma != nil && xzBackend != xzLiblzma {
		t.Errorf("cgo build: default backend %T, want liblzma's", xzBackend)
	}
	for encName, enc := range xzTestBackends() {
		for _, p := range xzTestPayloads() {
			frame, err := enc.encode(&codec.Arena{}, p.data, xzDict(len(p.data), XzDefaultDictLog))
			if err != nil {
				t.Fatalf("%s: %s: %v", encName, p.name, err)
			}
			for decName, dec := range xzTestBackends() {
				got, err := xzDecodeWith(dec, nil, frame, len(p.data))
				if err != nil || !bytes.Equal(got, p.data) {
					t.Errorf("%s payload, %s encoder, %s decoder: %v (equal %v)", p.name, encName, decName, err, bytes.Equal(got, p.data))
				}
				// One byte fewer expected: refused, not written past.
				if len(p.data) > 0 {
					if _, err := xzDecodeWith(dec, nil, frame, len(p.data)-1); !errors.Is(err, codec.ErrCorrupt) {
						t.Errorf("%s payload, %s encoder, %s decoder, length less one: %v", p.name, encName, decName, err)
					}
				}
			}
		}
	}
}

// xzTestReseal recomputes the CRC32 of the first block header after a
// test changed it.
func xzTestReseal(frame []byte) {
	hlen := (int(frame[12]) + 1) * 4
	binary.LittleEndian.PutUint32(frame[12+hlen-4:], crc32.ChecksumIEEE(frame[12:12+hlen-4]))
}

// TestXzCLI has the `xz` tool decode our streams.
func TestXzCLI(t *testing.T) {
	path, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("xz tool not in PATH")
	}
	for _, p := range xzTestPayloads() {
		frame := xzTestEncode(t, p.data, XzDefaultDictLog)
		cmd := exec.Command(path, "-d", "-c")
		cmd.Stdin = bytes.NewReader(frame)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Errorf("%s: xz -d: %v: %s", p.name, err, stderr.Bytes())
			continue
		}
		if !bytes.Equal(out, p.data) {
			t.Errorf("%s: xz -d gave %d bytes, want the %d encoded", p.name, len(out), len(p.data))
		}
	}
}

// TestXzForeign decodes what the `xz` tool makes: its default preset,
// several blocks, several streams with padding, and a CRC64 check; and
// refuses the 64 MiB dictionary of -9 for a small segment.
func TestXzForeign(t *testing.T) {
	path, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("xz tool not in PATH")
	}
	data := append(zstdTestFloats(8<<10, 14), strings.Repeat("foreign streams ", 1000)...)
	xzc := func(args ...string) []byte {
		cmd := exec.Command(path, append([]string{"-c", "-T1"}, args...)...)
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz %v: %v", args, err)
		}
		return out
	}
	two := append(append(append([]byte{}, xzc("-1")...), 0, 0, 0, 0), xzc("--check=crc32")...)
	for name, c := range map[string]struct {
		stream []byte
		n      int
	}{
		"default":     {xzc(), len(data)},
		"blocks":      {xzc("--block-size=5000", "--check=sha256"), len(data)},
		"two-streams": {two, 2 * len(data)},
		"padded":      {append(xzc("-0"), 0, 0, 0, 0, 0, 0, 0, 0), len(data)},
	} {
		got, err := xzDecode(nil, c.stream, c.n)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(got[:len(data)], data) || c.n > len(data) && !bytes.Equal(got[len(data):], data) {
			t.Errorf("%s: decoded bytes differ", name)
		}
	}
	if _, err := xzDecode(nil, xzc("-9"), len(data)); !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), "dictionary") {
		t.Errorf("xz -9 on %d bytes (64 MiB dictionary): %v, want refused", len(data), err)
	}
}

// TestXzSeeds decodes the committed streams of testdata/xz-seeds.sh (made
// by the xz tool: seven blocks with SHA-256 checks; two streams with
// padding between them), without needing the tool.
func TestXzSeeds(t *testing.T) {
	var text []byte
	for i := range 300 {
		text = fmt.Appendf(text, "weights %d grads %d\n", i, i*i%97)
	}
	for name, want := range map[string][]byte{"xz-blocks.xz": text, "xz-streams.xz": append(append([]byte{}, text...), text...)} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := xzDecode(nil, b, len(want)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestXzHostileDict: a block header that declares a 4 GiB dictionary is
// refused before the library allocates it.
func TestXzHostileDict(t *testing.T) {
	data := []byte(strings.Repeat("hostile ", 100))
	frame := xzTestEncode(t, data, XzDefaultDictLog)
	props, err := xzTestPropsOffset(frame)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []byte{40, 39, 30, 25} { // 4 GiB, 3 GiB, 128 MiB, 24 MiB
		bad := append([]byte{}, frame...)
		bad[props] = p
		xzTestReseal(bad)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := xzDecode(nil, bad, len(data))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, codec.ErrCorrupt) || !strings.Contains(err.Error(), "dictionary") {
			t.Errorf("props %d (%d bytes): %v, want a refused dictionary", p, xzDictSize(p), err)
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
			t.Errorf("props %d: %d bytes allocated to refuse it", p, a)
		}
	}
	// 8 MiB (props 22) is within the floor: it decodes.
	ok := append([]byte{}, frame...)
	ok[props] = 22
	xzTestReseal(ok)
	if got, err := xzDecode(nil, ok, len(data)); err != nil || !bytes.Equal(got, data) {
		t.Errorf("8 MiB dictionary: %v", err)
	}
}

// TestXzLengthChecks: a stream decodes only to exactly the expected length,
// and nothing is written past it.
func TestXzLengthChecks(t *testing.T) {
	data := append(zstdTestFloats(2000, 15), strings.Repeat("length ", 2000)...)
	frame := xzTestEncode(t, data, XzDefaultDictLog)
	n := len(data)
	for _, want := range []int{0, 1, n - 1, n + 1, 2 * n} {
		backing := bytes.Repeat([]byte{0xA5}, want+64<<10)
		if _, err := xzDecode(backing[:0], frame, want); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("told %d of %d bytes: %v, want ErrCorrupt", want, n, err)
		}
		for i, b := range backing[want:] {
			if b != 0xA5 {
				t.Errorf("told %d bytes: byte %d past them was written", want, i)
				break
			}
		}
	}
	// An index that lies passes the pre-check; the library must catch it.
	for _, delta := range []int{-1, +1} {
		bad := xzTestIndexSize(t, frame, n+delta)
		if _, err := xzDecode(nil, bad, n+delta); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("index claims %d of %d bytes: %v, want ErrCorrupt", n+delta, n, err)
		}
	}
	got, err := xzDecode(make([]byte, 5, 5+n), frame, n)
	if err != nil || !bytes.Equal(got[5:], data) {
		t.Errorf("append after 5 bytes: %v", err)
	}
}

// xzTestIndexSize rewrites the uncompressed size in the index of a
// one-block stream (same VLI length) and reseals the index CRC32.
func xzTestIndexSize(t *testing.T, frame []byte, size int) []byte {
	t.Helper()
	bad := append([]byte{}, frame...)
	foot := bad[len(bad)-12:]
	indexLen := (int(binary.LittleEndian.Uint32(foot[4:])) + 1) * 4
	idx := bad[len(bad)-12-indexLen : len(bad)-12]
	p := 2 // indicator, count (1 record)
	if _, ok := xzVLI(idx, &p); !ok || idx[1] != 1 {
		t.Fatal("unexpected index")
	}
	q := p
	old, _ := xzVLI(idx, &q)
	enc := binary.AppendUvarint(nil, uint64(size))
	if len(enc) != q-p {
		t.Fatalf("size %d does not fit the %d bytes of %d", size, q-p, old)
	}
	copy(idx[p:], enc)
	binary.LittleEndian.PutUint32(idx[len(idx)-4:], crc32.ChecksumIEEE(idx[:len(idx)-4]))
	return bad
}

// TestXzCorrupt: truncation and garbage give ErrCorrupt; flipped bits give
// ErrCorrupt or n bytes, never a panic.
func TestXzCorrupt(t *testing.T) {
	data := []byte(strings.Repeat("corrupt the archive; ", 500))
	frame := xzTestEncode(t, data, 16)
	for _, cut := range []int{0, 1, 6, 12, 20, len(frame) / 2, len(frame) - 12, len(frame) - 1} {
		if _, err := xzDecode(nil, frame[:cut], len(data)); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("truncated to %d of %d: %v, want ErrCorrupt", cut, len(frame), err)
		}
	}
	for _, g := range [][]byte{[]byte("not an xz stream at all, no"), zstdTestRandom(999, 16), make([]byte, 64), append([]byte(xzHeaderMagic), make([]byte, 30)...)} {
		if _, err := xzDecode(nil, g, len(data)); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("garbage %q: %v, want ErrCorrupt", g[:8], err)
		}
	}
	r := rand.New(rand.NewPCG(17, 17))
	for range 300 {
		bad := append([]byte{}, frame...)
		bad[r.IntN(len(bad))] ^= 1 << r.IntN(8)
		got, err := xzDecode(nil, bad, len(data))
		if err != nil && !errors.Is(err, codec.ErrCorrupt) || err == nil && len(got) != len(data) {
			t.Errorf("flipped bit: %d bytes, %v", len(got), err)
		}
	}
}

// TestXzFrame runs xz inside a real frame.
func TestXzFrame(t *testing.T) {
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	data := zstdTestShuffle4(zstdTestFloats(8<<10, 18))
	frame, stats, err := enc.AppendBytesStats(nil, nil, data, codec.MustParseRecipe("*:xz(dict=20)"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Coder != "xz" {
		t.Errorf("stats %+v: want one segment coded by xz", stats)
	}
	f, _, err := new(codec.Decoder).DecodeFrame(frame)
	if err != nil || !bytes.Equal(f.Bytes, data) {
		t.Fatalf("DecodeFrame: %v", err)
	}
}

// BenchmarkXz: 256 KiB of N(0, 0.02) float32 as shuffled byte planes.
func BenchmarkXz(b *testing.B) {
	data := zstdTestShuffle4(zstdTestFloats(64<<10, 19))
	frame := xzTestEncode(b, data, XzDefaultDictLog)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			xzTestEncode(b, data, XzDefaultDictLog)
		}
		b.ReportMetric(float64(len(data))/float64(len(frame)), "ratio")
	})
	b.Run("decode", func(b *testing.B) {
		dst := make([]byte, 0, len(data))
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := xzDecode(dst, frame, len(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
