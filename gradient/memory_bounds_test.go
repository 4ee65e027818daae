package gradient

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// sealImage appends a memory image's CRC to body.
func sealImage(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

// TestUnmarshalShortLengths: a length that fits the bytes left before its
// own varint but not after it is refused with ErrMemory. It once panicked
// (index out of range) for a residual, and read a name into the CRC.
func TestUnmarshalShortLengths(t *testing.T) {
	head := []byte("TPEF\x01\x01") // version 1, one tensor
	cases := map[string][]byte{
		// name "", rank 0, step 0, then 3 floats claimed with 11 bytes left.
		"residual": append(append(append([]byte{}, head...), 0, 0, 0, 3), make([]byte, 11)...),
		// a name of 3 bytes claimed with 2 left.
		"name": append(append([]byte{}, head...), 3, 'a', 'b'),
		// a private buffer of 2 floats claimed with 7 bytes left.
		"private": append(append(append([]byte{}, head...), 0, 0, 0, 0, 1, 0, 2), make([]byte, 7)...),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			m := NewMemory()
			err := m.UnmarshalBinary(sealImage(body))
			if !errors.Is(err, ErrMemory) {
				t.Fatalf("UnmarshalBinary: %v, want ErrMemory", err)
			}
		})
	}
}
