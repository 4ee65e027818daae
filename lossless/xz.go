package lossless

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"slices"
	"strconv"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"

	"github.com/tensorpress/tensorpress/codec"
)

// The xz stage codes a segment as a standard .xz stream (LZMA2): with
// liblzma (XZ Utils, through cgo, preset 6's encoder settings: what `xz -6`
// writes) where cgo is on, with github.com/ulikunitz/xz elsewhere (10-12%
// larger on byte data). It is for archives: a few MB/s on float data, two
// orders of magnitude below zstd. Either backend decodes what the other
// writes; the container is walked and bounded here (xzDecode) before
// either sees a block. liblzma's encoder (preset 6: a binary-tree match
// finder) takes about 11 times its dictionary, outside Go's heap, for
// each encode running (XZ Utils documents 94 MiB for `xz -6`, whose
// dictionary is our default 8 MiB); a Writer with n encoder workers may
// hold n of them. The
// encoder is the sender's choice (its recipe), never a peer's.
//
// Wire parameters: 1 byte, the base-2 logarithm of the largest LZMA2
// dictionary the encoder may use, 16..30 (64 KiB..1 GiB). LZMA2 allows 4
// KiB, but ulikunitz/xz v0.5.17 copies stored (incompressible) chunks of
// up to 64 KiB out of its dictionary buffer: with a smaller dictionary it
// fails ("insufficient space") or, worse, writes a stream that does not
// decode (4 KiB dictionary, 20 KiB of random bytes).
//
// Recipe text: "xz" (dict=23: 8 MiB, xz's default preset), "xz(dict=N)" or
// "xz(N)" with N that logarithm. An op prints as "xz(dict=N)".
//
// Segment layout: one .xz stream (xz file format 1.0.4) with one block,
// one LZMA2 filter and no integrity check (the frame's CRC-32C covers the
// payload); `xz -d` reads it. The dictionary the stream declares is
// min(2^N, the input length rounded up to a power of two, at least 4 KiB):
// a dictionary larger than the input buys nothing and costs every decoder
// its size in memory.
//
// Decoding bounds memory by the expected length n before the library
// sees the stream. xz.ReaderConfig.DictCap cannot: the library takes the
// larger of it and the dictionary a block header declares (up to 4 GiB),
// so Decode first walks the stream from its end (footer, index, block
// headers) and refuses any dictionary above max(8 MiB, the one this
// encoder would declare for n bytes at N=30), and any stream whose index
// does not add up to n bytes. Several streams, stream padding and several
// blocks, as other xz writers make them, are accepted within those bounds.
const (
	XzMinDictLog     = 16 // see above: not LZMA2's 12
	XzMaxDictLog     = 30
	XzDefaultDictLog = 23
)

var xzStage = &codec.Stage{
	ID:     XzID,
	Name:   "xz",
	Kind:   codec.Coder,
	Reads:  "any byte segment",
	Writes: "one .xz stream",
	Doc:    "xz/LZMA2 for archives (slow); dict=log2 of the dictionary, 16..30 (default 23: 8 MiB)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("xz", args, 1, "dict"); err != nil {
			return nil, err
		}
		d, err := codec.IntArg("xz", args, 0, "dict", XzDefaultDictLog, XzMinDictLog, XzMaxDictLog)
		if err != nil {
			return nil, err
		}
		return xzOp{dictLog: uint8(d)}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || p[0] < XzMinDictLog || p[0] > XzMaxDictLog {
			return nil, fmt.Errorf("%w: xz params %x: want one byte, a dictionary log2 in [%d, %d]", codec.ErrCorrupt, p, XzMinDictLog, XzMaxDictLog)
		}
		return xzOp{dictLog: p[0]}, nil
	},
}

func init() { codec.Register(xzStage) }

// xzOp is the xz stage with a dictionary of at most 2^dictLog bytes.
type xzOp struct{ dictLog uint8 }

var _ codec.Op = xzOp{}

