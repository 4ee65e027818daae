package hub

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/syncbuf"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// logBuffer is a log safe for a writer and a reader at once.
type logBuffer = syncbuf.Buffer

// writeVersion writes model m as dir/v/model.safetensors, cut bytes short.
func writeVersion(t *testing.T, dir, v string, m []*codec.Tensor, cut int) {
	t.Helper()
	var b bytes.Buffer
	if err := tensorfile.WriteSafetensors(&b, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, v, "model.safetensors"), b.Bytes()[:b.Len()-cut], 0o644); err != nil {
		t.Fatal(err)
	}
}

func held(h *Hub) (vs []uint64) {
	for _, info := range h.Versions() {
		vs = append(vs, info.Version)
	}
	return vs
}

// TestWatcher: versions that appear in the directory are published as a
// poll finds them; one whose file is still being written waits for a
// later poll (logged once); the files of versions the hub dropped are
// closed a grace period later.
func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	writeVersion(t, dir, "1", model(6, 1), 0)
	h, err := New(WithRetention(2))
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	w := NewWatcher(h, dir, 2, slog.New(slog.NewTextHandler(&logs, nil)))
	defer w.Close()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	writeVersion(t, dir, "2", model(6, 2), 100) // still being written
	writeVersion(t, dir, ".3.tmp", model(6, 3), 0)
	w.Poll(now)
	w.Poll(now)
	if got := held(h); len(got) != 1 || got[0] != 1 {
		t.Fatalf("held %v after a partial version 2", got)
	}
	if n := strings.Count(logs.String(), "version not served"); n != 1 {
		t.Errorf("partial version logged %d times:\n%s", n, logs.String())
	}
	writeVersion(t, dir, "2", model(6, 2), 0)
	if err := os.Rename(filepath.Join(dir, ".3.tmp"), filepath.Join(dir, "3")); err != nil {
		t.Fatal(err)
	}
	w.Poll(now)
	if got := held(h); len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("held %v, want [3 2]", got)
	}
	w.Poll(now) // finds version 1 dropped
	if !w.Open(1) {
		t.Fatal("version 1's file closed at once")
	}
	w.Poll(now.Add(DefaultCloseGrace))
	if w.Open(1) {
		t.Fatal("version 1's file still open after the grace period")
	}
}

// TestWatcherStartsWithBadVersions: a directory whose newest version is
// corrupt, whose next is unreadable and whose next breaks the layout
// starts: each is logged as a warning naming its file and why, and the
// newest good versions are served, up to the retention.
func TestWatcherStartsWithBadVersions(t *testing.T) {
	dir := t.TempDir()
	for v, seed := range map[string]uint64{"1": 1, "2": 2, "3": 3} {
		writeVersion(t, dir, v, model(6, seed), 0)
	}
	writeVersion(t, dir, "6", model(6, 6), 0)
	// 6: a safetensors file whose header is garbage.
	bad := filepath.Join(dir, "6", "model.safetensors")
	if err := os.WriteFile(bad, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{not json at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	// 5: a file that cannot be read (a link to nothing: root reads any
	// file whatever its mode).
	unreadable := filepath.Join(dir, "5", "model.safetensors")
	os.MkdirAll(filepath.Dir(unreadable), 0o755)
	if err := os.Symlink(filepath.Join(dir, "gone"), unreadable); err != nil {
		t.Fatal(err)
	}
	// 4: .npy and .safetensors files mixed.
	writeVersion(t, dir, "4", model(6, 4), 0)
	os.WriteFile(filepath.Join(dir, "4", "x.npy"), nil, 0o644)

	h, err := New(WithRetention(2))
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	w := NewWatcher(h, dir, 2, slog.New(slog.NewTextHandler(&logs, nil)))
	defer w.Close()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	if got := held(h); len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("held %v, want [3 2]\n%s", got, logs.String())
	}
	out := logs.String()
	for _, want := range []string{"version=6", bad, "version=5", unreadable + ": no such file", "version=4", "want one .safetensors file or .npy files"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the log:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "level=WARN msg=\"version not served"); n != 3 {
		t.Errorf("%d warnings, want 3:\n%s", n, out)
	}
	// A directory with no version at all is a misconfiguration.
	if err := NewWatcher(h, t.TempDir(), 2, slog.New(slog.DiscardHandler)).Start(); err == nil {
		t.Error("an empty directory started")
	}
}

// TestVersionDir: the layout rules, and a version's tensors read one at
// a time, from a safetensors file and from .npy files alike.
func TestVersionDir(t *testing.T) {
	dir := t.TempDir()
	m := model(5, 9)
	writeVersion(t, dir, "1", m, 0)
	npyDir := filepath.Join(dir, "2")
	os.MkdirAll(npyDir, 0o755)
	for _, x := range m {
		f, err := os.Create(filepath.Join(npyDir, x.Name+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		if err := tensorfile.WriteNpy(f, x); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	os.WriteFile(filepath.Join(npyDir, "README"), []byte("ignored"), 0o644)
	for _, v := range []string{"1", "2"} {
		vd, err := OpenVersion(filepath.Join(dir, v))
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for x, err := range vd.Tensors() {
			if err != nil {
				t.Fatal(err)
			}
			if x.Name != m[i].Name || !bytes.Equal(x.Data, m[i].Data) {
				t.Fatalf("version %s: tensor %d is %q", v, i, x.Name)
			}
			i++
		}
		if i != len(m) {
			t.Fatalf("version %s: %d tensors", v, i)
		}
	}
	empty := filepath.Join(dir, "3")
	os.MkdirAll(empty, 0o755)
	os.WriteFile(filepath.Join(empty, "README"), nil, 0o644)
	if _, err := OpenVersion(empty); err == nil || !strings.Contains(err.Error(), "found 0 and 0") {
		t.Errorf("no tensor file: %v", err)
	}
	if vs, err := Versions(dir); err != nil || len(vs) != 3 {
		t.Errorf("versions %v, %v", vs, err)
	}
}
