package profile

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

//go:embed builtin/*.yaml
var builtinFS embed.FS

// Builtins returns the names of the built-in profiles, sorted.
func Builtins() []string {
	entries, _ := fs.ReadDir(builtinFS, "builtin") // embedded: cannot fail
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Builtin loads the built-in profile called name. Each call returns a new
// Profile.
func Builtin(name string) (*Profile, error) {
	if !slices.Contains(Builtins(), name) {
		return nil, fmt.Errorf("profile: no built-in profile %q (have %s)", name, strings.Join(Builtins(), ", "))
	}
	data, err := builtinFS.ReadFile("builtin/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("profile: built-in %s: %w", name, err)
	}
	p, err := Load(data)
	if e, ok := err.(*Error); ok {
		e.File = "builtin/" + name + ".yaml"
	}
	return p, err
}
