package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/tensorpress/tensorpress/codec"
)

// zstdTestFloats returns n float32 values drawn from N(0, 0.02) as
// little-endian bytes: what model weights look like.
func zstdTestFloats(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	return b
}

// zstdTestShuffle4 is the reference byte-shuffle: byte j of element i goes
// to plane j, planes one after the other.
func zstdTestShuffle4(b []byte) []byte {
	n := len(b) / 4
	out := make([]byte, len(b))
	for i := range n {
		for j := range 4 {
			out[j*n+i] = b[4*i+j]
		}
	}
	return out
}

func zstdTestRandom(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

type zstdTestPayload struct {
	name string
	data []byte
}

func zstdTestPayloads() []zstdTestPayload {
	text := []byte(strings.Repeat("tensorpress moves model weights and gradients; zstd codes them. ", 500))
	return []zstdTestPayload{
		{"empty", []byte{}},
		{"one", []byte{7}},
		{"small-text", []byte("hello, hello, hello, zstd")},
		{"zeros-100", make([]byte, 100)},
		{"zeros-300k", make([]byte, 300<<10)},
		{"text", text},
		{"random-70k", zstdTestRandom(70<<10, 1)},
		{"floats-256k", zstdTestFloats(64<<10, 2)},
		{"floats-shuffled-256k", zstdTestShuffle4(zstdTestFloats(64<<10, 3))},
	}
}

// zstdTestBackends lists the backends of this build by name.
func zstdTestBackends() map[string]zstdBackend {
	m := map[string]zstdBackend{ZstdKlauspost: klauspostZstd{}}
	if datadogZstd != nil {
		m[ZstdDataDog] = datadogZstd
	}
	return m
}

func zstdTestNames() []string {
	if datadogZstd != nil {
		return []string{ZstdKlauspost, ZstdDataDog}
	}
	return []string{ZstdKlauspost}
}

func TestZstdRecipeText(t *testing.T) {
	for in, want := range map[string]string{
		"zstd":          "zstd(3)",
		"zstd()":        "zstd(3)",
		"zstd(1)":       "zstd(1)",
		"zstd(level=9)": "zstd(9)",
		"zstd(22)":      "zstd(22)",
	} {
		r, err := codec.ParseRecipe(in)
		if err != nil {
			t.Fatalf("ParseRecipe(%q): %v", in, err)
		}
		if got := r.String(); got != want {
			t.Errorf("ParseRecipe(%q).String() = %q, want %q", in, got, want)
		}
		r2, err := codec.ParseRecipe(r.String())
		if err != nil || r2.String() != want {
			t.Errorf("reparse %q: %v, %v", want, r2, err)
		}
		op := r.Steps[0].Ops[0]
		loaded, err := zstdStage.Load(op.AppendParams(nil))
		if err != nil || loaded != op {
			t.Errorf("Load(AppendParams(%s)) = %v, %v", op, loaded, err)
		}
	}
	for _, bad := range []string{"zstd(0)", "zstd(23)", "zstd(-1)", "zstd(x)", "zstd(1,2)", "zstd(lvl=1)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{nil, {0}, {23}, {255}, {3, 0}} {
		if _, err := zstdStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("Load(%x) = %v, want ErrCorrupt", p, err)
		}
	}
}

// TestZstdCrossBackend encodes with every backend and decodes with every
// backend: the frames are one wire format.
func TestZstdCrossBackend(t *testing.T) {
	if datadogZstd == nil {
		t.Log("no cgo: klauspost only")
	}
	bes := zstdTestBackends()
	for _, p := range zstdTestPayloads() {
		for _, level := range []int{1, 3} {
			for encName, enc := range bes {
				frame, err := enc.encode(nil, p.data, level)
				if err != nil {
					t.Fatalf("%s: %s encode: %v", p.name, encName, err)
				}
				var h zstd.Header
				if err := h.Decode(frame); err != nil || !h.HasFCS || h.FrameContentSize != uint64(len(p.data)) || h.HasCheckSum {
					t.Errorf("%s/%d/%s: header %+v, %v: want content size %d, no checksum", p.name, level, encName, h, err, len(p.data))
				}
				for decName, dec := range bes {
					got, err := dec.decode(nil, frame, len(p.data))
					if err != nil {
						t.Errorf("%s/%d: %s -> %s: %v", p.name, level, encName, decName, err)
						continue
					}
					if !bytes.Equal(got, p.data) {
						t.Errorf("%s/%d: %s -> %s: decoded bytes differ", p.name, level, encName, decName)
					}
				}
			}
		}
	}
}

