package testvectors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/lossless"
	_ "github.com/tensorpress/tensorpress/lossy"
	_ "github.com/tensorpress/tensorpress/sparse"
)

var update = flag.Bool("update", false, "rewrite the golden and malformed files")

func encodeCase(t *testing.T, c Case) []byte {
	t.Helper()
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	r, err := codec.ParseRecipe(c.Recipe)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	var out []byte
	if c.Tensor != nil {
		out, err = enc.AppendTensor(nil, c.Tensor, r)
	} else {
		out, err = enc.AppendBytes(nil, c.Bytes, r)
	}
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return out
}

// checkGolden compares got with golden/<name>.tpf (or rewrites it with
// -update); on a mismatch it writes <name>.tpf.got.
func checkGolden(t *testing.T, name string, got []byte, exact bool) []byte {
	t.Helper()
	path := filepath.Join("golden", name+".tpf")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return got
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (run go test ./testvectors -update)", name, err)
	}
	if exact && !bytes.Equal(got, want) {
		os.WriteFile(path+".got", got, 0o644)
		t.Errorf("%s: encoding changed (%d bytes, golden %d); new bytes in %s.got", name, len(got), len(want), path)
	}
	return want
}

func TestGoldenFrames(t *testing.T) {
	d := new(codec.Decoder)
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			got := encodeCase(t, c)
			golden := checkGolden(t, c.Name, got, c.Exact)
			// The golden frame and today's encoding both decode to the input
			// (lossy cases: to the same approximation of it).
			var decoded [][]byte
			for which, frame := range map[string][]byte{"golden": golden, "current": got} {
				f, n, err := d.DecodeFrame(frame)
				if err != nil {
					t.Fatalf("%s frame: %v", which, err)
				}
				if n != len(frame) {
					t.Fatalf("%s frame: %d of %d bytes consumed", which, n, len(frame))
				}
				if c.Tensor != nil {
					x := f.Tensors[0]
					decoded = append(decoded, x.Data)
					if !c.Lossy && !bytes.Equal(x.Data, c.Tensor.Data) || len(x.Data) != len(c.Tensor.Data) || x.Name != c.Tensor.Name || x.DType != c.Tensor.DType ||
						fmt.Sprint(x.Shape) != fmt.Sprint(c.Tensor.Shape) || x.Offset != c.Tensor.Offset ||
						fmt.Sprint(x.Tags) != fmt.Sprint(c.Tensor.Tags) || x.Version != c.Tensor.Version || x.Base != c.Tensor.Base {
						t.Fatalf("%s frame decodes to a different tensor", which)
					}
				} else if !bytes.Equal(f.Bytes, c.Bytes) {
					t.Fatalf("%s frame decodes to different bytes", which)
				}
			}
			if c.Lossy && !bytes.Equal(decoded[0], decoded[1]) {
				t.Fatalf("the golden frame and today's encoding decode to different values")
			}
		})
	}
}

