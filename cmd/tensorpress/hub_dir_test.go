package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHubStartsWithBadVersion: a hub whose newest version directory
// holds a corrupt file starts, logs a warning naming the file and why,
// and serves the version before it; each fetch is logged at info.
func TestHubStartsWithBadVersion(t *testing.T) {
	models := hubModels(t)
	bad := filepath.Join(models, "2", "model.safetensors")
	os.MkdirAll(filepath.Dir(bad), 0o755)
	if err := os.WriteFile(bad, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{not json at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, stop := startHub(t, "--dir", models, "--watch", "0")
	out := filepath.Join(t.TempDir(), "v.safetensors")
	fetch(t, "--hub", addr, "--out", out)
	stop()
	log := lastHubLog.String()
	for _, re := range []string{
		`level=WARN msg="version not served; tried again at the next poll" version=2 err=".*` + regexp.QuoteMeta(bad),
		`level=INFO msg=serving version=1 tensors=9`,
		`level=INFO msg="reading version" version=1 tensors=9 bytes=\d+`,
		`level=INFO msg=fetch peer=127.0.0.1 chunks=\d+ bytes=\d+ duration=\S+ version=1 tensors=9 outcome=ok`,
	} {
		if !regexp.MustCompile(re).MatchString(log) {
			t.Errorf("no %s in the log:\n%s", re, log)
		}
	}
	if strings.Contains(log, "version=2 tensors") {
		t.Errorf("version 2 served:\n%s", log)
	}
}

// TestHubStartsEmpty: a hub watching a directory that holds no version
// yet starts, says it waits, and serves version 1 once it appears; with
// --watch 0 (no version could ever come) it refuses to start.
func TestHubStartsEmpty(t *testing.T) {
	empty := t.TempDir()
	var stderr bytes.Buffer
	if code := run([]string{"hub", "--dir", empty, "--watch", "0", "--listen", "127.0.0.1:0"}, new(bytes.Buffer), &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "no version directories") {
		t.Fatalf("--watch 0 on an empty directory: exit %d: %s", code, stderr.String())
	}
	addr, stop := startHub(t, "--dir", empty, "--watch", "50ms")
	defer stop()
	if log := lastHubLog.String(); !strings.Contains(log, `msg="no version yet; waiting for one"`) {
		t.Fatalf("no waiting in the log:\n%s", log)
	}
	// Version 1 written under another name, then renamed to its number.
	models := hubModels(t)
	if err := os.Rename(filepath.Join(models, "1"), filepath.Join(empty, "1")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(lastHubLog.String(), "msg=published version=1"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("version 1 not served:\n%s", lastHubLog.String())
		}
	}
	fetch(t, "--hub", addr, "--out", filepath.Join(t.TempDir(), "v.safetensors"))
}
