package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/tensorpress/tensorpress/profile"
)

const configText = `
Every flag can also come from --config FILE, a YAML map from flag names to
values (the command line wins where both set one):

  # tensorpress hub --config hub.yaml
  dir: /srv/models
  listen: 0.0.0.0:7077
  token-file: /etc/tensorpress/token
  profile: /etc/tensorpress/profile.yaml
  metrics: 127.0.0.1:9090
  log-level: debug
`

// readConfig sets, from the YAML map in file, the flags of fs that the
// command line did not set.
func readConfig(fs *flag.FlagSet, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d:%d: want a map of flag names to values", file, m.Line, m.Column)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := fs.Lookup(k.Value)
		switch {
		case f == nil || k.Value == "config":
			return fmt.Errorf("%s:%d:%d: %q is not a flag of %s", file, k.Line, k.Column, k.Value, fs.Name())
		case v.Kind != yaml.ScalarNode:
			return fmt.Errorf("%s:%d:%d: %s: want a single value", file, v.Line, v.Column, k.Value)
		case set[k.Value]:
			continue
		}
		if err := fs.Set(k.Value, v.Value); err != nil {
			return fmt.Errorf("%s:%d:%d: %s: %v", file, v.Line, v.Column, k.Value, err)
		}
		set[k.Value] = true
	}
	return nil
}

// logFlags adds --log-level and --log-format to fs; the function it
// returns makes the logger they ask for, writing to w.
func logFlags(fs *flag.FlagSet, w io.Writer) func() (*slog.Logger, error) {
	level := fs.String("log-level", "info", "least `level` logged: debug, info, warn or error")
	format := fs.String("log-format", "text", "log `format`: text (key=value) or json")
	return func() (*slog.Logger, error) {
		var l slog.Level
		if err := l.UnmarshalText([]byte(*level)); err != nil {
			return nil, usagef("--log-level %q: want debug, info, warn or error", *level)
		}
		o := &slog.HandlerOptions{Level: l}
		switch strings.ToLower(*format) {
		case "text":
			return slog.New(slog.NewTextHandler(w, o)), nil
		case "json":
			return slog.New(slog.NewJSONHandler(w, o)), nil
		}
		return nil, usagef("--log-format %q: want text or json", *format)
	}
}

// byteSize is a flag of a byte count, written as a number with or without
// a unit ("256MiB", "64KiB", "1GB", "1048576").
type byteSize int64

func (b *byteSize) String() string { return profile.FormatSize(int64(*b)) }

func (b *byteSize) Set(s string) error {
	n, err := profile.ParseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// sizeFlag defines a byteSize flag with a default value.
func sizeFlag(fs *flag.FlagSet, name string, def int64, usage string) *int64 {
	b := byteSize(def)
	fs.Var(&b, name, usage)
	return (*int64)(&b)
}