// TestZstdCLI has the reference `zstd` tool decode frames from each backend.
func TestZstdCLI(t *testing.T) {
	path, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("zstd tool not in PATH")
	}
	for _, p := range zstdTestPayloads() {
		for name, be := range zstdTestBackends() {
			for _, level := range []int{1, 19} {
				if level == 19 && len(p.data) > 100<<10 {
					continue // slow; levels are covered in TestZstdLevels
				}
				frame, err := be.encode(nil, p.data, level)
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(path, "-d", "-c", "-q")
				cmd.Stdin = bytes.NewReader(frame)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Errorf("%s/%s/%d: zstd -d: %v: %s", p.name, name, level, err, stderr.Bytes())
					continue
				}
				if !bytes.Equal(out, p.data) {
					t.Errorf("%s/%s/%d: zstd -d gave %d bytes, want the %d encoded", p.name, name, level, len(out), len(p.data))
				}
			}
		}
	}
}

// TestZstdLevels round-trips through the op (arena, Encode, Decode) at a
// range of levels, with every backend.
func TestZstdLevels(t *testing.T) {
	t.Cleanup(func() { SetZstdBackend("") })
	data := zstdTestShuffle4(zstdTestFloats(32<<10, 4)) // 128 KiB
	for _, name := range zstdTestNames() {
		if err := SetZstdBackend(name); err != nil {
			t.Fatal(err)
		}
		for _, level := range []int{1, 3, 9, 19} {
			r := codec.MustParseRecipe(fmt.Sprintf("zstd(%d)", level))
			op := r.Steps[0].Ops[0]
			ctx := &codec.Ctx{Arena: &codec.Arena{}}
			in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.Byte, Len: len(data)}, Data: data}
			outs, err := op.Encode(ctx, in)
			if err != nil || len(outs) != 1 {
				t.Fatalf("%s/%d: Encode: %v", name, level, err)
			}
			if len(outs[0].Data) >= len(data) {
				t.Errorf("%s/%d: %d bytes coded to %d: shuffled floats must shrink", name, level, len(data), len(outs[0].Data))
			}
			got, err := op.Decode(ctx, make([]byte, 0, len(data)), outs, in.SegInfo)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s/%d: Decode: %v (equal %v)", name, level, err, bytes.Equal(got, data))
			}
			t.Logf("%s zstd(%d): %d -> %d bytes (%.4fx)", name, level, len(data), len(outs[0].Data), float64(len(data))/float64(len(outs[0].Data)))
		}
	}
}

