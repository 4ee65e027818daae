package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
	"go.yaml.in/yaml/v4/plugin/loaderlimits"

	"github.com/tensorpress/tensorpress/codec"
)

// Load parses and validates a profile (see docs/PROFILES.md). Every
// problem is an *Error that locates it and matches ErrInvalid; Load never
// panics, whatever the input.
func Load(data []byte) (*Profile, error) {
	if len(data) > MaxSize {
		return nil, &Error{Msg: fmt.Sprintf("profile is larger than %d bytes", MaxSize)}
	}
	root, err := parseYAML(data)
	if err != nil {
		return nil, err
	}
	d := &decoder{budget: MaxNodes}
	return d.profile(root)
}

// LoadFile reads and loads the profile in the file called name. Errors in
// the profile are *Error with File set to name; others (the file cannot
// be read) are not.
func LoadFile(name string) (*Profile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	p, err := Load(data)
	if e, ok := err.(*Error); ok {
		e.File = name
	}
	if p != nil {
		p.file = name
	}
	return p, err
}

// parseYAML parses exactly one YAML document, nested at most MaxDepth
// deep, and returns its root node.
func parseYAML(data []byte) (root *yaml.Node, err error) {
	// The YAML package is not ours: should it panic on some input, that
	// input is refused like any other bad profile.
	defer func() {
		if e := recover(); e != nil {
			root, err = nil, &Error{Msg: fmt.Sprintf("YAML: %v", e)}
		}
	}()
	l, err := yaml.NewLoader(bytes.NewReader(data), yaml.WithPlugin(loaderlimits.New(loaderlimits.DepthValue(MaxDepth))))
	if err != nil {
		return nil, &Error{Msg: "YAML loader", Err: err}
	}
	var doc yaml.Node
	if err := l.Load(&doc); err != nil {
		if err == io.EOF {
			return nil, &Error{Msg: "empty profile (want a mapping that starts with version: 1)"}
		}
		return nil, yamlError(err)
	}
	var next yaml.Node
	switch err := l.Load(&next); {
	case err == io.EOF:
	case err != nil:
		return nil, yamlError(err)
	default:
		return nil, errAt(&next, "a profile is a single YAML document; a second one starts here")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errAt(&doc, "want a YAML document")
	}
	return doc.Content[0], nil
}

// yamlError turns a YAML syntax error into an *Error.
func yamlError(err error) error {
	var le *yaml.LoadError
	if errors.As(err, &le) {
		return &Error{Line: le.Mark.Line, Column: le.Mark.Column, Msg: "YAML: " + le.Message}
	}
	return &Error{Msg: "YAML: " + err.Error()}
}

func errAt(n *yaml.Node, format string, args ...any) *Error {
	if n == nil {
		return &Error{Msg: fmt.Sprintf(format, args...)}
	}
	return &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)}
}

// quote quotes s for an error message, shortened to 80 bytes.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return strconv.Quote(s)
}

// decoder walks the node tree. budget counts the nodes still allowed to
// be visited (aliases count every time they are followed).
type decoder struct {
	budget int
}

