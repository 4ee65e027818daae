package natsfan

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestGetObject: getObject reads back, bit for bit, what nats.go's Put
// and putObject store; it refuses a missing or deleted object, a wrong
// digest and chunks longer than described. An object described as longer
// than its chunks stalls, and the read ends with errStalled after
// StallTimeout, or at once when the get's context is cancelled or the
// reader is closed. (nats.go's reader stayed in such a read until the
// get's deadline, and its Close waited for that read: a relay that was
// stopped in the middle of a get never stopped.)
func TestGetObject(t *testing.T) {
	nodes := startCluster(t, 1)
	_, js := connect(t, nodes[0].url)
	st := openStore(t, js, 1)
	ctx := context.Background()
	data := make([]byte, 3*ChunkSize+100)
	rand.Read(data)
	if _, err := st.PutBytes(ctx, "theirs", data); err != nil { // chunks of 128 KiB
		t.Fatal(err)
	}
	if _, err := putObject(ctx, js, st, jetstream.ObjectMeta{Name: "ours"}, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutBytes(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"theirs": data, "ours": data, "empty": {}} {
		o, err := getObject(ctx, js, st, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(o)
		o.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes of %d, %v", name, len(got), len(want), err)
		}
	}
	if err := st.Delete(ctx, "theirs"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"none", "theirs"} {
		if _, err := getObject(ctx, js, st, name); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("%s: %v, want ErrObjectNotFound", name, err)
		}
	}

	// Objects whose descriptions do not match their chunks.
	bad := func(name string, n int, tamper func(w *objectWriter)) {
		t.Helper()
		w := &objectWriter{ctx: ctx, js: js, bucket: DefaultBucket, nuid: newNUID(), digest: sha256.New()}
		w.subj = fmt.Sprintf(chunkTmpl, w.bucket, w.nuid)
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		if err := w.finish(); err != nil {
			t.Fatal(err)
		}
		tamper(w)
		if _, err := w.describe(jetstream.ObjectMeta{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	bad("digest", 1000, func(w *objectWriter) { w.digest.Write([]byte{1}) })
	bad("long", ChunkSize+10, func(w *objectWriter) { w.size -= 5 })
	bad("short", ChunkSize+10, func(w *objectWriter) { w.size += ChunkSize })
	for name, want := range map[string]error{"digest": jetstream.ErrDigestMismatch, "long": nil} {
		o, err := getObject(ctx, js, st, name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(o)
		o.Close()
		if err == nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", name, err, want)
		}
		t.Logf("%s: %v", name, err)
	}

	stall := StallTimeout
	t.Cleanup(func() { StallTimeout = stall })
	StallTimeout = 300 * time.Millisecond
	o, err := getObject(ctx, js, st, "short")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	o.Close()
	if !errors.Is(err, errStalled) || !bytes.Equal(got, data[:ChunkSize+10]) {
		t.Fatalf("stalled: %d bytes, %v", len(got), err)
	}
	t.Logf("stalled: %v", err)

	// Cancelled, then closed, while a read waits for the chunk that
	// does not come.
	StallTimeout = time.Hour
	for _, how := range []string{"cancelled", "closed"} {
		cctx, cancel := context.WithCancel(ctx)
		o, err := getObject(cctx, js, st, "short")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(o, make([]byte, ChunkSize+10)); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, func() {
			if how == "cancelled" {
				cancel()
			} else {
				o.Close()
			}
		})
		n, err := o.Read(make([]byte, 10))
		o.Close()
		cancel()
		if n != 0 || err == nil || how == "cancelled" && !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %d bytes, %v", how, n, err)
		}
		t.Logf("%s: %v", how, err)
	}
}
