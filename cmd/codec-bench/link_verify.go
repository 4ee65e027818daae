package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"
)

// received is what the receiving side of a transfer got.
type received struct {
	n      int64
	sum    [sha256.Size]byte // SHA-256 of the n bytes, when hashed
	hashed bool
	first  time.Time // when a Read first returned decoded bytes (zero: never)
}

// receiveHashed reads r to its end, hashing every byte, and notes when
// the first byte arrived.
func receiveHashed(r io.Reader) (received, error) {
	var got received
	h := sha256.New()
	buf := make([]byte, 256<<10)
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if got.n == 0 {
				got.first = time.Now()
			}
			h.Write(buf[:k])
			got.n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return got, err
		}
	}
	h.Sum(got.sum[:0])
	got.hashed = true
	return got, nil
}

// streamHash is the SHA-256 of the first n bytes of the workload's
// stream (its chunks in turn, repeating): the bytes every sender writes.
func (wl *workload) streamHash(n int64) [sha256.Size]byte {
	h := sha256.New()
	for i := 0; n > 0; i++ {
		c := wl.chunks[i%len(wl.chunks)]
		c = c[:min(int64(len(c)), n)]
		h.Write(c)
		n -= int64(len(c))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// sentHash is streamHash(n), computed once per n.
func (b *linkBench) sentHash(n int64) [sha256.Size]byte {
	b.hashMu.Lock()
	defer b.hashMu.Unlock()
	if b.hashes == nil {
		b.hashes = map[int64][sha256.Size]byte{}
	}
	sum, ok := b.hashes[n]
	if !ok {
		sum = b.work.streamHash(n)
		b.hashes[n] = sum
	}
	return sum
}

// errTransferMismatch is the error of a transfer whose receiver did not
// get the bytes sent.
var errTransferMismatch = errors.New("link: the receiver did not get the bytes sent")

// checkReceived compares what the receiver got with the sent bytes (n
// of them, with SHA-256 want): their number, and their hash when the
// receiver hashed them.
func checkReceived(got received, n int64, want [sha256.Size]byte) error {
	if got.n != n {
		return fmt.Errorf("%w: received %d of %d bytes", errTransferMismatch, got.n, n)
	}
	if got.hashed && got.sum != want {
		return fmt.Errorf("%w: SHA-256 of the %d bytes received is %x, of those sent %x", errTransferMismatch, n, got.sum, want)
	}
	return nil
}