// TestZstdFrame runs zstd inside a real frame, byte stream and tensor.
func TestZstdFrame(t *testing.T) {
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	dec := new(codec.Decoder)
	data := zstdTestFloats(16<<10, 5)
	frame, stats, err := enc.AppendBytesStats(nil, nil, data, codec.MustParseRecipe("*:zstd(1)"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Coder != "zstd" {
		t.Errorf("stats %+v: want one segment coded by zstd", stats)
	}
	f, n, err := dec.DecodeFrame(frame)
	if err != nil || n != len(frame) || !bytes.Equal(f.Bytes, data) {
		t.Fatalf("DecodeFrame: %v, n %d of %d, equal %v", err, n, len(frame), f != nil && bytes.Equal(f.Bytes, data))
	}
}

// zstdTestFrame returns a frame for data whose header is rewritten: with
// fcs >= 0 it states the content size fcs (single segment, 4-byte field),
// with fcs < 0 it states none (a 2 MiB window instead, as a streaming
// encoder would). The blocks are real; only the header may lie.
func zstdTestFrame(t testing.TB, data []byte, fcs int64) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(false), zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	frame := enc.EncodeAll(data, nil)
	var h zstd.Header
	if err := h.Decode(frame); err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	if fcs >= 0 {
		out = append(out, 2<<6|1<<5) // FCS 4 bytes, single segment
		out = binary.LittleEndian.AppendUint32(out, uint32(fcs))
	} else {
		out = append(out, 0, (21-10)<<3) // no FCS; window 2 MiB
	}
	out = append(out, frame[h.HeaderSize:]...)
	if err := h.Decode(out); err != nil || h.HasFCS != (fcs >= 0) {
		t.Fatalf("rewritten frame: %+v, %v", h, err)
	}
	return out
}

// TestZstdLengthChecks: a frame is refused unless it decodes to exactly the
// expected length, and no decoder writes past that length.
func TestZstdLengthChecks(t *testing.T) {
	// Floats (raw blocks) and text (compressed blocks): both block paths.
	data := append(zstdTestFloats(10000, 6), strings.Repeat("length checks, ", 4000)...)
	n := len(data)
	cases := []struct {
		name  string
		frame []byte
		want  int // the length the decoder is told
	}{
		{"fcs-larger", zstdTestFrame(t, data, int64(n+1)), n},
		{"fcs-huge", zstdTestFrame(t, data, 1<<31), n},
		{"fcs-smaller", zstdTestFrame(t, data, int64(n-1)), n},
		{"expect-shorter", zstdTestFrame(t, data, -1), n - 1},
		{"expect-longer", zstdTestFrame(t, data, -1), n + 1},
		{"expect-zero", zstdTestFrame(t, data, -1), 0},
		{"expect-much-shorter", zstdTestFrame(t, data, -1), 1000},
		// The header agrees with the expected length; the blocks do not.
		{"fcs-lies-short", zstdTestFrame(t, data, int64(n-1)), n - 1},
		{"fcs-lies-long", zstdTestFrame(t, data, int64(n+1)), n + 1},
		{"fcs-lies-much-shorter", zstdTestFrame(t, data, 1000), 1000},
		// Exactly the expected length, but no content size.
		{"no-fcs", zstdTestFrame(t, data, -1), n},
	}
	for name, be := range zstdTestBackends() {
		for _, c := range cases {
			// dst has spare capacity past the expected length, filled with
			// a guard pattern that must survive.
			backing := bytes.Repeat([]byte{0xA5}, c.want+200<<10)
			_, err := be.decode(backing[:0], c.frame, c.want)
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s/%s: got %v, want ErrCorrupt", name, c.name, err)
			}
			for i, b := range backing[c.want:] {
				if b != 0xA5 {
					t.Errorf("%s/%s: byte %d past the expected %d was written", name, c.name, i, c.want)
					break
				}
			}
		}
		// The honest frame decodes.
		got, err := be.decode(make([]byte, 3, 3+n), zstdTestFrame(t, data, int64(n)), n)
		if err != nil || !bytes.Equal(got[3:], data) {
			t.Errorf("%s: honest frame: %v", name, err)
		}
	}
}

