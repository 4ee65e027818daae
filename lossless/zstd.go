package lossless

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/tensorpress/tensorpress/codec"
)

// The zstd stage codes a segment as a standard Zstandard frame.
//
// Wire parameters: 1 byte, the compression level, 1..22. The level is only
// a hint to the encoder; decoding does not depend on it.
//
// Recipe text: "zstd" (level 3, zstd's own default), "zstd(N)" or
// "zstd(level=N)". An op prints as "zstd(N)".
//
// Wire parameters are checked: a level outside 1..22 is corrupt.
//
// Segment layout: exactly one zstd frame (RFC 8878) that states its frame
// content size, uses no dictionary and has no content checksum (the
// frame's CRC-32C covers the payload). `zstd -d` reads it. Both encoders
// write nothing else (TestZstdEncodersWriteOneFrame), so decoders refuse,
// as corrupt, what RFC 8878 allows beyond that: skippable frames, several
// frames, bytes after the frame, a frame without a content size or with a
// dictionary ID. A content checksum is accepted and must match (both
// backends verify it). See docs/FORMAT.md.
//
// Two backends make and read these frames: klauspost/compress/zstd (pure
// Go, always built in) and DataDog/zstd (the C library, in cgo builds).
// Each reads the other's frames; which one runs is a local choice (see
// SetZstdBackend), never a property of the wire.
const (
	ZstdMinLevel     = 1
	ZstdMaxLevel     = 22
	ZstdDefaultLevel = 3
)

var zstdStage = &codec.Stage{
	ID:     ZstdID,
	Name:   "zstd",
	Kind:   codec.Coder,
	Reads:  "any byte segment",
	Writes: "one zstd frame",
	Doc:    "Zstandard, level 1..22 (default 3); klauspost or DataDog/zstd backend",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("zstd", args, 1, "level"); err != nil {
			return nil, err
		}
		l, err := codec.IntArg("zstd", args, 0, "level", ZstdDefaultLevel, ZstdMinLevel, ZstdMaxLevel)
		if err != nil {
			return nil, err
		}
		return zstdOp{level: uint8(l)}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || p[0] < ZstdMinLevel || p[0] > ZstdMaxLevel {
			return nil, fmt.Errorf("%w: zstd params %x: want one byte, a level in [%d, %d]", codec.ErrCorrupt, p, ZstdMinLevel, ZstdMaxLevel)
		}
		return zstdOp{level: p[0]}, nil
	},
}

func init() { codec.Register(zstdStage) }

// zstdOp is the zstd stage at one level.
type zstdOp struct{ level uint8 }

var _ codec.Op = zstdOp{}

