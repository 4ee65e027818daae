package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// TestDirWatcher: versions that appear in the directory are published as
// a poll finds them; one whose file is still being written waits for a
// later poll (logged once); the files of versions the hub dropped are
// closed a grace period later.
func TestDirWatcher(t *testing.T) {
	dir := t.TempDir()
	write := func(v string, seed uint64, cut int) {
		t.Helper()
		var b bytes.Buffer
		if err := tensorfile.WriteSafetensors(&b, model(seed), nil); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, v, "model.safetensors"), b.Bytes()[:b.Len()-cut], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1", 1, 0)
	h, err := hub.New(hub.WithRetention(2))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	w := newDirWatcher(h, dir, 2, slog.New(slog.NewTextHandler(&logs, nil)))
	defer w.Close()
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	held := func() (vs []uint64) {
		for _, info := range h.Versions() {
			vs = append(vs, info.Version)
		}
		return vs
	}
	now := time.Now()
	write("2", 2, 100) // still being written
	write(".3.tmp", 3, 0)
	w.poll(now)
	w.poll(now)
	if got := held(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("held %v after a partial version 2", got)
	}
	if n := strings.Count(logs.String(), "not published yet"); n != 1 {
		t.Errorf("partial version logged %d times:\n%s", n, logs.String())
	}
	write("2", 2, 0)
	if err := os.Rename(filepath.Join(dir, ".3.tmp"), filepath.Join(dir, "3")); err != nil {
		t.Fatal(err)
	}
	w.poll(now)
	if got := held(); len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("held %v, want [3 2]", got)
	}
	if len(w.open[1]) == 0 {
		t.Fatal("version 1's file closed at once")
	}
	w.poll(now.Add(closeGrace))
	if _, ok := w.open[1]; ok {
		t.Fatal("version 1's file still open after the grace period")
	}
}
