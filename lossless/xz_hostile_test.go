package lossless

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// xzBlockBytes returns an .xz block (header with one LZMA2 filter of
// dictionary property prop, then data; no integrity check), unpadded.
func xzBlockBytes(data []byte, prop byte) []byte {
	h := []byte{0, 0x00, xzLZMA2, 1, prop}
	for (len(h)+4)%4 != 0 {
		h = append(h, 0)
	}
	h[0] = byte((len(h)+4)/4 - 1)
	h = binary.LittleEndian.AppendUint32(h, crc32.ChecksumIEEE(h))
	return append(h, data...)
}

// xzBuild writes an .xz stream (no integrity check) of the given blocks
// (as made by xzBlockBytes) with an index of recs (unpadded size, decoded
// size).
func xzBuild(blocks [][]byte, recs [][2]uint64) []byte {
	s := []byte(xzHeaderMagic + "\x00\x00")
	s = binary.LittleEndian.AppendUint32(s, crc32.ChecksumIEEE(s[6:8]))
	for _, blk := range blocks {
		s = append(s, blk...)
		for len(s)%4 != 0 {
			s = append(s, 0)
		}
	}
	idx := []byte{0}
	idx = xzAppendVLI(idx, uint64(len(recs)))
	for _, r := range recs {
		idx = xzAppendVLI(xzAppendVLI(idx, r[0]), r[1])
	}
	for len(idx)%4 != 0 {
		idx = append(idx, 0)
	}
	idx = binary.LittleEndian.AppendUint32(idx, crc32.ChecksumIEEE(idx))
	s = append(s, idx...)
	foot := binary.LittleEndian.AppendUint32(nil, uint32(len(idx)/4-1))
	foot = append(foot, 0, 0)
	foot = append(binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(foot)), foot...)
	return append(append(s, foot...), xzFooterMagic...)
}

func xzAppendVLI(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// allocDuring reports the bytes allocated while f runs.
func allocDuring(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func TestXzHostileStreams(t *testing.T) {
	// The LZMA2 data of a real 1000-byte block.
	in := make([]byte, 1000)
	for i := range in {
		in[i] = byte(i * 7)
	}
	op, _ := xzStage.New(nil)
	outs, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.Byte, Len: len(in)}, Data: in})
	if err != nil {
		t.Fatal(err)
	}
	real, err := xzBlocks(outs[0].Data, len(in))
	if err != nil || len(real) != 1 {
		t.Fatalf("own stream: %v", err)
	}
	// Sanity: the builder makes streams the decoder accepts.
	blk := xzBlockBytes(real[0].data, 16)
	good := xzBuild([][]byte{blk}, [][2]uint64{{uint64(len(blk)), 1000}})
	if got, err := xzDecode(nil, good, 1000); err != nil || string(got) != string(in) {
		t.Fatalf("built stream: %v", err)
	}
	// A second block declaring a 4 GiB dictionary, hidden inside the
	// first block's index record.
	hidden := xzBlockBytes([]byte{0x00}, 40)
	padded := append(append([]byte(nil), blk...), make([]byte, (4-len(blk)%4)%4)...)
	both := append(padded, hidden...)
	hiddenSeg := xzBuild([][]byte{both}, [][2]uint64{{uint64(len(both)), 1000}})
	// Thousands of empty blocks, each declaring an 8 MiB dictionary.
	var empties [][]byte
	var recs [][2]uint64
	for range 5000 {
		e := xzBlockBytes([]byte{0x00}, 22)
		empties = append(empties, e)
		recs = append(recs, [2]uint64{uint64(len(e)), 0})
	}
	emptySeg := xzBuild(empties, recs)

	cases := []struct {
		name string
		seg  []byte
		n    int
	}{
		{"hidden-block", hiddenSeg, 1000},
		{"empty-blocks", emptySeg, 0},
	}
	for _, c := range cases {
		var err error
		alloc := allocDuring(func() { _, err = xzDecode(nil, c.seg, c.n) })
		if !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", c.name, err)
		}
		if alloc > 8<<20 {
			t.Errorf("%s: %d bytes allocated for a %d-byte segment", c.name, alloc, len(c.seg))
		}
	}
}
