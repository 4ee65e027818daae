package testvectors

import (
	"bytes"
	"compress/gzip"
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

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/gradient"
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

// checkGolden compares got with golden/<name>.tpf (or, with -update,
// writes it: anew for an exact case, only where it is missing for the
// others); on a mismatch it writes <name>.tpf.got.
func checkGolden(t *testing.T, name string, got []byte, exact bool) []byte {
	t.Helper()
	path := filepath.Join("golden", name+".tpf")
	if *update {
		if want, err := os.ReadFile(path); err == nil && !exact {
			// What an earlier writer made (zstd, xz: the library's
			// choice) stays, to be decoded as it is.
			return want
		}
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

// Modes of a malformed file: how it is read.
const (
	modeFrame  = "frame"  // Decoder.DecodeFrame and Reader.Next, one frame
	modeStream = "stream" // Reader.Next to the end
	modeTensor = "tensor" // Reader.Next to the end, and Reader.ReadTensor to the end
)

// topkFrame is an f32 [16] tensor coded by topk with the given parameter
// bytes, keeping elements 0-4.
func topkFrame(params []byte) []byte {
	hdr := entry(nil, 1<<4, "g", codec.F32, []uint64{16}, nil)
	hdr = append(hdr, 1, 96, 0, 64, byte(len(params)))
	hdr = append(append(hdr, params...), 2, 20, 20)
	var pay []byte
	for i := range 5 {
		pay = binary.LittleEndian.AppendUint32(pay, uint32(i))
	}
	for i := range 5 {
		pay = binary.LittleEndian.AppendUint32(pay, 0x3f800000+uint32(i)) // about 1.0
	}
	return rawFrame(v1|1, hdr, pay, true)
}

// shufflePlaneFrame is an f32 [2] tensor coded by shuffle4, then by a
// shuffle of width w on plane0 (2 bytes: w = 2 gives two 1-byte planes).
func shufflePlaneFrame(w byte) []byte {
	hdr := entry(nil, 1<<4, "x", codec.F32, []uint64{2}, nil)
	hdr = append(hdr, 2, 2, 0, 8, 1, 4, 2, 0, 2, 1, w, 5, 1, 1, 2, 2, 2)
	return rawFrame(v1|1, hdr, []byte{0, 0, 0, 0, 0, 0, 0x80, 0x3f}, true)
}

// zstdContent is what the zstd vectors hold: 130 bytes.
var zstdContent = bytes.Repeat([]byte("zstd content "), 10)

// zstdSegment is zstdContent as our encoder codes it.
func zstdSegment(t *testing.T) []byte {
	enc, _ := codec.NewEncoder()
	f, err := enc.AppendBytes(nil, zstdContent, codec.MustParseRecipe("*:zstd(3)"))
	if err != nil {
		t.Fatal(err)
	}
	br := bytes.NewReader(f)
	h, _, err := codec.ReadFrameHeader(br, br, codec.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f[h.HeaderLen : len(f)-4]
}

// zstdCoded is a u8 [130] tensor coded by zstd with the given parameter
// bytes over a real zstd frame.
func zstdCoded(t *testing.T, params []byte) []byte {
	return coded(4, params, len(zstdContent), zstdSegment(t))
}

// TestMalformedTwins: the frames the malformed files were made from, with
// the one thing that makes each malformed set right, decode.
func TestMalformedTwins(t *testing.T) {
	d := new(codec.Decoder)
	for name, f := range map[string][]byte{
		"params minimal":     topkFrame([]byte{1, 5}),
		"shuffle plane 2":    shufflePlaneFrame(2),
		"zstd level 3":       zstdCoded(t, []byte{3}),
		"varint minimal":     rawFrame(v1|1, []byte{0, 1, 'x', byte(codec.U8), 1, 4}, []byte{1, 2, 3, 4}, true),
		"chunk":              rawFrame(v1|1, entry(nil, 0, "b", codec.U8, []uint64{4}, []uint64{2, 2}), []byte{3, 4}, true),
		"control with a CRC": rawFrame(v1|4, []byte{0x88, 0x08, 2}, []byte("hi"), true),
	} {
		if _, _, err := d.DecodeFrame(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

type malformed struct {
	name  string
	mode  string
	want  error
	build func(t *testing.T) []byte
}

var errNames = map[string]error{
	"ErrCorrupt": codec.ErrCorrupt, "ErrChecksum": codec.ErrChecksum, "ErrLimit": codec.ErrLimit,
	"ErrUnsupported": codec.ErrUnsupported, "ErrUnexpectedEOF": io.ErrUnexpectedEOF,
	"ErrNotFrame": codec.ErrNotFrame,
}

func errName(err error) string {
	for n, e := range errNames {
		if err == e {
			return n
		}
	}
	return "?"
}

// withLead returns a copy of frame f with another lead byte and its header
// CRC made to match.
func withLead(f []byte, lead byte) []byte {
	g := append([]byte{lead}, f[1:]...)
	hlen, n := binary.Uvarint(g[1:])
	end := 1 + n + int(hlen)
	binary.LittleEndian.PutUint32(g[end:], crc32.Checksum(g[:end], crc32.MakeTable(crc32.Castagnoli)))
	return g
}

// entry appends a tensor entry header stored as is: flags, name, dtype,
// shape and, when chunk is not nil, the chunk field.
func entry(hdr []byte, flags byte, name string, dt codec.DType, shape []uint64, chunk []uint64) []byte {
	if chunk != nil {
		flags |= 1 << 2
	}
	hdr = append(hdr, flags)
	hdr = binary.AppendUvarint(hdr, uint64(len(name)))
	hdr = append(append(hdr, name...), byte(dt))
	hdr = binary.AppendUvarint(hdr, uint64(len(shape)))
	for _, d := range shape {
		hdr = binary.AppendUvarint(hdr, d)
	}
	for _, c := range chunk {
		hdr = binary.AppendUvarint(hdr, c)
	}
	return hdr
}

// chunkTensor is the tensor the stream vectors send in chunks: 100 float32
// values, shape [4, 25].
func chunkTensor() *codec.Tensor {
	w := Normal("w", 100, 0.02, 21)
	w.Shape = []int64{4, 25}
	return w
}

// chunkOf returns elements [off, off+n) of t as a chunk.
func chunkOf(t *codec.Tensor, off, n int) *codec.Tensor {
	sz := t.DType.Size()
	return &codec.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Tags: t.Tags, Version: t.Version, Base: t.Base,
		Offset: int64(off), Data: t.Data[off*sz : (off+n)*sz]}
}

// tensorFrame encodes t (a whole tensor or a chunk) with recipe r.
func tensorFrame(t *testing.T, x *codec.Tensor, r string) []byte {
	t.Helper()
	enc, _ := codec.NewEncoder()
	f, err := enc.AppendTensor(nil, x, codec.MustParseRecipe(r))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// helloFrame is a hello with a fixed session.
func helloFrame() []byte {
	h := &codec.Hello{Peer: "golden", Stages: []codec.StageID{1, 2, 3, 4, 5, 6, 7}}
	copy(h.Session[:], "0123456789abcdef")
	return codec.AppendHello(nil, h)
}

// stream returns frames as one stream: a hello with a fixed session, the
// frames, and an end frame that counts the data frames among them.
func stream(t *testing.T, frames ...[]byte) []byte {
	t.Helper()
	s := helloFrame()
	var end codec.End
	for _, f := range frames {
		br := bytes.NewReader(f)
		fh, _, err := codec.ReadFrameHeader(br, br, codec.Limits{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fh.Type == codec.FrameTensor || fh.Type == codec.FrameTensors || fh.Type == codec.FrameBytes {
			end.Frames++
			for _, e := range fh.Entries {
				end.Bytes += uint64(e.RawLen)
			}
		}
		s = append(s, f...)
	}
	return codec.AppendEnd(s, end)
}

// goldenChunks is a stream of a tensor in three chunks, coded three ways,
// with a control frame between the first two, then a whole tensor.
func goldenChunks(t *testing.T) []byte {
	w := chunkTensor()
	return stream(t,
		tensorFrame(t, chunkOf(w, 0, 40), ""),
		codec.AppendControl(nil, 1024, []byte("between chunks")),
		tensorFrame(t, chunkOf(w, 40, 40), "shuffle4"),
		tensorFrame(t, chunkOf(w, 80, 20), "shuffle4 | plane3:huff0"),
		tensorFrame(t, Ramp("steps", codec.I32, 10), ""),
	)
}

// goldenExtension is a tensors frame with an extension area after its
// last entry, holding one entry of the unknown optional key 2 (readers skip
// it).
func goldenExtension() []byte {
	hdr := []byte{2}
	hdr = entry(hdr, 0, "a", codec.U8, []uint64{3}, nil)
	hdr = entry(hdr, 0, "b", codec.I16, []uint64{2}, nil)
	hdr = append(hdr, 4, 2, 2, 0, 9) // ext: length 4; key 2, 2 bytes
	return rawFrame(v1|1<<3|2, hdr, []byte{1, 2, 3, 4, 0, 5, 0}, true)
}

func TestGoldenChunks(t *testing.T) {
	want := checkGolden(t, "stream-chunks", goldenChunks(t), true)
	r, err := codec.NewReader(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.ReadTensor()
	if err != nil || !bytes.Equal(w.Data, chunkTensor().Data) || !w.IsWhole() {
		t.Fatalf("chunked tensor: %v", err)
	}
	if s, err := r.ReadTensor(); err != nil || s.Name != "steps" || !bytes.Equal(s.Data, Ramp("steps", codec.I32, 10).Data) {
		t.Fatalf("whole tensor: %v", err)
	}
	if _, err := r.ReadTensor(); err != io.EOF {
		t.Fatalf("after the end frame: %v", err)
	}
	// Next returns the chunks as they are.
	if r, err = codec.NewReader(bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 7 {
		t.Fatalf("%d frames, want 7", n)
	}
}

func TestGoldenExtension(t *testing.T) {
	want := checkGolden(t, "ext-tensors", goldenExtension(), true)
	f, _, err := new(codec.Decoder).DecodeFrame(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 2 || !bytes.Equal(f.Tensors[0].Data, []byte{1, 2, 3}) || !bytes.Equal(f.Tensors[1].Data, []byte{4, 0, 5, 0}) ||
		len(f.Header.Ext) != 1 || f.Header.Ext[0].Key != 2 {
		t.Fatalf("decoded %+v", f)
	}
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
		{"truncated-header", modeFrame, io.ErrUnexpectedEOF, func(t *testing.T) []byte { return huff(t)[:6] }},
		{"truncated-payload", modeFrame, io.ErrUnexpectedEOF, func(t *testing.T) []byte { f := huff(t); return f[:len(f)-10] }},
		{"header-bitflip", modeFrame, codec.ErrChecksum, func(t *testing.T) []byte { f := huff(t); f[4] ^= 0x10; return f }},
		{"payload-bitflip", modeFrame, codec.ErrChecksum, func(t *testing.T) []byte { f := huff(t); f[len(f)-100] ^= 1; return f }},
		// A frame of a later version: its header CRC matches.
		{"version-2", modeFrame, codec.ErrUnsupported, func(t *testing.T) []byte { f := huff(t); return withLead(f, f[0]&0x1f|2<<5) }},
		// Not tensorpress data: version bits 0; a later version whose
		// header CRC does not match; a hello lead byte without the magic.
		{"not-a-frame", modeFrame, codec.ErrNotFrame, func(t *testing.T) []byte { return make([]byte, 32) }},
		{"gzip-file", modeFrame, codec.ErrNotFrame, func(t *testing.T) []byte {
			var b bytes.Buffer
			z := gzip.NewWriter(&b)
			z.Write(bytes.Repeat([]byte("not a tensorpress stream "), 20))
			z.Close()
			return b.Bytes()
		}},
		{"xz-file", modeFrame, codec.ErrNotFrame, func(t *testing.T) []byte {
			var b bytes.Buffer
			z, _ := xz.NewWriter(&b)
			z.Write(bytes.Repeat([]byte("not a tensorpress stream "), 20))
			z.Close()
			return b.Bytes()
		}},
		{"zstd-file", modeFrame, codec.ErrNotFrame, func(t *testing.T) []byte {
			z, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
			defer z.Close()
			return z.EncodeAll(bytes.Repeat([]byte("not a tensorpress stream "), 20), nil)
		}},
		{"version-5-crc-wrong", modeFrame, codec.ErrNotFrame, func(t *testing.T) []byte { f := huff(t); f[0] = f[0]&0x1f | 5<<5; return f }},
		// Every varint in a header is minimal; stage parameters are in the
		// form the stage writes.
		{"varint-not-minimal", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			hdr := []byte{0, 1, 'x', byte(codec.U8), 1, 0x84, 0x00} // shape [4] as a 2-byte varint
			return rawFrame(v1|1, hdr, []byte{1, 2, 3, 4}, true)
		}},
		{"params-not-minimal", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return topkFrame([]byte{1, 0x85, 0x00}) // topk(k=5) with k as a 2-byte varint
		}},
		// Chunk fields: only in tensor frames, at least one element, never
		// the whole tensor.
		{"tensors-chunk", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			hdr := entry([]byte{2}, 0, "a", codec.U8, []uint64{2}, nil)
			hdr = entry(hdr, 0, "b", codec.U8, []uint64{4}, []uint64{0, 2})
			return rawFrame(v1|2, hdr, []byte{1, 2, 3, 4}, true)
		}},
		{"chunk-empty", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return rawFrame(v1|1, entry(nil, 0, "b", codec.U8, []uint64{4}, []uint64{2, 0}), nil, true)
		}},
		{"chunk-whole", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return rawFrame(v1|1, entry(nil, 0, "b", codec.U8, []uint64{4}, []uint64{0, 4}), []byte{1, 2, 3, 4}, true)
		}},
		// Payload CRCs: never on hello and end frames, always on control
		// frames.
		{"hello-payload-crc", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			h := codec.AppendHello(nil, &codec.Hello{Peer: "p"})
			return binary.LittleEndian.AppendUint32(withLead(h, h[0]|1<<4), 0) // the CRC of no payload
		}},
		{"end-payload-crc", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			e := codec.AppendEnd(nil, codec.End{})
			return binary.LittleEndian.AppendUint32(withLead(e, e[0]|1<<4), 0)
		}},
		{"control-no-crc", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return rawFrame(v1|4, []byte{0x88, 0x08, 2}, []byte("hi"), false) // kind 1032, 2 bytes
		}},
		// The extension area follows the last entry of a tensors frame;
		// placed between entries, the frame does not parse.
		{"ext-between-entries", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			hdr := entry([]byte{2}, 0, "a", codec.U8, []uint64{3}, nil)
			hdr = append(hdr, 4, 2, 2, 0, 9)
			hdr = entry(hdr, 0, "b", codec.I16, []uint64{2}, nil)
			return rawFrame(v1|1<<3|2, hdr, []byte{1, 2, 3, 4, 0, 5, 0}, true)
		}},
		// Shuffle widths: 0 takes the element size, which must be 2 or
		// more; planes are bytes; 1 is never a width.
		{"shuffle-width-1", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(2, []byte{1}, 4, []byte{1, 2, 3, 4}) }},
		{"shuffle-plane-width-0", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return shufflePlaneFrame(0) }},
		// The zstd level is checked though decoding does not use it.
		{"zstd-level-0", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return zstdCoded(t, []byte{0}) }},
		{"zstd-level-23", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return zstdCoded(t, []byte{23}) }},
		// A zstd segment is exactly one frame with its content size.
		{"zstd-no-content-size", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			z, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
			defer z.Close()
			seg := z.EncodeAll(zstdContent, nil) // 130 bytes: klauspost leaves the size out
			var h zstd.Header
			if err := h.Decode(seg); err != nil || h.HasFCS {
				t.Fatalf("frame states its size: %+v, %v", h, err)
			}
			return coded(4, []byte{3}, len(zstdContent), seg)
		}},
		{"zstd-two-frames", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			// The content, then an empty frame: it adds up to the length.
			z, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false), zstd.WithSingleSegment(true), zstd.WithZeroFrames(true))
			defer z.Close()
			return coded(4, []byte{3}, len(zstdContent), z.EncodeAll(nil, zstdSegment(t)))
		}},
		{"zstd-skippable", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			skip := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0x184D2A50), 2)
			return coded(4, []byte{3}, len(zstdContent), append(append(skip, 0, 0), zstdSegment(t)...))
		}},
		{"zstd-trailing-bytes", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return coded(4, []byte{3}, len(zstdContent), append(zstdSegment(t), 0, 0, 0, 0))
		}},
		{"unknown-frame-type", modeFrame, codec.ErrUnsupported, func(t *testing.T) []byte { return rawFrame(v1|6, []byte{0}, nil, false) }},
		{"unknown-stage", modeFrame, codec.ErrUnsupported, func(t *testing.T) []byte { return coded(127, nil, 4, []byte{1, 2, 3, 4}) }},
		{"unknown-dtype", modeFrame, codec.ErrUnsupported, func(t *testing.T) []byte {
			return rawFrame(v1|1, []byte{0, 0, 99, 1, 1}, []byte{0}, true)
		}},
		{"claims-1TiB", modeFrame, codec.ErrLimit, func(t *testing.T) []byte {
			hdr := append([]byte{0, 4, 'h', 'u', 'g', 'e', byte(codec.F32), 1}, binary.AppendUvarint(nil, 1<<38)...)
			f := rawFrame(v1|1, hdr, nil, false)
			return append(f, make([]byte, 100-len(f))...)
		}},
		{"header-over-limit", modeFrame, codec.ErrLimit, func(t *testing.T) []byte {
			return append([]byte{v1 | 1}, binary.AppendUvarint(nil, 1<<27)...)
		}},
		{"rank-over-limit", modeFrame, codec.ErrLimit, func(t *testing.T) []byte {
			return rawFrame(v1|1, append([]byte{0, 0, byte(codec.U8), 40}, make([]byte, 40)...), nil, false)
		}},
		{"too-many-tensors", modeFrame, codec.ErrLimit, func(t *testing.T) []byte {
			return rawFrame(v1|2, binary.AppendUvarint(nil, 1<<20), nil, false)
		}},
		{"stored-length-mismatch", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return rawFrame(v1|1, []byte{1 << 4, 0, byte(codec.U8), 1, 8, 1, 2, 0, 8, 1, 4, 4, 3, 3, 3, 3}, make([]byte, 12), true)
		}},
		{"shuffle-width-0", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(2, []byte{0}, 4, []byte{1, 2, 3, 4}) }},
		{"zstd-garbage", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(4, []byte{3}, 100, bytes.Repeat([]byte{0xab}, 40)) }},
		{"zstd-size-lie", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
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

		{"huff0-garbage", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(7, nil, 300, bytes.Repeat([]byte{0x5c, 0x01}, 60)) }},
		{"s2-wrong-length", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte { return coded(5, []byte{0}, 50, []byte{20, 0x4c, 'a', 'b', 'c'}) }},
		{"xz-garbage", modeFrame, codec.ErrCorrupt, func(t *testing.T) []byte {
			return coded(6, []byte{23}, 100, append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, make([]byte, 40)...))
		}},
		{"critical-extension", modeFrame, codec.ErrUnsupported, func(t *testing.T) []byte {
			return rawFrame(v1|1<<3|5, []byte{0, 0, 3, 1, 1, 0}, nil, false)
		}},
		{"stream-lost-frame", modeStream, codec.ErrCorrupt, func(t *testing.T) []byte {
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
		{"stream-without-end", modeStream, io.ErrUnexpectedEOF, func(t *testing.T) []byte {
			s := goldenStream(t)
			return s[:len(s)-7] // the end frame is 7 bytes
		}},
		// Order of frames in a stream.
		{"stream-second-hello", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			s := append(helloFrame(), tensorFrame(t, Ramp("steps", codec.I32, 10), "")...)
			s = append(s, helloFrame()...)
			return codec.AppendEnd(s, codec.End{Frames: 1, Bytes: 40})
		}},
		{"stream-chunk-not-first", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			// The last chunk of a tensor alone.
			return stream(t, tensorFrame(t, chunkOf(chunkTensor(), 80, 20), ""))
		}},
		{"stream-chunk-gap", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w := chunkTensor()
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), tensorFrame(t, chunkOf(w, 50, 50), ""))
		}},
		{"stream-chunk-overlap", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w := chunkTensor()
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), tensorFrame(t, chunkOf(w, 30, 70), ""))
		}},
		{"stream-chunk-reordered", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w := chunkTensor()
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), tensorFrame(t, chunkOf(w, 80, 20), ""), tensorFrame(t, chunkOf(w, 40, 40), ""))
		}},
		{"stream-chunk-interleaved", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w, v := chunkTensor(), chunkTensor()
			v.Name = "v"
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), tensorFrame(t, chunkOf(v, 0, 40), ""),
				tensorFrame(t, chunkOf(w, 40, 60), ""), tensorFrame(t, chunkOf(v, 40, 60), ""))
		}},
		{"stream-chunk-whole-between", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w := chunkTensor()
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), tensorFrame(t, Ramp("steps", codec.I32, 10), ""), tensorFrame(t, chunkOf(w, 40, 60), ""))
		}},
		{"stream-chunk-bytes-between", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w := chunkTensor()
			enc, _ := codec.NewEncoder()
			b, _ := enc.AppendBytes(nil, []byte("bytes"), nil)
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), b, tensorFrame(t, chunkOf(w, 40, 60), ""))
		}},
		{"stream-chunk-tags-differ", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			w := chunkTensor()
			c := chunkOf(w, 40, 60)
			c.Tags.Lossless = true
			return stream(t, tensorFrame(t, chunkOf(w, 0, 40), ""), tensorFrame(t, c, ""))
		}},
		{"stream-chunk-end", modeTensor, codec.ErrCorrupt, func(t *testing.T) []byte {
			return stream(t, tensorFrame(t, chunkOf(chunkTensor(), 0, 40), ""))
		}},
		{"stream-chunk-eof", modeTensor, io.ErrUnexpectedEOF, func(t *testing.T) []byte {
			return tensorFrame(t, chunkOf(chunkTensor(), 0, 40), "")
		}},
	}
}

