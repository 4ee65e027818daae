package hub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// TestWriteVersion: the frames WriteVersion writes read back, with a
// codec.Reader and nothing else, as the version's tensors bit for bit;
// they come from the cache that lossless fetches use (a second write
// encodes nothing).
func TestWriteVersion(t *testing.T) {
	h, err := New(WithChunkSize(64 << 10))
	if err != nil {
		t.Fatal(err)
	}
	m := model(24, 7)
	if err := h.Publish(3, m); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := h.WriteVersion(context.Background(), 0, &buf); err != nil {
		t.Fatal(err)
	}
	encodes := h.encodes.Load()
	r, err := codec.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for {
		tt, err := r.ReadTensor()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[tt.Name] = bytes.Clone(tt.Data)
	}
	if len(got) != len(m) {
		t.Fatalf("%d tensors read back, want %d", len(got), len(m))
	}
	for _, want := range m {
		if !bytes.Equal(got[want.Name], want.Data) {
			t.Errorf("%s differs", want.Name)
		}
	}
	var again bytes.Buffer
	if err := h.WriteVersion(context.Background(), 3, &again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), buf.Bytes()) || h.encodes.Load() != encodes {
		t.Errorf("a second write encoded %d chunks again", h.encodes.Load()-encodes)
	}
	if err := h.WriteVersion(context.Background(), 9, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("a version not held: %v", err)
	}
}
