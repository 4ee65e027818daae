package profile

import (
	"errors"
	"fmt"
	"path"

	"github.com/tensorpress/tensorpress/codec"
)

// Version is the schema version this package reads and writes.
const Version = 1

// Bounds on the input. A profile over any of them is refused with an
// *Error before it is looked at further.
const (
	// MaxSize bounds the YAML text in bytes.
	MaxSize = 1 << 20
	// MaxDepth bounds the nesting of YAML collections.
	MaxDepth = 32
	// MaxNodes bounds the YAML nodes visited while reading a profile,
	// counting every use of an alias again: it stops alias bombs.
	MaxNodes = 100_000
	// MaxRules bounds the rules of a profile, MaxRecipes its named
	// recipes, and MaxList every other list (names, dtypes, recipes of a
	// rule, ...).
	MaxRules   = 1024
	MaxRecipes = 1024
	MaxList    = 1024
)

// Default settings: what a profile that leaves a field out gets.
const (
	DefaultChunkSize  = codec.DefaultChunkSize
	DefaultCPUBudget  = 1.0
	DefaultExplore    = 0.005
	DefaultHysteresis = 0.10
	DefaultMinFrames  = 3
	// MaxExplore is the largest autotune.explore accepted.
	MaxExplore = 0.05
	// DefaultRecipe is the first recipe of the default rule: what a static
	// writer uses for tensors that no rule of the profile matches.
	DefaultRecipe = "zstd(1)"
)

// ErrInvalid is matched (errors.Is) by every *Error: the profile text is
// not a valid profile.
var ErrInvalid = errors.New("profile: invalid profile")

// Error is a problem with a profile's text, located at the YAML value
// that caused it. Line and Column count from 1; they are 0 when the
// problem has no place (an input over MaxSize, an empty profile).
type Error struct {
	File   string // set by LoadFile
	Line   int
	Column int
	Msg    string
	Err    error // the cause when another package found it (codec.ErrRecipe, ...), or nil
}