// goldenStream is a whole stream with a fixed session: hello, a tensors
// frame, a control frame, a bytes frame and the end frame.
func goldenStream(t *testing.T) []byte {
	enc, _ := codec.NewEncoder()
	h := &codec.Hello{Peer: "golden", Stages: []codec.StageID{1, 2, 3, 4, 5, 6, 7}, MaxFrame: 1 << 20}
	copy(h.Session[:], "0123456789abcdef")
	s := codec.AppendHello(nil, h)
	small := []*codec.Tensor{Normal("bias", 16, 0.1, 10), Ints("ln", codec.F16, 8, 11), Ramp("idx", codec.I32, 5)}
	s, err := enc.AppendTensors(s, small, []*codec.Recipe{codec.MustParseRecipe("shuffle4"), nil, codec.MustParseRecipe("*:s2")})
	if err != nil {
		t.Fatal(err)
	}
	s = codec.AppendControl(s, 1024, []byte("app message"))
	s, err = enc.AppendBytes(s, []byte("a byte stream chunk"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var raw uint64
	for _, x := range small {
		raw += uint64(len(x.Data))
	}
	return codec.AppendEnd(s, codec.End{Frames: 2, Bytes: raw + uint64(len("a byte stream chunk"))})
}

func TestGoldenStream(t *testing.T) {
	want := checkGolden(t, "stream", goldenStream(t), true)
	r, err := codec.NewReader(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, f.Header.Type.String())
		if f.Header.Type == codec.FrameTensors && (len(f.Tensors) != 3 || f.Tensors[2].Name != "idx") {
			t.Fatalf("tensors frame: %d tensors", len(f.Tensors))
		}
	}
	if got := strings.Join(types, ","); got != "hello,tensors,control,bytes,end" {
		t.Fatalf("frames: %s", got)
	}
	if r.Hello().Peer != "golden" || string(r.Hello().Session[:]) != "0123456789abcdef" {
		t.Fatalf("hello: %+v", r.Hello())
	}
}

// rawFrame builds a frame around a hand-made header with valid CRCs,
// following docs/FORMAT.md.
func rawFrame(lead byte, hdr, payload []byte, withCRC bool) []byte {
	tab := crc32.MakeTable(crc32.Castagnoli)
	if withCRC {
		lead |= 1 << 4
	}
	f := append([]byte{lead}, binary.AppendUvarint(nil, uint64(len(hdr)))...)
	f = append(f, hdr...)
	f = binary.LittleEndian.AppendUint32(f, crc32.Checksum(f, tab))
	f = append(f, payload...)
	if withCRC {
		f = binary.LittleEndian.AppendUint32(f, crc32.Checksum(payload, tab))
	}
	return f
}

const v1 = 1 << 5

// coded builds a one-step u8 tensor frame: stage id with params over a
// stored segment, claiming rawLen decoded bytes.
func coded(id byte, params []byte, rawLen int, seg []byte) []byte {
	hdr := []byte{1 << 4, 0, byte(codec.U8), 1}
	hdr = binary.AppendUvarint(hdr, uint64(rawLen))
	hdr = append(hdr, 1, id, 0)
	hdr = binary.AppendUvarint(hdr, uint64(rawLen))
	hdr = append(hdr, byte(len(params)))
	hdr = append(hdr, params...)
	hdr = append(hdr, 1)
	hdr = binary.AppendUvarint(hdr, uint64(len(seg)))
	return rawFrame(v1|1, hdr, seg, true)
}

type malformed struct {
	name   string
	stream bool // read with codec.Reader instead of Decoder.DecodeFrame
	want   error
	build  func(t *testing.T) []byte
}

var errNames = map[string]error{
	"ErrCorrupt": codec.ErrCorrupt, "ErrChecksum": codec.ErrChecksum, "ErrLimit": codec.ErrLimit,
	"ErrUnsupported": codec.ErrUnsupported, "ErrUnexpectedEOF": io.ErrUnexpectedEOF,
}

func errName(err error) string {
	for n, e := range errNames {
		if err == e {
			return n
		}
	}
	return "?"
}

func malformedCases() []malformed {
	golden := func(name string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			for _, c := range Cases() {
				if c.Name == name {
					return encodeCase(t, c)
				}
			}
			t.Fatalf("no case %s", name)
			return nil
		}
	}
	huff := golden("huff0-planes")
	zstdFrame := func(t *testing.T, n int) []byte {
		enc, _ := codec.NewEncoder()
		f, _ := enc.AppendBytes(nil, bytes.Repeat([]byte("zstd content "), n), codec.MustParseRecipe("*:zstd(3)"))
		return f
	}
	return []malformed{
		{"truncated-header", false, io.ErrUnexpectedEOF, func(t *testing.T) []byte { return huff(t)[:6] }},
		{"truncated-payload", false, io.ErrUnexpectedEOF, func(t *testing.T) []byte { f := huff(t); return f[:len(f)-10] }},
		{"header-bitflip", false, codec.ErrChecksum, func(t *testing.T) []byte { f := huff(t); f[4] ^= 0x10; return f }},
		{"payload-bitflip", false, codec.ErrChecksum, func(t *testing.T) []byte { f := huff(t); f[len(f)-100] ^= 1; return f }},
		{"version-2", false, codec.ErrUnsupported, func(t *testing.T) []byte { f := huff(t); f[0] = f[0]&0x1f | 2<<5; return f }},
		{"not-a-frame", false, codec.ErrCorrupt, func(t *testing.T) []byte { return make([]byte, 32) }},
		{"unknown-frame-type", false, codec.ErrUnsupported, func(t *testing.T) []byte { return rawFrame(v1|6, []byte{0}, nil, false) }},
		{"unknown-stage", false, codec.ErrUnsupported, func(t *testing.T) []byte { return coded(99, nil, 4, []byte{1, 2, 3, 4}) }},
		{"unknown-dtype", false, codec.ErrUnsupported, func(t *testing.T) []byte {
			return rawFrame(v1|1, []byte{0, 0, 99, 1, 1}, []byte{0}, true)
		}},
		{"claims-1TiB", false, codec.ErrLimit, func(t *testing.T) []byte {
			hdr := append([]byte{0, 4, 'h', 'u', 'g', 'e', byte(codec.F32), 1}, binary.AppendUvarint(nil, 1<<38)...)
			f := rawFrame(v1|1, hdr, nil, false)
			return append(f, make([]byte, 100-len(f))...)
		}},
		{"header-over-limit", false, codec.ErrLimit, func(t *testing.T) []byte {
			return append([]byte{v1 | 1}, binary.AppendUvarint(nil, 1<<27)...)
		}},
		{"rank-over-limit", false, codec.ErrLimit, func(t *testing.T) []byte {
			return rawFrame(v1|1, append([]byte{0, 0, byte(codec.U8), 40}, make([]byte, 40)...), nil, false)
		}},
		{"too-many-tensors", false, codec.ErrLimit, func(t *testing.T) []byte {
			return rawFrame(v1|2, binary.AppendUvarint(nil, 1<<20), nil, false)
		}},
		{"stored-length-mismatch", false, codec.ErrCorrupt, func(t *testing.T) []byte {
			return rawFrame(v1|1, []byte{1 << 4, 0, byte(codec.U8), 1, 8, 1, 2, 0, 8, 1, 4, 4, 3, 3, 3, 3}, make([]byte, 12), true)
		}},
		{"shuffle-width-0", false, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(2, []byte{0}, 4, []byte{1, 2, 3, 4}) }},
		{"zstd-garbage", false, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(4, []byte{3}, 100, bytes.Repeat([]byte{0xab}, 40)) }},
		{"zstd-size-lie", false, codec.ErrCorrupt, func(t *testing.T) []byte {
			// A valid zstd frame of 130 bytes of content, claimed as 1000.
			f := zstdFrame(t, 10)
			br := bytes.NewReader(f)
			h, _, err := codec.ReadFrameHeader(br, br, codec.Limits{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			seg := f[h.HeaderLen : len(f)-4]
			return coded(4, []byte{3}, 1000, seg)
		}},
		{"huff0-garbage", false, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(7, nil, 300, bytes.Repeat([]byte{0x5c, 0x01}, 60)) }},
		{"s2-wrong-length", false, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(5, []byte{0}, 50, []byte{20, 0x4c, 'a', 'b', 'c'}) }},
		{"xz-garbage", false, codec.ErrCorrupt, func(t *testing.T) []byte {
			return coded(6, []byte{23}, 100, append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, make([]byte, 40)...))
		}},
		{"critical-extension", false, codec.ErrUnsupported, func(t *testing.T) []byte {
			return rawFrame(v1|1<<3|5, []byte{0, 0, 3, 1, 1, 0}, nil, false)
		}},
		{"stream-lost-frame", true, codec.ErrCorrupt, func(t *testing.T) []byte {
			s := goldenStream(t)
			// Remove the bytes frame (the one before the end frame).
			d := new(codec.Decoder)
			var frames [][]byte
			for len(s) > 0 {
				_, n, err := d.DecodeFrame(s)
				if err != nil {
					t.Fatal(err)
				}
				frames, s = append(frames, s[:n]), s[n:]
			}
			return bytes.Join(append(frames[:3:3], frames[4]), nil)
		}},
		{"stream-without-end", true, io.ErrUnexpectedEOF, func(t *testing.T) []byte {
			s := goldenStream(t)
			return s[:len(s)-7] // the end frame is 7 bytes
		}},
	}
}