func (zstdOp) Stage() *codec.Stage              { return zstdStage }
func (o zstdOp) String() string                 { return "zstd(" + strconv.Itoa(int(o.level)) + ")" }
func (o zstdOp) AppendParams(dst []byte) []byte { return append(dst, o.level) }
func (zstdOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

// Encode compresses in into ctx.Arena with the current backend.
func (o zstdOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	dst := a.Alloc(zstdBound(len(in.Data)))[:0]
	out, err := zstdCurrent.Load().be.encode(dst, in.Data, int(o.level))
	if err != nil {
		return nil, fmt.Errorf("zstd(%d): %w", o.level, err)
	}
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// Decode appends exactly in.Len decoded bytes to dst with the current
// backend.
func (o zstdOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 {
		return nil, fmt.Errorf("%w: zstd: want 1 segment and a length, got %d segments and length %d", codec.ErrCorrupt, len(parts), in.Len)
	}
	return zstdCurrent.Load().be.decode(dst, parts[0].Data, in.Len)
}

// zstdBound is ZSTD_COMPRESSBOUND: the largest frame either backend makes
// from n bytes (klauspost stays below it too: raw blocks cost 3 bytes per
// 64 KiB, the frame header at most 18).
func zstdBound(n int) int {
	b := n + n>>8
	if n < 128<<10 {
		b += (128<<10 - n) >> 11
	}
	return b
}

// zstdBackend is one implementation of the zstd wire codec.
type zstdBackend interface {
	// encode appends one zstd frame holding src, with its content size
	// set, to dst. It does not allocate when cap(dst)-len(dst) is at least
	// zstdBound(len(src)).
	encode(dst, src []byte, level int) ([]byte, error)
	// decode appends exactly n decoded bytes to dst. It never writes more
	// than n bytes into dst's spare capacity, and reports any input that
	// does not decode to exactly n bytes with codec.ErrCorrupt.
	decode(dst, src []byte, n int) ([]byte, error)
}

// Backend names for SetZstdBackend.
const (
	ZstdKlauspost = "klauspost"
	ZstdDataDog   = "datadog"
)

type zstdSelection struct {
	name string
	be   zstdBackend
}

// zstdCurrent is the selection Encode and Decode use. It starts at the
// default of zstd_cgo.go or zstd_nocgo.go.
var zstdCurrent atomic.Pointer[zstdSelection]

func init() { zstdCurrent.Store(zstdDefault()) }

// SetZstdBackend selects the implementation the zstd stage uses in this
// process, for encoding and decoding: "klauspost" (pure Go, always
// available) or "datadog" (the C library; an error in builds without
// cgo). The empty string restores the default. The choice is local: both
// make standard frames, and each decodes the other's.
//
// The default in cgo builds is DataDog/zstd for encoding and decoding (the
// faster of the two at the levels tensorpress uses: see zstd_cgo.go); in
// builds without cgo it is klauspost. SetZstdBackend is safe to call at
// any time; ops already running finish with the backend they started with.
func SetZstdBackend(name string) error {
	switch name {
	case "":
		zstdCurrent.Store(zstdDefault())
	case ZstdKlauspost:
		zstdCurrent.Store(&zstdSelection{name: ZstdKlauspost, be: klauspostZstd{}})
	case ZstdDataDog:
		if datadogZstd == nil {
			return fmt.Errorf("lossless: zstd backend %q needs a cgo build", name)
		}
		zstdCurrent.Store(&zstdSelection{name: ZstdDataDog, be: datadogZstd})
	default:
		return fmt.Errorf("lossless: unknown zstd backend %q (known: %s, %s)", name, ZstdKlauspost, ZstdDataDog)
	}
	return nil
}

// ZstdBackend names the zstd implementation in use: "klauspost" or
// "datadog".
func ZstdBackend() string { return zstdCurrent.Load().name }

// zstdCheckFrame refuses src unless it is exactly one zstd frame (not a
// skippable one, nothing after it) that states its content size, n, and
// uses no dictionary. It runs before either backend touches untrusted
// input; the backends then check the blocks and the decoded length.
func zstdCheckFrame(src []byte, n int) error {
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return fmt.Errorf("%w: zstd frame header: %v", codec.ErrCorrupt, err)
	}
	switch {
	case h.Skippable:
		return fmt.Errorf("%w: zstd segment starts with a skippable frame", codec.ErrCorrupt)
	case !h.HasFCS:
		return fmt.Errorf("%w: zstd frame without its content size", codec.ErrCorrupt)
	case h.FrameContentSize != uint64(n):
		return fmt.Errorf("%w: zstd frame content size %d, want %d", codec.ErrCorrupt, h.FrameContentSize, n)
	case h.DictionaryID != 0:
		return fmt.Errorf("%w: zstd frame needs dictionary %d", codec.ErrCorrupt, h.DictionaryID)
	}
	end, err := zstdFrameEnd(src, h.HeaderSize, h.HasCheckSum)
	if err != nil {
		return err
	}
	if end != len(src) {
		return fmt.Errorf("%w: %d bytes after the zstd frame", codec.ErrCorrupt, len(src)-end)
	}
	return nil
}

// zstdFrameEnd returns the length of the zstd frame in src whose blocks
// start at pos: it walks the block headers (RFC 8878 3.1.1.2: 3 bytes,
// little-endian; bit 0 last block, bits 1-2 type, bits 3-23 size; an RLE
// block holds one byte) and adds the checksum.
func zstdFrameEnd(src []byte, pos int, checksum bool) (int, error) {
	for last := false; !last; {
		if len(src)-pos < 3 {
			return 0, fmt.Errorf("%w: zstd frame ends inside a block header at byte %d", codec.ErrCorrupt, pos)
		}
		bh := uint32(src[pos]) | uint32(src[pos+1])<<8 | uint32(src[pos+2])<<16
		pos += 3
		last = bh&1 != 0
		size := int(bh >> 3)
		switch bh >> 1 & 3 {
		case 1: // RLE
			size = 1
		case 3:
			return 0, fmt.Errorf("%w: zstd block of the reserved type at byte %d", codec.ErrCorrupt, pos-3)
		}
		if size > len(src)-pos {
			return 0, fmt.Errorf("%w: zstd block of %d bytes at byte %d overruns the segment", codec.ErrCorrupt, size, pos-3)
		}
		pos += size
	}
	if checksum {
		if len(src)-pos < 4 {
			return 0, fmt.Errorf("%w: zstd frame ends inside its checksum", codec.ErrCorrupt)
		}
		pos += 4
	}
	return pos, nil
}

// klauspost backend.
//
// Encoders: one *zstd.Encoder per klauspost level (levels 1-2 fastest, 3-5
// default, 6-9 better, 10-22 best: zstd.EncoderLevelFromZstd), made on
// first use and shared; EncodeAll is safe for concurrent use. Options:
//
//   - WithAllLitEntropyCompression(true): without it the fastest and
//     default levels store float payloads (no matches, skewed literals)
//     uncompressed.
//   - WithSingleSegment(true): every frame states its content size, also
//     below 256 bytes (klauspost leaves it out there otherwise). A
//     streaming decoder then needs a window of the content size: a chunk
//     (at most 64 MiB) is within `zstd -d`'s default 128 MiB; a segment
//     above 128 MiB needs its --memory option (our decoders need none).
//   - WithWindowSize: matches reach back 2 MiB at levels 1-5 and 8 MiB
//     above (libzstd's windows at levels 3 and 19); each encoder keeps a
//     history of twice that. On float data the window makes no difference
//     (1, 4 or 8 MiB: the same ratio to 4 digits on 4 MiB of floats).
//   - WithEncoderCRC(false): no content checksum; the frame has CRC-32C.
//     `zstd -d` accepts frames without one.
//   - WithZeroFrames(true): an empty input gives a valid 9-byte frame.
//   - WithEncoderConcurrency(1) on each encoder, and a pool per level
//     (klauspostPool) that makes encoders as concurrent calls need them,
//     up to GOMAXPROCS: each has its own match tables (0.25 MiB at levels
//     1-2, 1.25 MiB at 3-5, 4 MiB at 6-9 and 34 MiB at 10-22), so memory
//     follows the concurrency actually used. (One encoder with a fixed
//     concurrency of min(GOMAXPROCS, 4) serialised a Writer's workers
//     beyond 4.)
//
// Decoder: one *zstd.Decoder for all levels with WithDecodeAllCapLimit, so
// DecodeAll never produces more than cap(dst)-len(dst) bytes; decode hands
// it dst capped at exactly n, and it never writes into dst beyond n. On a
// damaged frame whose raw or RLE blocks hold more than n bytes, the block
// that overflows is appended to a new buffer (about 1.25 (n + 128 KiB),
// measured) before DecodeAll fails; compressed blocks stop at the cap. The
// DataDog backend allocates nothing.
// DecodeAll decodes into dst and allocates no window, so the limits below
// are policy, not memory: declared windows above 128 MiB are refused (as
// `zstd -d` does by default; no level of either encoder declares more),
// where DataDog's single-pass decoder would accept them.
const (
	klauspostMaxWindow = 128 << 20 // libzstd's own default limit (windowLog 27)
	klauspostMaxMemory = 1 << 30   // above codec's MaxDecodedSize default (256 MiB)
)

// klauspostPool holds the encoders of one level. get takes a free one,
// makes one while fewer than GOMAXPROCS exist, and waits otherwise.
type klauspostPool struct {
	level zstd.EncoderLevel
	free  chan *zstd.Encoder
	mu    sync.Mutex
	made  int
}

var klauspostEnc [zstd.SpeedBestCompression + 1]*klauspostPool

func init() {
	for l := zstd.SpeedFastest; l <= zstd.SpeedBestCompression; l++ {
		klauspostEnc[l] = &klauspostPool{level: l, free: make(chan *zstd.Encoder, runtime.GOMAXPROCS(0))}
	}
}

func (p *klauspostPool) get() *zstd.Encoder {
	select {
	case e := <-p.free:
		return e
	default:
	}
	p.mu.Lock()
	if p.made < cap(p.free) {
		p.made++
		p.mu.Unlock()
		return p.newEncoder()
	}
	p.mu.Unlock()
	return <-p.free
}

func (p *klauspostPool) put(e *zstd.Encoder) { p.free <- e }

func (p *klauspostPool) newEncoder() *zstd.Encoder {
	window := 2 << 20
	if p.level >= zstd.SpeedBetterCompression {
		window = 8 << 20
	}
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(p.level),
		zstd.WithWindowSize(window),
		zstd.WithAllLitEntropyCompression(true),
		zstd.WithSingleSegment(true),
		zstd.WithEncoderCRC(false),
		zstd.WithZeroFrames(true),
		zstd.WithEncoderConcurrency(1),
	)
	if err != nil {
		panic("lossless: zstd encoder options: " + err.Error()) // constant options
	}
	return e
}

