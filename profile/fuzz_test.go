package profile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad checks that Load never panics and that an accepted profile's
// Effective output loads again to the same Effective output.
func FuzzLoad(f *testing.F) {
	for _, name := range Builtins() {
		data, err := builtinFS.ReadFile("builtin/" + name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, c := range badCases {
		if len(c.yaml) < 64<<10 {
			f.Add([]byte(c.yaml))
		}
	}
	f.Add([]byte(matchProfile))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load(data)
		if err != nil {
			if p != nil {
				t.Fatalf("Load returned a profile and an error: %v", err)
			}
			return
		}
		b, err := p.Effective()
		if err != nil {
			t.Fatalf("Effective: %v", err)
		}
		q, err := Load(b)
		if err != nil {
			t.Fatalf("Effective output does not load: %v\n%s", err, b)
		}
		b2, err := q.Effective()
		if err != nil {
			t.Fatalf("Effective again: %v", err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("Effective output changed on reload:\n%s\n----\n%s", b, b2)
		}
	})
}