func (xzOp) Stage() *codec.Stage              { return xzStage }
func (o xzOp) String() string                 { return "xz(dict=" + strconv.Itoa(int(o.dictLog)) + ")" }
func (o xzOp) AppendParams(dst []byte) []byte { return append(dst, o.dictLog) }
func (xzOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

// xzDict is the dictionary the encoder declares for n bytes: 2^dictLog,
// or less when n needs less. Either it is at least 64 KiB or it holds all
// n bytes, which keeps ulikunitz/xz's stored chunks intact.
func xzDict(n int, dictLog uint8) int {
	d := lzma.MinDictCap
	if n > d {
		d = 1 << bits.Len(uint(n-1)) // n rounded up to a power of two
	}
	return min(d, 1<<dictLog)
}

// xzMaxDict is the largest dictionary Decode accepts for n bytes.
func xzMaxDict(n int) int64 {
	return max(1<<XzDefaultDictLog, int64(xzDict(n, XzMaxDictLog)))
}

// xzAppender is an io.Writer that appends to b.
type xzAppender struct{ b []byte }

func (w *xzAppender) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// Encode compresses in into ctx.Arena, with liblzma where cgo is on
// (xz_cgo.go) and ulikunitz/xz elsewhere.
func (o xzOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	out, err := xzBackend.encode(a, in.Data, xzDict(len(in.Data), o.dictLog))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o, err)
	}
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// errXzMemory: a backend could not allocate what a block needs (within
// xzDecode's budget): not corrupt data.
var errXzMemory = errors.New("xz: out of memory")

// An xz backend codes .xz streams of one LZMA2 block without an integrity
// check (encode) and decodes the raw LZMA2 data of one block into exactly
// len(out) bytes (decodeBlock); xzDecode walks the container itself.
type xzCoder interface {
	encode(a *codec.Arena, src []byte, dict int) ([]byte, error)
	decodeBlock(out, data []byte, dict int64) error
}

// xzGo is the pure-Go backend, ulikunitz/xz.
type xzGo struct{}

func (xzGo) encode(a *codec.Arena, src []byte, dict int) ([]byte, error) {
	// Room for stored input: LZMA2 costs 3 bytes per 64 KiB chunk, the
	// stream's header, block header, index and footer about 60 bytes.
	n := len(src)
	w := xzAppender{b: a.Alloc(n + n>>12 + 128)[:0]}
	zw, err := xz.WriterConfig{DictCap: dict, NoCheckSum: true}.NewWriter(&w)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(src); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return w.b, nil
}

func (xzGo) decodeBlock(out, data []byte, dict int64) error {
	br := bytes.NewReader(data)
	r, err := lzma.Reader2Config{DictCap: int(dict)}.NewReader2(br)
	if err != nil {
		return err
	}
	if k, err := io.ReadFull(r, out); err != nil {
		return fmt.Errorf("%d of %d bytes decoded: %v", k, len(out), err)
	}
	var one [1]byte
	if k, err := r.Read(one[:]); k != 0 || err != io.EOF || br.Len() != 0 {
		return fmt.Errorf("holds more than its %d bytes", len(out))
	}
	return nil
}

// Decode appends exactly in.Len decoded bytes to dst.
func (o xzOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 {
		return nil, fmt.Errorf("%w: xz: want 1 segment and a length, got %d segments and length %d", codec.ErrCorrupt, len(parts), in.Len)
	}
	return xzDecode(dst, parts[0].Data, in.Len)
}

// xzDecode decodes the .xz streams in src, which must hold exactly n
// bytes. It does not hand the container to the library: xzBlocks walks and
// checks the streams itself, and each block's LZMA2 data is decoded on its
// own with a dictionary no larger than the block (a block cannot refer
// further back than its own start), within a budget of 2n + 1 MiB over all
// blocks. So a hostile header cannot make the decoder allocate more than
// that, however large a dictionary it declares and however many blocks it
// has. Block integrity checks (CRC64, SHA-256) are not verified: the frame's
// CRC-32C covers the segment.
func xzDecode(dst, src []byte, n int) ([]byte, error) {
	return xzDecodeWith(xzBackend, dst, src, n)
}

// xzDecodeWith is xzDecode with the given backend decoding the blocks.
func xzDecodeWith(be xzCoder, dst, src []byte, n int) ([]byte, error) {
	blocks, err := xzBlocks(src, n)
	if err != nil {
		return nil, err
	}
	dst = slices.Grow(dst, n)
	start := len(dst)
	out := dst[start : start+n]
	budget := 2*int64(n) + 1<<20
	for i, b := range blocks {
		dict := max(int64(lzma.MinDictCap), min(b.dict, int64(b.size)))
		if budget -= dict; budget < 0 {
			return nil, fmt.Errorf("%w: xz: blocks need more dictionary memory than %d bytes of data allow", codec.ErrCorrupt, n)
		}
		if err := be.decodeBlock(out[:b.size], b.data, dict); errors.Is(err, errXzMemory) {
			return nil, fmt.Errorf("xz: block %d: %w", i, err) // the machine's memory, not the data
		} else if err != nil {
			return nil, fmt.Errorf("%w: xz: block %d: %v", codec.ErrCorrupt, i, err)
		}
		out = out[b.size:]
	}
	return dst[:start+n], nil
}