// TestZstdEncodersWriteOneFrame: what the decoders insist on is what both
// encoders write, at every size and level: one frame, its content size,
// no dictionary, no checksum, nothing after it.
func TestZstdEncodersWriteOneFrame(t *testing.T) {
	sizes := []int{0, 1, 255, 256, 300, 64 << 10, 70 << 10, 1 << 20, 5 << 20}
	for name, be := range zstdTestBackends() {
		for _, level := range []int{1, 3, 9, 19, 22} {
			for _, size := range sizes {
				if level >= 19 && size > 1<<20 {
					continue // slow, and the same frame header as below
				}
				src := append(zstdTestFloats(size/8, uint64(size)), zstdTestRandom(size-size/8*4-size/8*4, 3)...)
				src = append(src, make([]byte, size-len(src))...)
				f, err := be.encode(nil, src, level)
				if err != nil {
					t.Fatal(err)
				}
				var h zstd.Header
				if err := h.Decode(f); err != nil {
					t.Fatalf("%s level %d, %d bytes: %v", name, level, size, err)
				}
				end, err := zstdFrameEnd(f, h.HeaderSize, h.HasCheckSum)
				if h.Skippable || !h.HasFCS || h.FrameContentSize != uint64(size) || h.DictionaryID != 0 || h.HasCheckSum || err != nil || end != len(f) {
					t.Errorf("%s level %d, %d bytes: header %+v, frame end %d of %d (%v)", name, level, size, h, end, len(f), err)
				}
				if err := zstdCheckFrame(f, size); err != nil {
					t.Errorf("%s level %d, %d bytes: %v", name, level, size, err)
				}
			}
		}
	}
}

// TestZstdOneFrame: decoders refuse what RFC 8878 allows beyond one frame
// with its content size.
func TestZstdOneFrame(t *testing.T) {
	data := []byte(strings.Repeat("one frame, no more; ", 200))
	n := len(data)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(false), zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	one := enc.EncodeAll(data, nil)
	empty := enc.EncodeAll(nil, nil)
	skippable := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0x184D2A50), 3)
	skippable = append(skippable, 1, 2, 3)
	crcEnc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer crcEnc.Close()
	withCRC := crcEnc.EncodeAll(data, nil)
	badCRC := append([]byte{}, withCRC...)
	badCRC[len(badCRC)-1] ^= 1
	// A dictionary ID field (1 byte: 7) in an otherwise valid header.
	var h zstd.Header
	if err := h.Decode(one); err != nil {
		t.Fatal(err)
	}
	dict := append(append([]byte{}, one[:4]...), one[4]|1, 7)
	dict = append(dict, one[5:]...)
	for name, be := range zstdTestBackends() {
		if got, err := be.decode(nil, withCRC, n); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: frame with a checksum: %v", name, err)
		}
		for what, f := range map[string][]byte{
			"two frames":           append(append([]byte{}, one...), empty...),
			"skippable first":      append(append([]byte{}, skippable...), one...),
			"skippable after":      append(append([]byte{}, one...), skippable...),
			"trailing byte":        append(append([]byte{}, one...), 0),
			"wrong checksum":       badCRC,
			"dictionary":           dict,
			"without content size": zstdTestFrame(t, data, -1),
		} {
			if _, err := be.decode(nil, f, n); !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s: %s: %v, want ErrCorrupt", name, what, err)
			}
		}
	}
}

// TestZstdCorrupt: truncated and garbage input gives ErrCorrupt, never a
// panic; flipped bits give ErrCorrupt or n bytes (a frame without its
// checksum cannot tell; the codec's CRC-32C does).
func TestZstdCorrupt(t *testing.T) {
	data := []byte(strings.Repeat("corrupt me if you can; ", 4000))
	for name, be := range zstdTestBackends() {
		frame, err := be.encode(nil, data, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, cut := range []int{0, 1, 3, 4, 5, 8, len(frame) / 2, len(frame) - 1} {
			if _, err := be.decode(nil, frame[:cut], len(data)); !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s: truncated to %d of %d: %v, want ErrCorrupt", name, cut, len(frame), err)
			}
		}
		for _, g := range [][]byte{[]byte("garbage that is not zstd"), zstdTestRandom(1000, 7), {0x28, 0xb5, 0x2f, 0xfd}} {
			if _, err := be.decode(nil, g, len(data)); !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s: garbage %q: %v, want ErrCorrupt", name, g[:min(8, len(g))], err)
			}
		}
		trailing := append(append([]byte{}, frame...), "trailing"...)
		if _, err := be.decode(nil, trailing, len(data)); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%s: trailing garbage: %v, want ErrCorrupt", name, err)
		}
		r := rand.New(rand.NewPCG(8, 8))
		for range 200 {
			bad := append([]byte{}, frame...)
			bad[r.IntN(len(bad))] ^= 1 << r.IntN(8)
			got, err := be.decode(nil, bad, len(data))
			if err != nil && !errors.Is(err, codec.ErrCorrupt) || err == nil && len(got) != len(data) {
				t.Errorf("%s: flipped bit: %d bytes, %v", name, len(got), err)
			}
		}
	}
}