func TestMalformedCorpus(t *testing.T) {
	manifest := filepath.Join("malformed", "MANIFEST")
	if *update {
		var m strings.Builder
		m.WriteString("# file mode expected-error (written by go test ./testvectors -update)\n")
		for _, c := range malformedCases() {
			mode := c.mode
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
		switch f[1] {
		case modeTensor:
			r, rerr := codec.NewReader(bytes.NewReader(in))
			if rerr != nil {
				t.Fatal(rerr)
			}
			for err = nil; err == nil; {
				_, err = r.ReadTensor()
			}
			if !errors.Is(err, want) {
				t.Errorf("%s via ReadTensor: got %v, want %s", f[0], err, f[2])
			}
			fallthrough
		case modeStream:
			r, rerr := codec.NewReader(bytes.NewReader(in))
			if rerr != nil {
				t.Fatal(rerr)
			}
			for err = nil; err == nil; {
				_, err = r.Next()
			}
		case modeFrame:
			_, _, err = new(codec.Decoder).DecodeFrame(in)
			// The stream reader must agree.
			rd, rerr := codec.NewReader(bytes.NewReader(in))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if _, err2 := rd.Next(); !errors.Is(err2, want) {
				t.Errorf("%s via Reader: got %v, want %s", f[0], err2, f[2])
			}
		default:
			t.Fatalf("bad MANIFEST line %q", line)
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
