package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
	"go.yaml.in/yaml/v4/plugin/loaderlimits"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
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
		v, err = parseSize(n.Value)
	default:
		return 0, errAt(n, "%s: want a size such as 65536, 64KiB or 1MiB, got %s", what, kindName(n))
	}
	if err != nil {
		return 0, errAt(n, "%s: %s: %v", what, quote(n.Value), err)
	}
	if v < lo || v > hi {
		return 0, errAt(n, "%s: %s is outside [%s, %s]", what, quote(n.Value), formatSize(lo), formatSize(hi))
	}
	return v, nil
}

var topFields = []string{"version", "name", "description", "chunk_size", "limits", "autotune", "recipes", "rules"}

func (d *decoder) profile(root *yaml.Node) (*Profile, error) {
	p := &Profile{
		ChunkSize: DefaultChunkSize,
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
		return nil, errAt(chunkNode, "chunk_size %s is more than limits.max_decoded_size %s: peers would refuse the frames", formatSize(int64(p.ChunkSize)), formatSize(p.Limits.MaxDecodedSize))
	}
	if int64(p.ChunkSize) > p.Limits.MaxFrameSize {
		return nil, errAt(chunkNode, "chunk_size %s is more than limits.max_frame_size %s: peers would refuse frames stored raw", formatSize(int64(p.ChunkSize)), formatSize(p.Limits.MaxFrameSize))
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

var limitFields = []string{"max_frame_size", "max_decoded_size", "max_tensor_size", "max_dims", "max_segments", "max_tensors", "max_name_len", "max_tags", "max_header_size"}

func (d *decoder) limits(n *yaml.Node, l *codec.Limits) error {
	return d.mapping(n, "limits", limitFields, func(key string, _, v *yaml.Node) error {
		what := "limits." + key
		var x int64
		var err error
		switch key {
		case "max_frame_size", "max_decoded_size", "max_tensor_size", "max_header_size":
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

func (d *decoder) rules(n *yaml.Node, p *Profile) error {
	n, err := d.node(n)
	if err != nil {
		return err
	}
	if n.Kind != yaml.SequenceNode {
		return errAt(n, "rules: want a list, got %s", kindName(n))
	}
	if len(n.Content) == 0 {
		return errAt(n, "rules: empty list (leave the field out for the default rule)")
	}
	if len(n.Content) > MaxRules {
		return errAt(n, "rules: more than %d", MaxRules)
	}
	for i, item := range n.Content {
		rn, err := d.node(item)
		if err != nil {
			return err
		}
		if k := len(p.Rules); k > 0 && p.Rules[k-1].Match.IsCatchAll() {
			return errAt(rn, "rule %d is never used: rule %d (line %d) matches every tensor", i+1, k, p.Rules[k-1].Line)
		}
		r, err := d.rule(rn, i+1, p)
		if err != nil {
			return err
		}
		p.Rules = append(p.Rules, *r)
	}
	return nil
}

var ruleFields = []string{"match", "require_lossless", "recipes", "error_budget", "gradient", "densities", "bits"}

// ruleNodes are where a rule's fields were, for the checks between
// fields.
type ruleNodes struct {
	recipes, budget, grad, dens, bits *yaml.Node
	lossy                             *yaml.Node                   // the first lossy recipe listed
	lossyRecipe                       *codec.Recipe                // and its recipe
	quant                             map[*yaml.Node]*codec.Recipe // recipes with a quantizer
}

func (d *decoder) rule(n *yaml.Node, index int, p *Profile) (*Rule, error) {
	r := &Rule{Index: index, Line: n.Line, Column: n.Column}
	what := fmt.Sprintf("rule %d", index)
	at := ruleNodes{quant: map[*yaml.Node]*codec.Recipe{}}
	err := d.mapping(n, what, ruleFields, func(key string, _, v *yaml.Node) error {
		fw := what + ": " + key
		switch key {
		case "match":
			if isNull(v) {
				return nil
			}
			return d.match(v, what+": match", &r.Match)
		case "require_lossless":
			var err error
			r.RequireLossless, err = d.boolean(v, fw)
			return err
		case "recipes":
			at.recipes = v
			return d.ruleRecipes(v, fw, p, r, &at)
		case "error_budget":
			at.budget = v
			var err error
			r.ErrorBudget, err = d.number(v, fw, 0, 1, false)
			return err
		case "gradient":
			at.grad = v
			return d.ruleGradients(v, fw, r)
		case "densities":
			at.dens = v
			return d.ruleDensities(v, fw, r)
		case "bits":
			at.bits = v
			return d.ruleBits(v, fw, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if at.recipes == nil {
		r.Auto = true
		at.recipes = n
	}
	if err := checkRule(r, what, p, &at); err != nil {
		return nil, err
	}
	return r, nil
}

// ruleRecipes reads a rule's recipes: names from the profile's recipes,
// recipes written out, and auto last.
func (d *decoder) ruleRecipes(v *yaml.Node, fw string, p *Profile, r *Rule, at *ruleNodes) error {
	seen := map[string]bool{}
	return d.list(v, fw, true, func(i int, item *yaml.Node) error {
		text, in, err := d.str(item, fw)
		if err != nil {
			return err
		}
		if r.Auto {
			return errAt(in, "%s: auto must be the last entry (it stands for every recipe not listed)", fw)
		}
		if text == "auto" {
			r.Auto = true
			return nil
		}
		nr := NamedRecipe{Name: text, Recipe: p.recipe(text)}
		if nr.Recipe == nil {
			rec, err := codec.ParseRecipe(text)
			if err != nil {
				if validName(text) && !strings.ContainsAny(text, "(.") {
					return errAt(in, "%s: %s is neither a recipe named under recipes: nor a recipe", fw, quote(text))
				}
				return &Error{Line: in.Line, Column: in.Column, Msg: fmt.Sprintf("%s: %s", fw, quote(text)), Err: err}
			}
			nr = NamedRecipe{Recipe: rec}
		}
		key := nr.Recipe.String()
		if seen[key] {
			return errAt(in, "%s: %s is listed twice", fw, quote(text))
		}
		seen[key] = true
		if at.lossy == nil && nr.Recipe.Lossy() {
			at.lossy, at.lossyRecipe = in, nr.Recipe
		}
		if nr.Recipe.Bits() > 0 {
			at.quant[in] = nr.Recipe
		}
		r.Recipes = append(r.Recipes, nr)
		return nil
	})
}

// ruleGradients reads a rule's gradient compressors.
func (d *decoder) ruleGradients(v *yaml.Node, fw string, r *Rule) error {
	seen := map[string]bool{}
	return d.list(v, fw, true, func(i int, item *yaml.Node) error {
		text, in, err := d.str(item, fw)
		if err != nil {
			return err
		}
		s, err := gradient.Parse(text)
		if err != nil {
			return &Error{Line: in.Line, Column: in.Column, Msg: fmt.Sprintf("%s: %s", fw, quote(text)), Err: err}
		}
		if seen[s.String()] {
			return errAt(in, "%s: %s is listed twice", fw, quote(text))
		}
		seen[s.String()] = true
		r.Gradients = append(r.Gradients, s)
		return nil
	})
}

// ruleDensities reads a rule's gradient densities, each in (0, 1].
func (d *decoder) ruleDensities(v *yaml.Node, fw string, r *Rule) error {
	seen := map[float64]bool{}
	return d.list(v, fw, false, func(i int, item *yaml.Node) error {
		x, err := d.number(item, fw, 0, 1, true)
		if err != nil {
			return err
		}
		if seen[x] {
			return errAt(item, "%s: %g is listed twice", fw, x)
		}
		seen[x] = true
		r.Densities = append(r.Densities, x)
		return nil
	})
}

// ruleBits reads a rule's quantizer widths: 1, 2, 4, 8 or 16.
func (d *decoder) ruleBits(v *yaml.Node, fw string, r *Rule) error {
	return d.list(v, fw, false, func(i int, item *yaml.Node) error {
		x, err := d.integer(item, fw, 1, 16)
		if err != nil {
			return err
		}
		if x&(x-1) != 0 {
			return errAt(item, "%s: %d: want 1, 2, 4, 8 or 16", fw, x)
		}
		if slices.Contains(r.Bits, int(x)) {
			return errAt(item, "%s: %d is listed twice", fw, x)
		}
		r.Bits = append(r.Bits, int(x))
		return nil
	})
}

// checkRule refuses contradictions between a rule's fields, each at the
// field that makes it one.
func checkRule(r *Rule, what string, p *Profile, at *ruleNodes) error {
	if r.RequireLossless {
		if err := checkLossless(r, what+" (require_lossless)", at); err != nil {
			return err
		}
	}
	if at.lossy != nil && r.ErrorBudget == 0 {
		return errAt(at.lossy, "%s: recipe %s is lossy but the rule has no error_budget", what, quote(at.lossyRecipe.String()))
	}
	if at.dens != nil && at.grad == nil {
		return errAt(at.dens, "%s: densities without a gradient compressor (add gradient:)", what)
	}
	if at.bits != nil && at.grad == nil && r.ErrorBudget == 0 {
		return errAt(at.bits, "%s: bits without an error_budget or a gradient compressor", what)
	}
	if err := checkWidths(r, what, at); err != nil {
		return err
	}
	if !p.Autotune.Enabled && len(r.Recipes) == 0 {
		return errAt(at.recipes, "%s: autotune is off and the rule lists no recipe (only auto)", what)
	}
	return nil
}

// checkLossless refuses anything lossy on a rule that requires lossless.
func checkLossless(r *Rule, lw string, at *ruleNodes) error {
	switch {
	case at.lossy != nil:
		return errAt(at.lossy, "%s: recipe %s is lossy", lw, quote(at.lossyRecipe.String()))
	case r.ErrorBudget > 0:
		return errAt(at.budget, "%s: error_budget %g allows lossy recipes", lw, r.ErrorBudget)
	case at.grad != nil:
		return errAt(at.grad, "%s: gradient compressors are lossy", lw)
	case at.dens != nil:
		return errAt(at.dens, "%s: densities are for gradient compressors, which are lossy", lw)
	case at.bits != nil:
		return errAt(at.bits, "%s: bits are for quantizers, which are lossy", lw)
	}
	return nil
}

// checkWidths refuses a listed quantizer of a width the rule's bits do
// not allow: the first in the file is the one reported.
func checkWidths(r *Rule, what string, at *ruleNodes) error {
	if len(r.Bits) == 0 {
		return nil
	}
	var bad *yaml.Node
	for in, rec := range at.quant {
		if !slices.Contains(r.Bits, rec.Bits()) && (bad == nil || in.Line < bad.Line || in.Line == bad.Line && in.Column < bad.Column) {
			bad = in
		}
	}
	if bad != nil {
		return errAt(bad, "%s: recipe %s quantizes to %d bits, not among bits %v", what, quote(at.quant[bad].String()), at.quant[bad].Bits(), r.Bits)
	}
	return nil
}

var matchFields = []string{"name", "dtype", "min_size", "max_size", "tags"}

func (d *decoder) match(n *yaml.Node, what string, m *Match) error {
	var sizeNode *yaml.Node // the later of min_size and max_size
	err := d.mapping(n, what, matchFields, func(key string, _, v *yaml.Node) error {
		fw := what + "." + key
		var err error
		switch key {
		case "name":
			seen := map[string]bool{}
			return d.list(v, fw, true, func(i int, item *yaml.Node) error {
				pat, in, err := d.str(item, fw)
				if err != nil {
					return err
				}
				if _, err := path.Match(pat, ""); err != nil {
					return errAt(in, "%s: bad pattern %s", fw, quote(pat))
				}
				if seen[pat] {
					return errAt(in, "%s: %s is listed twice", fw, quote(pat))
				}
				seen[pat] = true
				m.Names = append(m.Names, pat)
				return nil
			})
		case "dtype":
			return d.list(v, fw, true, func(i int, item *yaml.Node) error {
				s, in, err := d.str(item, fw)
				if err != nil {
					return err
				}
				dt, err := codec.ParseDType(s)
				if err != nil {
					return errAt(in, "%s: unknown dtype %s (want f64, f32, f16, bf16, i64, i32, i16, i8, u8, u16, u32, u64, bool or bytes)", fw, quote(s))
				}
				if slices.Contains(m.DTypes, dt) {
					return errAt(in, "%s: %s is listed twice", fw, dt)
				}
				m.DTypes = append(m.DTypes, dt)
				return nil
			})
		case "min_size":
			m.MinSize, err = d.size(v, fw, 0, maxBytes)
			sizeNode = v
		case "max_size":
			m.MaxSize, err = d.size(v, fw, 1, maxBytes)
			sizeNode = v
		case "tags":
			return d.mapping(v, fw, nil, func(tag string, k, tv *yaml.Node) error {
				if tag == "" {
					return errAt(k, "%s: empty tag name", fw)
				}
				if len(m.Tags) == MaxList {
					return errAt(k, "%s: more than %d tags", fw, MaxList)
				}
				tm := TagMatch{Key: tag}
				seen := map[string]bool{}
				err := d.list(tv, fw+"."+tag, true, func(i int, item *yaml.Node) error {
					s, err := d.scalar(item, fw+"."+tag, "a tag value")
					if err != nil {
						return err
					}
					switch s.Tag {
					case "!!str", "!!int", "!!float", "!!bool":
					default:
						return errAt(s, "%s.%s: want a tag value, got %s", fw, tag, kindName(s))
					}
					if seen[s.Value] {
						return errAt(s, "%s.%s: %s is listed twice", fw, tag, quote(s.Value))
					}
					seen[s.Value] = true
					tm.Values = append(tm.Values, s.Value)
					return nil
				})
				m.Tags = append(m.Tags, tm)
				return err
			})
		}
		return err
	})
	if err == nil && m.MaxSize > 0 && m.MinSize > m.MaxSize {
		err = errAt(sizeNode, "%s: min_size %s is more than max_size %s", what, formatSize(m.MinSize), formatSize(m.MaxSize))
	}
	return err
}