func TestZstdSetBackend(t *testing.T) {
	t.Cleanup(func() { SetZstdBackend("") })
	def := ZstdBackend()
	if want := map[bool]string{true: ZstdDataDog, false: ZstdKlauspost}[datadogZstd != nil]; def != want {
		t.Errorf("default backend %q, want %q", def, want)
	}
	if err := SetZstdBackend(ZstdKlauspost); err != nil || ZstdBackend() != ZstdKlauspost {
		t.Errorf("SetZstdBackend(klauspost): %v, now %q", err, ZstdBackend())
	}
	err := SetZstdBackend(ZstdDataDog)
	if (err == nil) != (datadogZstd != nil) {
		t.Errorf("SetZstdBackend(datadog) = %v in a build with cgo=%v", err, datadogZstd != nil)
	}
	if err := SetZstdBackend("lz4"); err == nil {
		t.Error("SetZstdBackend(lz4) succeeded")
	}
	if err := SetZstdBackend(""); err != nil || ZstdBackend() != def {
		t.Errorf(`SetZstdBackend(""): %v, now %q, want %q`, err, ZstdBackend(), def)
	}
}

// TestZstdConcurrent shares the pooled encoders, decoder and contexts
// between goroutines (run with -race).
func TestZstdConcurrent(t *testing.T) {
	payloads := zstdTestPayloads()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				p := payloads[(g+i)%len(payloads)]
				for _, be := range zstdTestBackends() {
					frame, err := be.encode(nil, p.data, 1+(g+i)%4)
					if err != nil {
						t.Error(err)
						return
					}
					got, err := be.decode(nil, frame, len(p.data))
					if err != nil || !bytes.Equal(got, p.data) {
						t.Errorf("%s: %v", p.name, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkZstd: both backends, levels 1 and 3, 1 MiB of N(0, 0.02)
// float32 as shuffled byte planes and as plain floats. Encoders report the
// ratio (input bytes per coded byte); each decoder decodes the frames of
// each encoder (decode/<frame maker>/<decoder>).
func BenchmarkZstd(b *testing.B) {
	floats := zstdTestFloats(1<<18, 9)
	inputs := []zstdTestPayload{{"shuffled", zstdTestShuffle4(floats)}, {"floats", floats}}
	bes := zstdTestBackends()
	for _, in := range inputs {
		for _, level := range []int{1, 3} {
			for _, name := range zstdTestNames() {
				be := bes[name]
				dst := make([]byte, 0, zstdBound(len(in.data)))
				frame, _ := be.encode(nil, in.data, level)
				b.Run(fmt.Sprintf("%s/L%d/encode/%s", in.name, level, name), func(b *testing.B) {
					b.SetBytes(int64(len(in.data)))
					b.ReportAllocs()
					for b.Loop() {
						if _, err := be.encode(dst, in.data, level); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(len(in.data))/float64(len(frame)), "ratio")
				})
				for _, decName := range zstdTestNames() {
					dec := bes[decName]
					b.Run(fmt.Sprintf("%s/L%d/decode/%s/%s", in.name, level, name, decName), func(b *testing.B) {
						out := make([]byte, 0, len(in.data))
						b.SetBytes(int64(len(in.data)))
						b.ReportAllocs()
						for b.Loop() {
							if _, err := dec.decode(out, frame, len(in.data)); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			}
		}
	}
}
