package natsfan

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The object store's layout, as nats.go's jetstream.ObjectStore reads it
// (jetstream/object.go): the bucket's stream, an object's chunks on a
// subject of their own (a fresh identifier per put), and its description,
// a JSON ObjectInfo rolled up on a subject named by the object's name.
const (
	streamTmpl  = "OBJ_%s"
	chunkTmpl   = "$O.%s.C.%s"
	metaTmpl    = "$O.%s.M.%s"
	digestTmpl  = "SHA-256=%s"
	rollupHdr   = "Nats-Rollup"
	rollupValue = "sub"
)

// PutWindow is how many chunks a put has in flight (published, not yet
// acknowledged): each holds its own buffer of ChunkSize bytes until its
// acknowledgement.
var PutWindow = 16

// chunkTries is how many times a chunk is published (the same bytes, the
// same message ID) before the attempt gives up.
const chunkTries = 6

// pending is a chunk published and not yet acknowledged.
type pending struct {
	i     int
	msg   *nats.Msg // its Data is the chunk's own buffer
	id    string
	fut   jetstream.PubAckFuture
	tries int
}

// objectWriter writes one object the way nats.go's ObjectStore.Put lays
// it out, but each chunk from its own buffer and acknowledged (published
// again from the same bytes, with the same message ID, where no
// acknowledgement came), and the description published only after every
// chunk's acknowledgement.
type objectWriter struct {
	ctx    context.Context
	js     jetstream.JetStream
	bucket string
	nuid   string
	subj   string
	buf    []byte
	digest hash.Hash
	size   uint64
	n      int
	seqs   []uint64
	window []*pending
	pubErr error // the first failure to publish a chunk

	republished func() // called for each chunk published again
}

func newNUID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Write cuts p into chunks and publishes each full one.
func (w *objectWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, ChunkSize)
		}
		k := min(len(p), ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == ChunkSize {
			if err := w.flush(); err != nil {
				w.pubErr = cmp.Or(w.pubErr, err)
				return 0, err
			}
		}
	}
	return n, nil
}

// flush publishes the buffered chunk: the buffer is the message's until
// its acknowledgement, a new one takes its place.
func (w *objectWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	for len(w.window) >= PutWindow {
		if err := w.settle(); err != nil {
			return err
		}
	}
	w.digest.Write(w.buf)
	w.size += uint64(len(w.buf))
	p := &pending{i: w.n, msg: &nats.Msg{Subject: w.subj, Data: w.buf, Header: nats.Header{}},
		id: w.nuid + "." + strconv.Itoa(w.n)}
	w.buf = nil
	w.n++
	w.seqs = append(w.seqs, 0)
	if err := w.publish(p); err != nil {
		return err
	}
	w.window = append(w.window, p)
	return nil
}

func (w *objectWriter) publish(p *pending) error {
	p.tries++
	fut, err := w.js.PublishMsgAsync(p.msg, jetstream.WithMsgID(p.id))
	if err != nil {
		return fmt.Errorf("chunk %d: %w", p.i, err)
	}
	p.fut = fut
	return nil
}

// settle waits for the oldest chunk in flight: its acknowledgement, or,
// failing that, publishes it again (the same bytes and message ID: the
// stream keeps one copy if the first did arrive) until chunkTries.
func (w *objectWriter) settle() error {
	p := w.window[0]
	for {
		select {
		case ack := <-p.fut.Ok():
			w.seqs[p.i] = ack.Sequence
			w.window = w.window[1:]
			return nil
		case err := <-p.fut.Err():
			if p.tries >= chunkTries || w.ctx.Err() != nil {
				return fmt.Errorf("chunk %d: no acknowledgement after %d publishes: %w", p.i, p.tries, err)
			}
			select {
			case <-time.After(time.Duration(p.tries) * 200 * time.Millisecond):
			case <-w.ctx.Done():
				return w.ctx.Err()
			}
			if w.republished != nil {
				w.republished()
			}
			if err := w.publish(p); err != nil {
				return err
			}
		case <-w.ctx.Done():
			return w.ctx.Err()
		}
	}
}