func (e *Error) Error() string {
	s := "profile: "
	if e.File != "" {
		s += e.File + ": "
	}
	if e.Line > 0 {
		s += fmt.Sprintf("line %d, column %d: ", e.Line, e.Column)
	}
	s += e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Profile is a loaded, validated profile with every default filled in. It
// is not changed by this package after Load returns and is safe for
// concurrent use as long as nobody changes it.
type Profile struct {
	Name        string
	Description string
	// ChunkSize is the decoded bytes per frame, in [64, codec.MaxChunkSize].
	ChunkSize int
	// Device is where gradient updates are compressed (error feedback and
	// selection): DeviceCPU (the default), DeviceAuto or DeviceCUDA.
	Device Device
	// Limits are the decoder limits, every field set.
	Limits   codec.Limits
	Autotune Autotune
	// Recipes are the named recipes, in the order the profile lists them.
	Recipes []NamedRecipe
	// Rules are tried in order; the last one matches every tensor (Load
	// appends DefaultRule when the profile's own last rule does not).
	Rules []Rule

	file string // LoadFile's name, for CheckGradients' errors
}

// Gradient is a gradient compressor spec as a rule writes it (the grammar
// of gradient.Parse, such as "dgc(0.001) | val:fp16 | *:huff0"), and
// where.
type Gradient struct {
	Text         string // trimmed of spaces
	Line, Column int
}

func (g Gradient) String() string { return g.Text }

// CheckGradients calls parse on the text of every gradient compressor of
// p's rules, in order, and returns the first error, as an *Error that
// locates the spec and wraps parse's error. Load does not parse them (the
// package does not depend on gradient's code); a program that uses a
// profile's gradient compressors checks them once, when it takes the
// profile:
//
//	err := p.CheckGradients(func(s string) error { _, err := gradient.Parse(s); return err })
func (p *Profile) CheckGradients(parse func(text string) error) error {
	for i := range p.Rules {
		r := &p.Rules[i]
		for _, g := range r.Gradients {
			if err := parse(g.Text); err != nil {
				return &Error{File: p.file, Line: g.Line, Column: g.Column, Msg: fmt.Sprintf("rule %d: gradient: %s", r.Index, quote(g.Text)), Err: err}
			}
		}
	}
	return nil
}

// Device says where a profile's gradient updates are compressed.
type Device string

const (
	// DeviceCPU: on the CPU.
	DeviceCPU Device = "cpu"
	// DeviceAuto: on the GPU (package gpu) where one opens and takes the
	// compressor, else on the CPU; the frames are the same bytes.
	DeviceAuto Device = "auto"
	// DeviceCUDA: on the GPU; a connection fails where none opens.
	DeviceCUDA Device = "cuda"
)

// Autotune bounds what the autotuner may do.
type Autotune struct {
	// Enabled: choose each frame's recipe by measurement. When false the
	// writer is static: every tensor gets the first recipe of its rule.
	Enabled bool
	// Cores the writer may use for compression; 0 means min(4, GOMAXPROCS).
	Cores int
	// CPUBudget is the fraction of those cores compression may keep busy,
	// in (0, 1].
	CPUBudget float64
	// Explore is the time spent coding samples with other recipes, as a
	// share of the time spent encoding the frames sent, in [0, MaxExplore].
	Explore float64
	// Hysteresis is the relative gain a new recipe must show before the
	// autotuner switches to it, in [0, 1].
	Hysteresis float64
	// MinFrames is the number of frames sent with a recipe before another
	// switch, at least 1.
	MinFrames int
	// LinkHint is the configured link bandwidth in bytes per second, 0 when
	// the profile gives none (the autotuner measures it).
	LinkHint int64
}

// NamedRecipe is a recipe with the name the profile gives it. In a rule,
// Name is empty for a recipe written out in place.
type NamedRecipe struct {
	Name   string
	Recipe *codec.Recipe
}

// Rule says which recipes and gradient compressors may be used for the
// tensors it matches.
type Rule struct {
	// Index is the rule's position in the profile, from 1; Line and Column
	// locate it. All three are 0 for the default rule Load appends.
	Index        int
	Line, Column int
	Match        Match
	// RequireLossless: the tensors this rule matches never meet a lossy
	// stage. Load refuses a lossless rule that lists a lossy recipe, an
	// error budget, gradient compressors, densities or bits.
	RequireLossless bool
	// Recipes are the candidates, most preferred first. Recipes[0] is the
	// static choice when autotuning is off (Load makes sure there is one
	// then) and where the autotuner starts.
	Recipes []NamedRecipe
	// Auto: besides Recipes, the autotuner may use any lossless recipe it
	// knows, and any lossy one within ErrorBudget.
	Auto bool
	// ErrorBudget is the largest relative RMS error a lossy recipe may
	// cause, in [0, 1]; 0 allows lossless recipes only.
	ErrorBudget float64
	// Gradients are the gradient compressors (with error feedback) the
	// sender may apply to the tensors this rule matches, as the profile
	// writes them: gradient.Parse reads each (CheckGradients checks them
	// all, with the place of the one at fault).
	Gradients []Gradient
	// Densities are the gradient densities (fractions of elements kept,
	// in (0, 1]) the autotuner may choose from.
	Densities []float64
	// Bits are the quantizer widths the autotuner may choose from: 16
	// (fp16, bf16), 8 (int8, qsgd), 4 (fp4, nf4), 2 (ternary), 1 (sign).
	Bits []int
}

// IsDefault reports whether r is the default rule Load appended.
func (r *Rule) IsDefault() bool { return r.Index == 0 }

// Match selects tensors. Every criterion given must hold; a zero Match
// matches every tensor.
type Match struct {
	// Names are path.Match patterns on the tensor name; one must match.
	// '*' does not match '/'.
	Names []string
	// DTypes: the tensor's dtype must be one of them.
	DTypes []codec.DType
	// MinSize and MaxSize bound the tensor's size in bytes, inclusive;
	// MaxSize 0 means no upper bound.
	MinSize, MaxSize int64
	// Tags: each key must be present among the tensor's extra tags with
	// one of the listed values.
	Tags []TagMatch
}

// TagMatch is one tag condition: the tag Key with any of Values.
type TagMatch struct {
	Key    string
	Values []string
}

// IsCatchAll reports whether m matches every tensor.
func (m *Match) IsCatchAll() bool {
	return len(m.Names) == 0 && len(m.DTypes) == 0 && m.MinSize == 0 && m.MaxSize == 0 && len(m.Tags) == 0
}

// Matches reports whether a tensor with this name, dtype, size in bytes
// and tags is selected. A size below 0 means unknown: it fails any size
// bound.
func (m *Match) Matches(name string, dtype codec.DType, size int64, tags codec.Tags) bool {
	if len(m.Names) > 0 {
		ok := false
		for _, pat := range m.Names {
			if match, _ := path.Match(pat, name); match { // patterns are checked by Load
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(m.DTypes) > 0 {
		ok := false
		for _, d := range m.DTypes {
			ok = ok || d == dtype
		}
		if !ok {
			return false
		}
	}
	if m.MinSize > 0 || m.MaxSize > 0 {
		if size < 0 || size < m.MinSize || m.MaxSize > 0 && size > m.MaxSize {
			return false
		}
	}
	for _, tm := range m.Tags {
		if !hasTag(tags, tm) {
			return false
		}
	}
	return true
}

func hasTag(tags codec.Tags, tm TagMatch) bool {
	for _, t := range tags.Extra {
		if t.Key != tm.Key {
			continue
		}
		for _, v := range tm.Values {
			if t.Value == v {
				return true
			}
		}
	}
	return false
}

// DefaultRule returns the rule that catches the tensors no rule of a
// profile matches: every tensor, lossless, DefaultRecipe first, then any
// lossless recipe the autotuner knows.
func DefaultRule() Rule {
	return Rule{
		RequireLossless: true,
		Recipes:         []NamedRecipe{{Recipe: codec.MustParseRecipe(DefaultRecipe)}},
		Auto:            true,
	}
}

// Match returns the first rule that matches the tensor, or, when none
// does (only in a Profile not made by Load), a DefaultRule. It never
// returns nil. The tensor is described by its name, dtype, size in bytes
// (below 0 when unknown) and tags; tags.Lossless plays no part: the writer
// enforces it whatever the rule says.
func (p *Profile) Match(name string, dtype codec.DType, size int64, tags codec.Tags) *Rule {
	if i := p.MatchIndex(name, dtype, size, tags); i >= 0 {
		return &p.Rules[i]
	}
	r := DefaultRule()
	return &r
}

// MatchIndex is Match's rule as its position in Rules, or -1 when none
// matches (Match then gives a DefaultRule).
func (p *Profile) MatchIndex(name string, dtype codec.DType, size int64, tags codec.Tags) int {
	for i := range p.Rules {
		if p.Rules[i].Match.Matches(name, dtype, size, tags) {
			return i
		}
	}
	return -1
}