// .xz container constants (xz file format 1.0.4).
const (
	xzHeaderMagic = "\xfd7zXZ\x00"
	xzFooterMagic = "YZ"
	xzLZMA2       = 0x21 // filter ID
)

// xzBlock is one block of an .xz stream: its LZMA2 data, the bytes it
// decodes to (from the index) and the dictionary its header declares.
type xzBlock struct {
	data []byte
	size int
	dict int64
}

// xzBlocks walks the .xz streams in src from the end and returns their
// blocks in stream order. It fails unless the streams are well formed
// (magic, flags, CRC-32 of footers, block headers and indexes), every
// block holds at least one byte (unless n is 0) and has exactly one filter, LZMA2, with a
// dictionary of at most xzMaxDict(n), and the blocks add up to exactly n
// decoded bytes.
func xzBlocks(src []byte, n int) ([]xzBlock, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: xz: "+format, append([]any{codec.ErrCorrupt}, args...)...)
	}
	var total uint64
	var blocks []xzBlock
	streams := 0
	pos := len(src)
	for pos > 0 {
		// Stream padding: zero bytes in multiples of four.
		for pos >= 4 && binary.LittleEndian.Uint32(src[pos-4:]) == 0 {
			pos -= 4
		}
		if pos == 0 {
			break
		}
		if pos < 24 {
			return nil, corrupt("%d bytes before offset %d are not a stream", pos, pos)
		}
		// Stream footer: CRC32, backward size, flags, "YZ".
		foot := src[pos-12 : pos]
		if string(foot[10:]) != xzFooterMagic || crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot) {
			return nil, corrupt("no stream footer before offset %d", pos)
		}
		checkSize, ok := xzCheckSize(foot[8:10])
		if !ok {
			return nil, corrupt("bad stream flags %x", foot[8:10])
		}
		indexLen := (int64(binary.LittleEndian.Uint32(foot[4:])) + 1) * 4
		if indexLen > int64(pos-24) {
			return nil, corrupt("index of %d bytes does not fit", indexLen)
		}
		indexStart := pos - 12 - int(indexLen)
		idx := src[indexStart : pos-12]
		// Index: 0x00, record count, records (unpadded size, uncompressed
		// size), padding, CRC32. The library checks the CRC and padding.
		if idx[0] != 0 || crc32.ChecksumIEEE(idx[:len(idx)-4]) != binary.LittleEndian.Uint32(idx[len(idx)-4:]) {
			return nil, corrupt("no index at offset %d", indexStart)
		}
		p := 1
		count, ok := xzVLI(idx, &p)
		// Every block takes at least 16 bytes before the index.
		if !ok || count > uint64(len(idx)/2) || count > uint64(indexStart/16) {
			return nil, corrupt("bad index record count")
		}
		type record struct{ unpadded, size uint64 }
		recs := make([]record, count)
		var blocksLen uint64
		for i := range recs {
			u, ok1 := xzVLI(idx, &p)
			s, ok2 := xzVLI(idx, &p)
			if !ok1 || !ok2 || u < 5 || u > uint64(indexStart) {
				return nil, corrupt("bad index record %d", i)
			}
			if s > uint64(n)-total {
				return nil, corrupt("index claims more than %d bytes", n)
			}
			if s == 0 && n > 0 {
				return nil, corrupt("empty block %d", i) // only an empty stream has one
			}
			total += s
			recs[i] = record{u, s}
			if blocksLen += (u + 3) &^ 3; blocksLen > uint64(indexStart) {
				return nil, corrupt("blocks do not fit before offset %d", indexStart)
			}
		}
		if p > len(idx)-4 {
			return nil, corrupt("index records overrun the index")
		}
		if blocksLen > uint64(indexStart-12) {
			return nil, corrupt("blocks of %d bytes do not fit before offset %d", blocksLen, indexStart)
		}
		start := indexStart - int(blocksLen) - 12
		// Stream header: magic, the footer's flags, CRC32.
		head := src[start : start+12]
		if string(head[:6]) != xzHeaderMagic || string(head[6:8]) != string(foot[8:10]) {
			return nil, corrupt("no stream header at offset %d", start)
		}
		off := start + 12
		stream := make([]xzBlock, 0, len(recs))
		for i, rec := range recs {
			b := src[off : off+int(rec.unpadded)]
			hlen, dict, err := xzCheckBlock(b, checkSize, xzMaxDict(n))
			if err != nil {
				return nil, corrupt("block %d at offset %d: %v", i, off, err)
			}
			stream = append(stream, xzBlock{data: b[hlen : len(b)-checkSize], size: int(rec.size), dict: dict})
			off += int((rec.unpadded + 3) &^ 3)
		}
		blocks = append(stream, blocks...)
		streams++
		pos = start
	}
	if streams == 0 {
		return nil, corrupt("no stream")
	}
	if total != uint64(n) {
		return nil, corrupt("streams hold %d bytes, want %d", total, n)
	}
	return blocks, nil
}

