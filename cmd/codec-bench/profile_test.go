package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/profile"
)

const goodProfile = `version: 1
name: test
recipes:
  fast: "shuffle4 | plane3:huff0 | plane0..2:raw"
  zstd1: "zstd(1)"
rules:
  - match: {dtype: f32}
    require_lossless: true
    recipes: [fast, zstd1]
`

const badProfile = `version: 1
rules:
  - require_lossless: true
    recipes: ["int8(4096) | *:zstd(1)"]
`

func TestProfileValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", []byte(goodProfile))
	bad := writeFile(t, "bad.yaml", []byte(badProfile))

	code, out, errs := cli(t, "profile", "validate", good)
	if code != 0 || out != good+": ok (2 rules, 2 recipes)\n" || errs != "" {
		t.Errorf("validate good: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	code, out, errs = cli(t, "profile", "validate", bad)
	want := bad + `: line 4, column 15: rule 1 (require_lossless): recipe "int8(4096) | *:zstd(1)" is lossy`
	if code != 1 || out != "" || !strings.Contains(errs, want) {
		t.Errorf("validate bad: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errs, want)
	}

	code, out, errs = cli(t, "profile", "validate", good, bad)
	if code != 1 || !strings.Contains(out, good+": ok") || !strings.Contains(errs, want) || !strings.Contains(errs, "1 of 2 profiles invalid") {
		t.Errorf("validate good bad: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	if code, _, errs := cli(t, "profile", "validate", filepath.Join(t.TempDir(), "none.yaml")); code != 1 || !strings.Contains(errs, "none.yaml") {
		t.Errorf("validate missing file: exit %d, stderr %q", code, errs)
	}
}

func TestProfileShow(t *testing.T) {
	good := writeFile(t, "good.yaml", []byte(goodProfile))
	out := mustCLI(t, "profile", "show", good)
	p, err := profile.Load([]byte(out))
	if err != nil {
		t.Fatalf("show output does not load: %v\n%s", err, out)
	}
	if p.Name != "test" || len(p.Rules) != 2 || !strings.Contains(out, "max_decoded_size: 256MiB") {
		t.Errorf("show output:\n%s", out)
	}
	// The output validates as a file, too.
	shown := writeFile(t, "shown.yaml", []byte(out))
	mustCLI(t, "profile", "validate", shown)

	for _, name := range profile.Builtins() {
		out := mustCLI(t, "profile", "show", name)
		if !strings.Contains(out, "name: "+name+"\n") {
			t.Errorf("show %s:\n%s", name, out)
		}
	}

	if code, _, errs := cli(t, "profile", "show", "no-such-profile"); code != 1 || !strings.Contains(errs, "lossless-fast") {
		t.Errorf("show unknown: exit %d, stderr %q", code, errs)
	}
	bad := writeFile(t, "bad.yaml", []byte(badProfile))
	if code, _, errs := cli(t, "profile", "show", bad); code != 1 || !strings.Contains(errs, "line 4, column 15") {
		t.Errorf("show bad: exit %d, stderr %q", code, errs)
	}

	// A file of a built-in's name comes first.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "archival"), []byte(goodProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if out := mustCLI(t, "profile", "show", "archival"); !strings.Contains(out, "name: test\n") {
		t.Errorf("show archival with a file called archival:\n%s", out)
	}
}

func TestProfileList(t *testing.T) {
	out := mustCLI(t, "profile", "list")
	for _, name := range append(profile.Builtins(), "NAME") {
		if !strings.Contains(out, name) {
			t.Errorf("list does not show %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "Lossless and fast") {
		t.Errorf("list shows no descriptions:\n%s", out)
	}
}

func TestProfileUsage(t *testing.T) {
	for _, args := range [][]string{
		{"profile"},
		{"profile", "frob"},
		{"profile", "validate"},
		{"profile", "show"},
		{"profile", "show", "a", "b"},
		{"profile", "list", "extra"},
		{"profile", "validate", "--nope", "x.yaml"},
	} {
		if code, _, _ := cli(t, args...); code != 2 {
			t.Errorf("codec-bench %q: exit %d, want 2", args, code)
		}
	}
	for _, args := range [][]string{
		{"profile", "-h"},
		{"help", "profile"},
		{"profile", "validate", "-h"},
		{"profile", "show", "-h"},
	} {
		if code, _, errs := cli(t, args...); code != 0 || !strings.Contains(errs, "Usage: codec-bench profile") {
			t.Errorf("codec-bench %q: exit %d, stderr %q", args, code, errs)
		}
	}
}
