package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