// xzCheckSize returns the size of a block's integrity check for the
// stream flags f.
func xzCheckSize(f []byte) (int, bool) {
	if f[0] != 0 || f[1] > 0x0f {
		return 0, false
	}
	if f[1] == 0 {
		return 0, true
	}
	return 4 << ((f[1] - 1) / 3), true
}

// xzCheckBlock checks the header of block b (header, data and check,
// without padding): its CRC-32, its flags, and that its one filter is LZMA2
// with a dictionary of at most maxDict. It returns the header length and
// the dictionary size.
func xzCheckBlock(b []byte, checkSize int, maxDict int64) (int, int64, error) {
	hlen := (int(b[0]) + 1) * 4
	if b[0] == 0 || hlen+checkSize > len(b) {
		return 0, 0, fmt.Errorf("header of %d bytes does not fit", hlen)
	}
	h := b[:hlen-4] // without its CRC32
	if crc32.ChecksumIEEE(h) != binary.LittleEndian.Uint32(b[hlen-4:]) {
		return 0, 0, fmt.Errorf("block header CRC mismatch")
	}
	flags := h[1]
	if flags&0x3c != 0 {
		return 0, 0, fmt.Errorf("reserved flags %#x", flags)
	}
	if flags&3 != 0 {
		return 0, 0, fmt.Errorf("%d filters: only a lone LZMA2 filter is supported", flags&3+1)
	}
	p := 2
	for _, bit := range []byte{0x40, 0x80} { // compressed, uncompressed size
		if flags&bit != 0 {
			if _, ok := xzVLI(h, &p); !ok {
				return 0, 0, fmt.Errorf("bad size field")
			}
		}
	}
	id, ok1 := xzVLI(h, &p)
	size, ok2 := xzVLI(h, &p)
	if !ok1 || !ok2 || size > uint64(len(h)-p) {
		return 0, 0, fmt.Errorf("bad filter flags")
	}
	if id != xzLZMA2 {
		return 0, 0, fmt.Errorf("filter %#x: only LZMA2 is supported", id)
	}
	props := h[p : p+int(size)]
	if len(props) != 1 || props[0] > 40 {
		return 0, 0, fmt.Errorf("bad LZMA2 properties %x", props)
	}
	d := xzDictSize(props[0])
	if d > maxDict {
		return 0, 0, fmt.Errorf("LZMA2 dictionary of %d bytes, at most %d allowed for this segment", d, maxDict)
	}
	return hlen, d, nil
}

// xzDictSize decodes an LZMA2 dictionary-size property (0..40).
func xzDictSize(p byte) int64 {
	if p == 40 {
		return 1<<32 - 1
	}
	return int64(2|p&1) << (p/2 + 11)
}

// xzVLI reads a variable-length integer (at most 9 bytes, little-endian
// base-128) from b at *p.
func xzVLI(b []byte, p *int) (uint64, bool) {
	var v uint64
	for i := 0; i < 9; i++ {
		if *p >= len(b) {
			return 0, false
		}
		c := b[*p]
		*p++
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, c != 0 || i == 0 // no trailing zero bytes
		}
	}
	return 0, false
}
