package profile

import (
	"errors"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// parseGradient is what a program that uses a profile's gradient
// compressors gives CheckGradients.
func parseGradient(s string) error {
	_, err := gradient.Parse(s)
	return err
}

// TestCheckGradients: Load keeps the gradient compressors' text;
// CheckGradients parses them with the caller's parser and locates the
// first it refuses, with its cause.
func TestCheckGradients(t *testing.T) {
	for _, c := range []struct {
		yaml      string
		line, col int
		msg       string
	}{
		{"version: 1\nrules:\n  - gradient: [\"topk(2)\"]\n", 3, 16, `rule 1: gradient: "topk(2)"`},
		{"version: 1\nrules:\n  - match: {dtype: f16}\n  - gradient: [\"topk(0.1)\", \"nope(1)\"]\n", 4, 29, `rule 2: gradient: "nope(1)"`},
	} {
		p, err := Load([]byte(c.yaml))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		err = p.CheckGradients(parseGradient)
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || !errors.Is(err, codec.ErrRecipe) {
			t.Fatalf("CheckGradients: %v (%T), want an *Error wrapping codec.ErrRecipe", err, err)
		}
		if e.Line != c.line || e.Column != c.col || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("CheckGradients: %v, want line %d, column %d and %q", err, c.line, c.col, c.msg)
		}
	}
	for _, name := range Builtins() {
		p, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckGradients(parseGradient); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}
