package natsfan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/nats-io/nats.go/jetstream"
)

// errStalled marks a get that went StallTimeout without a chunk.
var errStalled = errors.New("stalled")

// objectReader reads an object of the store the way nats.go's
// ObjectStore.Get does (its chunks in order from the bucket's stream,
// the SHA-256 digest checked at the end), but through an ordered pull
// consumer of its own, so that a read ends when the get's context does,
// when no chunk came for StallTimeout, or when the reader is closed.
// nats.go's reader does none of these between chunks: once its context
// is cancelled it stops consuming, and the read waiting for the next
// chunk waits until the get's deadline, holding the lock its Close needs.
type objectReader struct {
	ctx  context.Context
	name string
	it   jetstream.MessagesContext
	stop func() bool // ends the AfterFunc that stops it with ctx

	size, n int64 // the object's size, the bytes read so far
	cur     []byte
	sum     hash.Hash
	want    []byte // the digest the description gives
	err     error  // sticky
}

// getPull is how many chunks a get asks for at a time: what it holds
// beyond the chunk being read.
const getPull = 4

// getObject opens object name of store, reached through js, for reading.
// A deleted object is jetstream.ErrObjectNotFound, as for Get. Its
// description and the consumer are asked for within StallTimeout.
func getObject(ctx context.Context, js jetstream.JetStream, store jetstream.ObjectStore, name string) (*objectReader, error) {
	sctx, cancel := context.WithTimeout(ctx, StallTimeout)
	defer cancel()
	info, err := store.GetInfo(sctx, name)
	if err != nil {
		return nil, err
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, fmt.Errorf("natsfan: object %q is a link", name)
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("natsfan: object %q: digest %q: %w", name, info.Digest, err)
	}
	o := &objectReader{ctx: ctx, name: name, size: int64(info.Size), sum: sha256.New(), want: want}
	if info.Size == 0 {
		return o, nil
	}
	cons, err := js.OrderedConsumer(sctx, fmt.Sprintf(streamTmpl, info.Bucket), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{fmt.Sprintf(chunkTmpl, info.Bucket, info.NUID)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("natsfan: object %q: a consumer: %w", name, err)
	}
	o.it, err = cons.Messages(jetstream.PullMaxMessages(getPull))
	if err != nil {
		return nil, fmt.Errorf("natsfan: object %q: a consumer: %w", name, err)
	}
	o.stop = context.AfterFunc(ctx, o.it.Stop)
	return o, nil
}

// Read reads the object's bytes; at its end it checks the digest.
func (o *objectReader) Read(p []byte) (int, error) {
	for len(o.cur) == 0 && o.err == nil {
		if o.n == o.size {
			if !bytes.Equal(o.sum.Sum(nil), o.want) {
				o.err = fmt.Errorf("natsfan: object %q: %w", o.name, jetstream.ErrDigestMismatch)
			} else {
				o.err = io.EOF
			}
			break
		}
		o.err = o.next()
	}
	if len(o.cur) == 0 {
		return 0, o.err
	}
	k := copy(p, o.cur)
	o.cur = o.cur[k:]
	return k, nil
}

// next takes the object's next chunk into o.cur.
func (o *objectReader) next() error {
	ctx, cancel := context.WithTimeoutCause(o.ctx, StallTimeout, errStalled)
	defer cancel()
	m, err := o.it.Next(jetstream.NextContext(ctx))
	switch {
	case o.ctx.Err() != nil:
		return fmt.Errorf("natsfan: object %q: %w", o.name, context.Cause(o.ctx))
	case errors.Is(context.Cause(ctx), errStalled):
		return fmt.Errorf("natsfan: object %q: no chunk for %v after %d of %d bytes: %w", o.name, StallTimeout, o.n, o.size, errStalled)
	case err != nil:
		return fmt.Errorf("natsfan: object %q: %w", o.name, err)
	}
	d := m.Data()
	if int64(len(d)) > o.size-o.n {
		return fmt.Errorf("natsfan: object %q: chunks longer than its %d bytes", o.name, o.size)
	}
	o.sum.Write(d)
	o.n += int64(len(d))
	o.cur = d
	return nil
}

// Close stops the consumer; a Read in progress returns.
func (o *objectReader) Close() error {
	if o.it != nil {
		o.stop()
		o.it.Stop()
	}
	return nil
}