// finish publishes the last chunk, waits for every acknowledgement and
// checks that the stream holds the chunks, each once, in order.
func (w *objectWriter) finish() error {
	if err := w.flush(); err != nil {
		return err
	}
	for len(w.window) > 0 {
		if err := w.settle(); err != nil {
			return err
		}
	}
	for i := 1; i < len(w.seqs); i++ {
		if w.seqs[i] <= w.seqs[i-1] {
			return fmt.Errorf("chunk %d stored at sequence %d, before chunk %d (%d)", i, w.seqs[i], i-1, w.seqs[i-1])
		}
	}
	st, err := w.js.Stream(w.ctx, fmt.Sprintf(streamTmpl, w.bucket))
	if err != nil {
		return err
	}
	si, err := st.Info(w.ctx, jetstream.WithSubjectFilter(w.subj))
	if err != nil {
		return err
	}
	if got := si.State.Subjects[w.subj]; got != uint64(w.n) {
		return fmt.Errorf("the stream holds %d chunks of the %d put", got, w.n)
	}
	return nil
}

// purge removes the attempt's chunks (after the acknowledgements still
// due, so that none lands after the purge).
func (w *objectWriter) purge(ctx context.Context) error {
	for _, p := range w.window {
		select {
		case <-p.fut.Ok():
		case <-p.fut.Err():
		case <-ctx.Done():
		}
	}
	w.window = nil
	st, err := w.js.Stream(ctx, fmt.Sprintf(streamTmpl, w.bucket))
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(w.subj))
}

// describe publishes the object's description (after finish), waiting for
// its acknowledgement, and returns it.
func (w *objectWriter) describe(meta jetstream.ObjectMeta) (*jetstream.ObjectInfo, error) {
	info := &jetstream.ObjectInfo{ObjectMeta: meta, Bucket: w.bucket, NUID: w.nuid, Size: w.size, Chunks: uint32(w.n),
		Digest: fmt.Sprintf(digestTmpl, base64.URLEncoding.EncodeToString(w.digest.Sum(nil)))}
	data, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: fmt.Sprintf(metaTmpl, w.bucket, base64.URLEncoding.EncodeToString([]byte(meta.Name))),
		Header: nats.Header{}, Data: data}
	m.Header.Set(rollupHdr, rollupValue)
	var last error
	for try := 1; try <= chunkTries; try++ {
		if _, last = w.js.PublishMsg(w.ctx, m); last == nil {
			info.ModTime = time.Now().UTC()
			return info, nil
		}
		if w.ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		case <-w.ctx.Done():
		}
	}
	return nil, fmt.Errorf("the description: %w", last)
}

// putObject writes an object named meta.Name into store's bucket from
// what write writes to its writer: chunks first, each acknowledged, then
// the description. A failed attempt purges its chunks; a description
// is never published for chunks that are not all stored, in order, once.
// The chunks of an earlier object of the name are purged after.
func putObject(ctx context.Context, js jetstream.JetStream, store jetstream.ObjectStore, meta jetstream.ObjectMeta,
	write func(io.Writer) error, republished func()) (*jetstream.ObjectInfo, error) {
	status, err := store.Status(ctx)
	if err != nil {
		return nil, err
	}
	old, err := store.GetInfo(ctx, meta.Name, jetstream.GetObjectInfoShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, err
	}
	w := &objectWriter{ctx: ctx, js: js, bucket: status.Bucket(), nuid: newNUID(), digest: sha256.New()}
	w.subj = fmt.Sprintf(chunkTmpl, w.bucket, w.nuid)
	w.republished = republished
	meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: ChunkSize}
	err = write(w)
	if err != nil && w.pubErr == nil {
		err = errEncode{err}
	}
	if err == nil {
		err = w.finish()
	}
	if err == nil {
		// A description whose publish got no acknowledgement may be
		// stored all the same: its chunks stay (they are whole), for it.
		return w.describeAndClean(meta, old)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if perr := w.purge(pctx); perr != nil {
		err = fmt.Errorf("%w (and purging its chunks: %v)", err, perr)
	}
	return nil, err
}

// describeAndClean publishes the description, then purges the chunks of
// old, the object of that name it replaces.
func (w *objectWriter) describeAndClean(meta jetstream.ObjectMeta, old *jetstream.ObjectInfo) (*jetstream.ObjectInfo, error) {
	info, err := w.describe(meta)
	if err != nil {
		return nil, err
	}
	if old != nil && !old.Deleted && old.NUID != "" && old.NUID != w.nuid {
		if st, err := w.js.Stream(w.ctx, fmt.Sprintf(streamTmpl, w.bucket)); err == nil {
			st.Purge(w.ctx, jetstream.WithPurgeSubject(fmt.Sprintf(chunkTmpl, w.bucket, old.NUID)))
		}
	}
	return info, nil
}
