package lossless

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/tensorpress/tensorpress/codec"
)

// Fuzz targets for the zstd and xz decoders and round trips. The seeds run
// with plain `go test`; longer runs with, for example,
//
//	go test -run=^$ -fuzz=FuzzZstdDecode -fuzztime=1m ./lossless

// fuzzMaxLen bounds the expected length a fuzz input may ask for.
const fuzzMaxLen = 4 << 20

// fuzzCheckDecoded fails unless err is nil with exactly n bytes appended
// after the 3-byte prefix, or err wraps codec.ErrCorrupt.
func fuzzCheckDecoded(t *testing.T, who string, got []byte, err error, n int) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("%s: error %v does not wrap codec.ErrCorrupt", who, err)
		}
		return
	}
	if len(got) != 3+n || string(got[:3]) != "pre" {
		t.Fatalf("%s: %d bytes, want the prefix and %d", who, len(got), n)
	}
}

func FuzzZstdDecode(f *testing.F) {
	for _, p := range zstdTestPayloads()[:8] {
		for _, be := range zstdTestBackends() {
			frame, err := be.encode(nil, p.data[:min(len(p.data), 4000)], 3)
			if err != nil {
				f.Fatal(err)
			}
			n := uint32(min(len(p.data), 4000))
			f.Add(frame, n)
			f.Add(frame[:len(frame)/2], n)
			f.Add(frame, n+1)
		}
	}
	data := []byte(strings.Repeat("fuzz seeds ", 300))
	f.Add(zstdTestFrame(f, data, -1), uint32(len(data)))
	f.Add(zstdTestFrame(f, data, int64(len(data)+5)), uint32(len(data)))
	skippable := []byte{0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'}
	f.Add(append(skippable, zstdTestFrame(f, data, -1)...), uint32(len(data)))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, src []byte, n32 uint32) {
		n := int(n32 % fuzzMaxLen)
		var outs [][]byte
		for _, name := range zstdTestNames() {
			be := zstdTestBackends()[name]
			got, err := be.decode(append(make([]byte, 0, 3+n), "pre"...), src, n)
			fuzzCheckDecoded(t, name, got, err, n)
			if err == nil {
				outs = append(outs, got)
			} else {
				outs = append(outs, nil)
			}
		}
		// When both backends decode a segment, they give the same bytes.
		// On damaged input one may fail where the other decodes: libzstd
		// is more lenient in some Huffman-stream corner cases (seed
		// 363353379b3c72d7: klauspost "stream overrun 4", libzstd and the
		// zstd tool 4000 bytes). That is no wire problem: the frame's
		// CRC-32C catches damage first, and every frame either backend
		// makes decodes with both (FuzzZstdRoundTrip).
		if len(outs) == 2 && outs[0] != nil && outs[1] != nil && !bytes.Equal(outs[0], outs[1]) {
			t.Fatalf("klauspost and datadog decode the same segment to different bytes")
		}
		// The op checks its arguments the same way.
		op, _ := zstdStage.Load([]byte{3})
		got, err := op.Decode(nil, append(make([]byte, 0, 3+n), "pre"...), []codec.Segment{{Data: src}}, codec.SegInfo{Len: n})
		fuzzCheckDecoded(t, "op", got, err, n)
	})
}

// FuzzZstdRoundTrip encodes with every backend and decodes with every
// backend: the frames must carry their content size and decode to the
// input everywhere.
func FuzzZstdRoundTrip(f *testing.F) {
	for _, p := range zstdTestPayloads() {
		f.Add(p.data[:min(len(p.data), 8000)], uint8(1))
	}
	f.Add([]byte(strings.Repeat("ab", 5000)), uint8(19))
	f.Fuzz(func(t *testing.T, data []byte, l uint8) {
		// One level per klauspost encoder (and libzstd strategy family);
		// all 22 would spend the run clearing the best encoder's tables.
		level := [...]int{1, 3, 7, 19}[l%4]
		for encName, enc := range zstdTestBackends() {
			frame, err := enc.encode(nil, data, level)
			if err != nil {
				t.Fatalf("%s encode: %v", encName, err)
			}
			var h zstd.Header
			if err := h.Decode(frame); err != nil || !h.HasFCS || h.FrameContentSize != uint64(len(data)) {
				t.Fatalf("%s: header %+v, %v: want content size %d", encName, h, err, len(data))
			}
			for decName, dec := range zstdTestBackends() {
				got, err := dec.decode(nil, frame, len(data))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%s -> %s at level %d: %v", encName, decName, level, err)
				}
			}
		}
	})
}

func FuzzXzDecode(f *testing.F) {
	for _, p := range xzTestPayloads()[:6] {
		d := p.data[:min(len(p.data), 3000)]
		frame := xzTestEncode(f, d, XzMinDictLog)
		f.Add(frame, uint32(len(d)))
		f.Add(frame[:len(frame)-7], uint32(len(d)))
		f.Add(frame, uint32(len(d)+1))
	}
	for name, n := range map[string]uint32{"xz-blocks.xz": 6141, "xz-streams.xz": 2 * 6141} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, n)
	}
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, src []byte, n32 uint32) {
		n := int(n32 % fuzzMaxLen)
		got, err := xzDecode(append(make([]byte, 0, 3+n), "pre"...), src, n)
		fuzzCheckDecoded(t, "xz", got, err, n)
	})
}

func FuzzXzRoundTrip(f *testing.F) {
	for _, p := range xzTestPayloads()[:6] {
		f.Add(p.data[:min(len(p.data), 3000)], uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, d uint8) {
		dictLog := XzMinDictLog + int(d)%4 // the dictionary only matters up to the input's size
		frame := xzTestEncode(t, data, dictLog)
		got, err := xzDecode(nil, frame, len(data))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("dict=%d, %d bytes: %v", dictLog, len(data), err)
		}
	})
}