func TestMalformedCorpus(t *testing.T) {
	manifest := filepath.Join("malformed", "MANIFEST")
	if *update {
		var m strings.Builder
		m.WriteString("# file mode expected-error (written by go test ./testvectors -update)\n")
		for _, c := range malformedCases() {
			mode := "frame"
			if c.stream {
				mode = "stream"
			}
			if err := os.WriteFile(filepath.Join("malformed", c.name+".bin"), c.build(t), 0o644); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&m, "%s.bin %s %s\n", c.name, mode, errName(c.want))
		}
		if err := os.WriteFile(manifest, []byte(m.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(list), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || errNames[f[2]] == nil {
			t.Fatalf("bad MANIFEST line %q", line)
		}
		in, err := os.ReadFile(filepath.Join("malformed", f[0]))
		if err != nil {
			t.Fatal(err)
		}
		want := errNames[f[2]]
		if f[1] == "stream" {
			r, rerr := codec.NewReader(bytes.NewReader(in))
			if rerr != nil {
				t.Fatal(rerr)
			}
			for err = nil; err == nil; {
				_, err = r.Next()
			}
		} else {
			_, _, err = new(codec.Decoder).DecodeFrame(in)
			// The stream reader must agree.
			rd, rerr := codec.NewReader(bytes.NewReader(in))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if _, err2 := rd.Next(); !errors.Is(err2, want) {
				t.Errorf("%s via Reader: got %v, want %s", f[0], err2, f[2])
			}
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %s", f[0], err, f[2])
		}
		n++
	}
	if n < len(malformedCases()) {
		t.Errorf("MANIFEST lists %d files, the generator %d: run with -update", n, len(malformedCases()))
	}
}

func TestModel(t *testing.T) {
	for _, load := range []func() ([]*codec.Tensor, error){ModelWeights, ModelGrads} {
		ts, err := load()
		if err != nil {
			t.Fatal(err)
		}
		params := int64(0)
		for _, tn := range ts {
			if tn.DType != codec.F32 || tn.Validate() != nil {
				t.Fatalf("%s: %v %v", tn.Name, tn.DType, tn.Shape)
			}
			params += tn.NumElements()
		}
		if len(ts) != 6 || params != 109386 || ts[0].Shape[0] != 128 || ts[0].Shape[1] != 784 {
			t.Fatalf("%d tensors, %d parameters, first %q %v", len(ts), params, ts[0].Name, ts[0].Shape)
		}
	}
}

func TestFLSnapshot(t *testing.T) {
	w, err := FLWeights()
	if err != nil {
		t.Fatal(err)
	}
	u, err := FLUpdate()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int64{{128, 784}, {128}, {64, 128}, {64}, {10, 64}, {10}}
	for i, s := range want {
		if !slices.Equal(w[i].Shape, s) || !slices.Equal(u[i].Shape, s) || w[i].Name != u[i].Name {
			t.Fatalf("tensor %d: %s %v / %s %v, want shape %v", i, w[i].Name, w[i].Shape, u[i].Name, u[i].Shape, s)
		}
	}
	// An update is small next to the weights it changes.
	wv, _ := codec.View[float32](w[0])
	uv, _ := codec.View[float32](u[0])
	var nw, nu float64
	for i := range wv {
		nw += float64(wv[i]) * float64(wv[i])
		nu += float64(uv[i]) * float64(uv[i])
	}
	if nu == 0 || nu > nw/4 {
		t.Fatalf("update norm² %g against weight norm² %g", nu, nw)
	}
}
