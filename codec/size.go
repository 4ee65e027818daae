package codec

import (
	"bufio"
	"io"
)

// DecodedSize reads a stream of frames from r to its end without
// decoding any payload, and returns what its data frames claim to decode
// to, in bytes: the sum of the raw lengths in their checked headers. A
// service charges this to its memory budget before it decodes what a
// peer sent (package budget). Each header is checked as a Reader checks
// it (CRC, lim), so the claim is what a Reader will hold the frames to;
// a payload cut short is io.ErrUnexpectedEOF. Payloads are skipped, not
// checked.
func DecodedSize(r io.Reader, lim Limits) (int64, error) {
	br, ok := r.(interface {
		io.Reader
		io.ByteReader
	})
	if !ok {
		br = bufio.NewReaderSize(r, 4096)
	}
	lim = lim.withDefaults()
	var total int64
	var buf []byte
	for {
		h, b, err := ReadFrameHeader(br, br, lim, buf)
		buf = b
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		for _, e := range h.Entries {
			total += e.RawLen
		}
		skip := h.FrameLen() - int64(h.HeaderLen)
		if n, err := io.CopyN(io.Discard, br, skip); err != nil || n != skip {
			return total, io.ErrUnexpectedEOF
		}
	}
}
