package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/tensorfile"
)

// TestHubRelay: an origin hub with the NATS server inside (--nats-listen)
// and a relay hub attached to it (--relay --nats): a client of the relay
// fetches each version of the origin's directory bit for bit, a version
// added while both run included.
func TestHubRelay(t *testing.T) {
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	write := func(v string, seed uint64) {
		t.Helper()
		os.MkdirAll(filepath.Join(models, "."+v), 0o755)
		f, err := os.Create(filepath.Join(models, "."+v, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if err := tensorfile.WriteSafetensors(f, model(seed), nil); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Rename(filepath.Join(models, "."+v), filepath.Join(models, v)); err != nil {
			t.Fatal(err)
		}
	}
	write("1", 1)
	_, stopOrigin := startHub(t, "--dir", models, "--watch", "20ms", "--nats-listen", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="NATS server" addr=(\S+)`).FindStringSubmatch(lastHubLog.String())
	if m == nil {
		t.Fatalf("no NATS address in the origin's log:\n%s", lastHubLog.String())
	}
	relay, stopRelay := startHub(t, "--relay", "--nats", "nats://"+m[1])
	defer stopOrigin()
	defer stopRelay()

	get := func(v string, seed uint64) {
		t.Helper()
		out := filepath.Join(dir, "v"+v+".safetensors")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if code := run([]string{"fetch", "--hub", relay, "--version", v, "--out", out}, new(syncBuffer), new(syncBuffer)); code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the relay never served version %s", v)
			}
		}
		st, err := tensorfile.OpenSafetensorsFile(out)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, x := range model(seed) {
			got, err := st.Read(x.Name)
			if err != nil || string(got.Data) != string(x.Data) {
				t.Fatalf("version %s: %q differs (%v)", v, x.Name, err)
			}
		}
	}
	get("1", 1)
	write("2", 2)
	get("2", 2)
}
