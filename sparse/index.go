package sparse

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Index codecs turn a list of non-negative integers (positions, or the gaps
// between them) into bytes. They are plain functions here, used by the
// sparse stage for its own index layouts, and stages of their own (delta,
// varint, bitpack in stages.go) so that other transforms (TopK and the
// gradient compressors) can code their index segments the same way.

// BitpackBlock is the number of values in one bitpack block.
const BitpackBlock = 128

// AppendBitpack appends v packed in blocks of BitpackBlock values: each
// block is one byte w (the bit width of the block's largest value, 0 to 32)
// and then ceil(count*w/8) bytes holding the values, w bits each, least
// significant bit first. The last block may hold fewer values; the count is
// not stored (the decoder knows it).
func AppendBitpack(dst []byte, v []uint32) []byte {
	for len(v) > 0 {
		blk := v[:min(BitpackBlock, len(v))]
		v = v[len(blk):]
		var or uint32
		for _, x := range blk {
			or |= x
		}
		w := uint(bits.Len32(or))
		dst = append(dst, byte(w))
		if w == 0 {
			continue
		}
		var acc uint64
		var nb uint
		for _, x := range blk {
			acc |= uint64(x) << nb
			nb += w
			if nb >= 32 {
				dst = binary.LittleEndian.AppendUint32(dst, uint32(acc))
				acc >>= 32
				nb -= 32
			}
		}
		for ; nb > 0; nb -= min(nb, 8) {
			dst = append(dst, byte(acc))
			acc >>= 8
		}
	}
	return dst
}

// BitpackLen is len(AppendBitpack(nil, v)), computed without packing.
func BitpackLen(v []uint32) int {
	n := 0
	for len(v) > 0 {
		blk := v[:min(BitpackBlock, len(v))]
		v = v[len(blk):]
		var or uint32
		for _, x := range blk {
			or |= x
		}
		n += 1 + (len(blk)*bits.Len32(or)+7)/8
	}
	return n
}

// DecodeBitpack fills dst (all of it) from src, which AppendBitpack made
// from len(dst) values, and returns the bytes it consumed.
func DecodeBitpack(dst []uint32, src []byte) (int, error) {
	pos := 0
	var pad [8 + 4*BitpackBlock + 8]byte
	for done := 0; done < len(dst); {
		blk := dst[done:min(done+BitpackBlock, len(dst))]
		if pos >= len(src) {
			return 0, fmt.Errorf("%w: bitpack: block at value %d: input ends", errCorrupt, done)
		}
		w := uint(src[pos])
		pos++
		if w > 32 {
			return 0, fmt.Errorf("%w: bitpack: block at value %d has width %d", errCorrupt, done, w)
		}
		nbytes := (len(blk)*int(w) + 7) / 8
		if nbytes > len(src)-pos {
			return 0, fmt.Errorf("%w: bitpack: block at value %d needs %d bytes, %d left", errCorrupt, done, nbytes, len(src)-pos)
		}
		if w == 0 {
			clear(blk)
		} else {
			// Copy the block where 8-byte loads past its end are safe.
			p := pad[:nbytes+8]
			copy(p, src[pos:pos+nbytes])
			clear(p[nbytes:])
			mask := uint64(1)<<w - 1
			var bit uint
			for i := range blk {
				blk[i] = uint32(binary.LittleEndian.Uint64(p[bit>>3:]) >> (bit & 7) & mask)
				bit += w
			}
			// Bits past the last value must be zero, so that every input
			// has one meaning.
			if r := bit & 7; r != 0 && p[nbytes-1]>>r != 0 {
				return 0, fmt.Errorf("%w: bitpack: block at value %d has stray bits", errCorrupt, done)
			}
		}
		pos += nbytes
		done += len(blk)
	}
	return pos, nil
}

// AppendVarints appends each value of v as a LEB128 varint
// (encoding/binary's uvarint).
func AppendVarints(dst []byte, v []uint32) []byte {
	for _, x := range v {
		for x >= 0x80 {
			dst = append(dst, byte(x)|0x80)
			x >>= 7
		}
		dst = append(dst, byte(x))
	}
	return dst
}

// VarintLen is the length of a uvarint of x.
func VarintLen(x uint32) int { return (bits.Len32(x|1) + 6) / 7 }

// DecodeVarints fills dst (all of it) with varints read from src and
// returns the bytes it consumed. Values above 2^32-1 and non-minimal
// encodings are refused.
func DecodeVarints(dst []uint32, src []byte) (int, error) {
	pos := 0
	for i := range dst {
		x, n := binary.Uvarint(src[pos:])
		switch {
		case n == 0:
			return 0, fmt.Errorf("%w: varint %d of %d: input ends", errCorrupt, i, len(dst))
		case n < 0 || x > 1<<32-1:
			return 0, fmt.Errorf("%w: varint %d at byte %d overflows 32 bits", errCorrupt, i, pos)
		case n != VarintLen(uint32(x)):
			return 0, fmt.Errorf("%w: varint %d at byte %d is not minimal", errCorrupt, i, pos)
		}
		dst[i] = uint32(x)
		pos += n
	}
	return pos, nil
}

// ToGaps replaces strictly increasing positions by the number of
// positions skipped before each one: g[0] = p[0], g[i] = p[i]-p[i-1]-1.
// It works in place (gaps may be pos).
func ToGaps(gaps, pos []uint32) {
	prev := uint32(0)
	for i, p := range pos {
		gaps[i] = p - prev
		prev = p + 1
	}
}

// FromGaps inverts ToGaps in place and checks that every position is
// below n.
func FromGaps(pos, gaps []uint32, n int) error {
	next := uint64(0)
	for i, g := range gaps {
		p := next + uint64(g)
		if p >= uint64(n) {
			return fmt.Errorf("%w: position %d of %d is %d, past the %d elements", errCorrupt, i, len(gaps), p, n)
		}
		pos[i] = uint32(p)
		next = p + 1
	}
	return nil
}