// node counts n against the budget and follows an alias.
func (d *decoder) node(n *yaml.Node) (*yaml.Node, error) {
	d.budget--
	if d.budget < 0 {
		return nil, errAt(n, "profile too complex: more than %d YAML nodes (counting every use of an alias)", MaxNodes)
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil, errAt(n, "alias *%s has no anchor", n.Value)
		}
		a := n.Alias
		if a.Kind == yaml.AliasNode { // not produced by the parser; never follow chains
			return nil, errAt(n, "alias *%s refers to an alias", n.Value)
		}
		return a, nil
	}
	return n, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing (null)"
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		return "a value tagged " + n.Tag
	}
	return "a YAML node"
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// mapping calls fn for each key of the mapping n, in order. A key not in
// known, a repeated key, a non-string key or a merge key is an error.
func (d *decoder) mapping(n *yaml.Node, what string, known []string, fn func(key string, k, v *yaml.Node) error) error {
	n, err := d.node(n)
	if err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return errAt(n, "%s: want a mapping, got %s", what, kindName(n))
	}
	if len(n.Content)%2 != 0 {
		return errAt(n, "%s: malformed mapping", what)
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i < len(n.Content); i += 2 {
		k, err := d.node(n.Content[i])
		if err != nil {
			return err
		}
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" && k.Tag != "!!merge" {
			return errAt(k, "%s: want a field name, got %s", what, kindName(k))
		}
		key := k.Value
		if k.Tag == "!!merge" || key == "<<" {
			return errAt(k, "%s: merge keys (<<) are not supported", what)
		}
		if seen[key] {
			return errAt(k, "%s: field %s given twice", what, quote(key))
		}
		seen[key] = true
		if known != nil && !slices.Contains(known, key) {
			return errAt(k, "%s: unknown field %s (known: %s)", what, quote(key), strings.Join(known, ", "))
		}
		if err := fn(key, k, n.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// list calls fn for each item of n. A scalar is accepted as a list of one
// when one is true. An empty list is an error.
func (d *decoder) list(n *yaml.Node, what string, one bool, fn func(i int, v *yaml.Node) error) error {
	n, err := d.node(n)
	if err != nil {
		return err
	}
	if n.Kind == yaml.ScalarNode && one && !isNull(n) {
		return fn(0, n)
	}
	if n.Kind != yaml.SequenceNode {
		return errAt(n, "%s: want a list, got %s", what, kindName(n))
	}
	if len(n.Content) == 0 {
		return errAt(n, "%s: empty list (leave the field out instead)", what)
	}
	if len(n.Content) > MaxList {
		return errAt(n, "%s: more than %d items", what, MaxList)
	}
	for i, v := range n.Content {
		if err := fn(i, v); err != nil {
			return err
		}
	}
	return nil
}

// scalar returns the scalar node n (following an alias).
func (d *decoder) scalar(n *yaml.Node, what, want string) (*yaml.Node, error) {
	n, err := d.node(n)
	if err != nil {
		return nil, err
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return nil, errAt(n, "%s: want %s, got %s", what, want, kindName(n))
	}
	return n, nil
}

func (d *decoder) str(n *yaml.Node, what string) (string, *yaml.Node, error) {
	n, err := d.scalar(n, what, "a string")
	if err != nil {
		return "", nil, err
	}
	if n.Tag != "!!str" {
		return "", nil, errAt(n, "%s: want a string, got %s (quote it)", what, kindName(n))
	}
	return n.Value, n, nil
}

func (d *decoder) boolean(n *yaml.Node, what string) (bool, error) {
	n, err := d.scalar(n, what, "true or false")
	if err != nil {
		return false, err
	}
	if n.Tag == "!!bool" {
		switch strings.ToLower(n.Value) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, errAt(n, "%s: want true or false, got %s", what, quote(n.Value))
}

// integer reads an integer in [lo, hi].
func (d *decoder) integer(n *yaml.Node, what string, lo, hi int64) (int64, error) {
	n, err := d.scalar(n, what, "an integer")
	if err != nil {
		return 0, err
	}
	if n.Tag != "!!int" {
		return 0, errAt(n, "%s: want an integer, got %s", what, kindName(n))
	}
	v, err := parseInt(n.Value)
	if err != nil || v < lo || v > hi {
		return 0, errAt(n, "%s: %s is outside [%d, %d]", what, quote(n.Value), lo, hi)
	}
	return v, nil
}

func parseInt(s string) (int64, error) {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	}
	return strconv.ParseInt(s, 0, 64)
}

// number reads a number in [lo, hi]; excl excludes lo.
func (d *decoder) number(n *yaml.Node, what string, lo, hi float64, excl bool) (float64, error) {
	n, err := d.scalar(n, what, "a number")
	if err != nil {
		return 0, err
	}
	if n.Tag != "!!float" && n.Tag != "!!int" {
		return 0, errAt(n, "%s: want a number, got %s", what, kindName(n))
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil {
		if i, ierr := parseInt(n.Value); ierr == nil {
			v, err = float64(i), nil
		}
	}
	if err != nil || !(v >= lo && v <= hi) || excl && v == lo {
		lb := "["
		if excl {
			lb = "("
		}
		return 0, errAt(n, "%s: %s is outside %s%g, %g]", what, quote(n.Value), lb, lo, hi)
	}
	if v == 0 {
		v = 0 // not -0
	}
	return v, nil
}

// size reads a byte count (integer or "64KiB") in [lo, hi].
func (d *decoder) size(n *yaml.Node, what string, lo, hi int64) (int64, error) {
	n, err := d.scalar(n, what, "a size")
	if err != nil {
		return 0, err
	}
	var v int64
	switch n.Tag {
	case "!!int":
		v, err = parseInt(n.Value)
		if err != nil {
			err = fmt.Errorf("too large")
		}
	case "!!str":
		v, err = ParseSize(n.Value)
	default:
		return 0, errAt(n, "%s: want a size such as 65536, 64KiB or 1MiB, got %s", what, kindName(n))
	}
	if err != nil {
		return 0, errAt(n, "%s: %s: %v", what, quote(n.Value), err)
	}
	if v < lo || v > hi {
		return 0, errAt(n, "%s: %s is outside [%s, %s]", what, quote(n.Value), FormatSize(lo), FormatSize(hi))
	}
	return v, nil
}

var topFields = []string{"version", "name", "description", "chunk_size", "device", "limits", "autotune", "recipes", "rules"}

func (d *decoder) profile(root *yaml.Node) (*Profile, error) {
	p := &Profile{
		ChunkSize: DefaultChunkSize,
		Device:    DeviceCPU,
		Limits:    codec.DefaultLimits(),
		Autotune: Autotune{
			Enabled:    true,
			CPUBudget:  DefaultCPUBudget,
			Explore:    DefaultExplore,
			Hysteresis: DefaultHysteresis,
			MinFrames:  DefaultMinFrames,
		},
	}
	var rules, chunkNode, limitsNode *yaml.Node
	version := false
	err := d.mapping(root, "profile", topFields, func(key string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "version":
			var s *yaml.Node
			if s, err = d.scalar(v, "version", "an integer"); err != nil {
				return err
			}
			if s.Tag != "!!int" {
				return errAt(s, "version: want an integer, got %s", kindName(s))
			}
			if n, err := parseInt(s.Value); err != nil || n != Version {
				return errAt(s, "version %s is not supported (this build reads version %d)", s.Value, Version)
			}
			version = true
		case "name":
			var vn *yaml.Node
			if p.Name, vn, err = d.str(v, "name"); err != nil {
				return err
			}
			if !validName(p.Name) {
				return errAt(vn, "name %s: want 1 to 64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", quote(p.Name))
			}
		case "description":
			var vn *yaml.Node
			if p.Description, vn, err = d.str(v, "description"); err != nil {
				return err
			}
			if len(p.Description) > 4096 {
				return errAt(vn, "description: longer than 4096 bytes")
			}
		case "chunk_size":
			var n int64
			if n, err = d.size(v, "chunk_size", 64, codec.MaxChunkSize); err != nil {
				return err
			}
			p.ChunkSize, chunkNode = int(n), v
		case "device":
			var s string
			var vn *yaml.Node
			if s, vn, err = d.str(v, "device"); err != nil {
				return err
			}
			switch Device(s) {
			case DeviceCPU, DeviceAuto, DeviceCUDA:
				p.Device = Device(s)
			default:
				return errAt(vn, "device %s: want cpu, auto or cuda", quote(s))
			}
		case "limits":
			if !isNull(v) {
				limitsNode, err = v, d.limits(v, &p.Limits)
			}
		case "autotune":
			if !isNull(v) {
				err = d.autotune(v, &p.Autotune)
			}
		case "recipes":
			if !isNull(v) {
				err = d.recipes(v, p)
			}
		case "rules":
			rules = v
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !version {
		return nil, errAt(root, "version is missing (want version: %d)", Version)
	}
	if chunkNode == nil {
		chunkNode = limitsNode
	}
	if int64(p.ChunkSize) > p.Limits.MaxDecodedSize {
		return nil, errAt(chunkNode, "chunk_size %s is more than limits.max_decoded_size %s: peers would refuse the frames", FormatSize(int64(p.ChunkSize)), FormatSize(p.Limits.MaxDecodedSize))
	}
	if int64(p.ChunkSize) > p.Limits.MaxFrameSize {
		return nil, errAt(chunkNode, "chunk_size %s is more than limits.max_frame_size %s: peers would refuse frames stored raw", FormatSize(int64(p.ChunkSize)), FormatSize(p.Limits.MaxFrameSize))
	}
	if rules != nil && !isNull(rules) {
		if err := d.rules(rules, p); err != nil {
			return nil, err
		}
	}
	if n := len(p.Rules); n == 0 || !p.Rules[n-1].Match.IsCatchAll() {
		p.Rules = append(p.Rules, DefaultRule())
	}
	return p, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

var limitFields = []string{"max_frame_size", "max_decoded_size", "max_slow_decoded", "max_tensor_size", "max_dims", "max_segments", "max_tensors", "max_name_len", "max_tags", "max_header_size"}

func (d *decoder) limits(n *yaml.Node, l *codec.Limits) error {
	return d.mapping(n, "limits", limitFields, func(key string, _, v *yaml.Node) error {
		what := "limits." + key
		var x int64
		var err error
		switch key {
		case "max_frame_size", "max_decoded_size", "max_slow_decoded", "max_tensor_size", "max_header_size":
			hi := int64(maxBytes)
			if key == "max_header_size" {
				hi = math.MaxInt32
			}
			x, err = d.size(v, what, 1, hi)
		default:
			x, err = d.integer(v, what, 1, math.MaxInt32)
		}
		if err != nil {
			return err
		}
		switch key {
		case "max_frame_size":
			l.MaxFrameSize = x
		case "max_decoded_size":
			l.MaxDecodedSize = x
		case "max_slow_decoded":
			l.MaxSlowDecoded = x
		case "max_tensor_size":
			l.MaxTensorSize = x
		case "max_header_size":
			l.MaxHeaderSize = int(x)
		case "max_dims":
			l.MaxDims = int(x)
		case "max_segments":
			l.MaxSegments = int(x)
		case "max_tensors":
			l.MaxTensors = int(x)
		case "max_name_len":
			l.MaxNameLen = int(x)
		case "max_tags":
			l.MaxTags = int(x)
		}
		return nil
	})
}

var autotuneFields = []string{"enabled", "cores", "cpu_budget", "explore", "hysteresis", "min_frames", "link_hint"}

func (d *decoder) autotune(n *yaml.Node, a *Autotune) error {
	return d.mapping(n, "autotune", autotuneFields, func(key string, _, v *yaml.Node) error {
		what := "autotune." + key
		var err error
		var x int64
		switch key {
		case "enabled":
			a.Enabled, err = d.boolean(v, what)
		case "cores":
			x, err = d.integer(v, what, 0, 1024)
			a.Cores = int(x)
		case "cpu_budget":
			a.CPUBudget, err = d.number(v, what, 0, 1, true)
		case "explore":
			a.Explore, err = d.number(v, what, 0, MaxExplore, false)
		case "hysteresis":
			a.Hysteresis, err = d.number(v, what, 0, 1, false)
		case "min_frames":
			x, err = d.integer(v, what, 1, 1_000_000)
			a.MinFrames = int(x)
		case "link_hint":
			var s *yaml.Node
			if s, err = d.scalar(v, what, "a bandwidth"); err != nil {
				return err
			}
			if s.Tag != "!!str" && s.Tag != "!!int" {
				return errAt(s, "%s: want a bandwidth such as 1Gbit, 100Mbps or 12.5MB/s, got %s", what, kindName(s))
			}
			if a.LinkHint, err = ParseRate(s.Value); err != nil {
				return errAt(s, "%s: %s: %v", what, quote(s.Value), err)
			}
		}
		return err
	})
}

// recipes reads the named recipes.
func (d *decoder) recipes(n *yaml.Node, p *Profile) error {
	return d.mapping(n, "recipes", nil, func(name string, k, v *yaml.Node) error {
		if len(p.Recipes) == MaxRecipes {
			return errAt(k, "recipes: more than %d", MaxRecipes)
		}
		if !validName(name) {
			return errAt(k, "recipes: name %s: want 1 to 64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", quote(name))
		}
		if name == "auto" {
			return errAt(k, "recipes: auto is reserved (it stands for any recipe the autotuner knows)")
		}
		if _, err := codec.ParseRecipe(name); err == nil {
			return errAt(k, "recipes: name %s is also a recipe; pick a name that is not", quote(name))
		}
		text, vn, err := d.str(v, "recipes."+name)
		if err != nil {
			return err
		}
		r, err := codec.ParseRecipe(text)
		if err != nil {
			return &Error{Line: vn.Line, Column: vn.Column, Msg: fmt.Sprintf("recipes.%s: %s", name, quote(text)), Err: err}
		}
		p.Recipes = append(p.Recipes, NamedRecipe{Name: name, Recipe: r})
		return nil
	})
}

func (p *Profile) recipe(name string) *codec.Recipe {
	for _, r := range p.Recipes {
		if r.Name == name {
			return r.Recipe
		}
	}
	return nil
}