var klauspostDec = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0), // GOMAXPROCS concurrent DecodeAll calls
		zstd.WithDecoderMaxWindow(klauspostMaxWindow),
		zstd.WithDecoderMaxMemory(klauspostMaxMemory),
		zstd.WithDecodeAllCapLimit(true),
	)
	if err != nil {
		panic("lossless: zstd decoder options: " + err.Error()) // constant options
	}
	return d
})

type klauspostZstd struct{}

func (klauspostZstd) encode(dst, src []byte, level int) ([]byte, error) {
	p := klauspostEnc[zstd.EncoderLevelFromZstd(level)]
	e := p.get()
	defer p.put(e)
	return e.EncodeAll(src, dst), nil
}

func (klauspostZstd) decode(dst, src []byte, n int) ([]byte, error) {
	if err := zstdCheckFrame(src, n); err != nil {
		return nil, err
	}
	dst = slices.Grow(dst, n)
	start := len(dst)
	out, err := klauspostDec().DecodeAll(src, dst[:start:start+n])
	if err != nil {
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return nil, fmt.Errorf("%w: zstd segment decodes to more than %d bytes", codec.ErrCorrupt, n)
		}
		return nil, fmt.Errorf("%w: zstd: %v", codec.ErrCorrupt, err)
	}
	if len(out) != start+n {
		return nil, fmt.Errorf("%w: zstd segment decodes to %d bytes, want %d", codec.ErrCorrupt, len(out)-start, n)
	}
	return out, nil
}
