package hub

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// A journal records every update a round counts, before the hub
// acknowledges it, so that a hub started again counts them again: an
// acknowledged update is never lost with the process. Each record is a
// little-endian uint32 length, the CRC-32C of the message, and the
// UploadMessage (protobuf). Records are written, not synced: they
// survive the process, not the machine.
type journal struct {
	mu    sync.Mutex
	f     *os.File
	round uint64
	buf   []byte
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// maxJournalRecord bounds a record a replay accepts.
const maxJournalRecord = 1 << 30

// openJournal replays the journal at path into round id of h (when it
// exists), cutting a torn record at its end, and opens it for appending.
// It returns the updates replayed.
func (h *Hub) openJournal(path string, id uint64) (int, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("hub: journal: %w", err)
	}
	n, good, err := h.replay(f, id)
	if err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return 0, fmt.Errorf("hub: journal: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return 0, fmt.Errorf("hub: journal: %w", err)
	}
	h.mu.Lock()
	old := h.journal
	h.journal = &journal{f: f, round: id}
	h.mu.Unlock()
	if old != nil {
		old.close()
	}
	return n, nil
}

// replay adds the journal's updates into round id and returns how many,
// and the length of its whole records.
func (h *Hub) replay(f *os.File, id uint64) (n int, good int64, err error) {
	r := bufio.NewReader(f)
	// What the journal holds was accepted within the upload limits of
	// the process that wrote it, which may have been higher, and by a
	// release that may not have refused non-finite values.
	lim := h.upload
	lim.MaxSlowDecoded = math.MaxInt64
	recv, err := gradient.NewReceiver(codec.WithLimits(lim), codec.WithFiniteAdd(false))
	if err != nil {
		return 0, 0, err
	}
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return n, good, nil // the end, or a torn header
		}
		size, sum := binary.LittleEndian.Uint32(hdr[:4]), binary.LittleEndian.Uint32(hdr[4:])
		if size > maxJournalRecord {
			return n, good, nil
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil || crc32.Checksum(b, crcTable) != sum {
			return n, good, nil // torn: the process died writing it
		}
		var m hubpb.UploadMessage
		if err := proto.Unmarshal(b, &m); err != nil {
			return n, good, fmt.Errorf("%w: hub: journal record at %d: %v", codec.ErrCorrupt, good, err)
		}
		if m.Round != id {
			return n, good, fmt.Errorf("%w: hub: journal of round %d holds an update of round %d", codec.ErrCorrupt, id, m.Round)
		}
		rd, err := h.round(id)
		if err != nil {
			return n, good, err
		}
		if _, err := rd.add(recv, m.Peer, m.Frame, weightOf(&m), h.budget, nil); err != nil {
			return n, good, fmt.Errorf("hub: journal record at %d: %w", good, err)
		}
		h.updates.Add(1)
		n++
		good += int64(len(hdr) + len(b))
	}
}

// record appends m to the journal when it is round m.Round's.
func (j *journal) record(m *hubpb.UploadMessage) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil || m.Round != j.round {
		return nil
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(j.buf[:0], m)
	if err != nil {
		return err
	}
	j.buf = b
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:4], uint32(len(b)))
	binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(b, crcTable))
	if _, err := j.f.Write(append(hdr[:], b...)); err != nil {
		return fmt.Errorf("hub: journal: %w", err)
	}
	return nil
}

func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// closeJournalFile stops journaling, leaving the file for a hub started
// again.
func (h *Hub) closeJournalFile() {
	h.mu.Lock()
	j := h.journal
	h.journal = nil
	h.mu.Unlock()
	if j != nil {
		j.close()
	}
}
