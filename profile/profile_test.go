package profile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// badCases are profiles Load must refuse, with the line and column of the
// error (0, 0: no position) and a substring of its message.
var badCases = []struct {
	name, yaml string
	line, col  int
	msg        string
}{
	{"empty", "", 0, 0, "empty profile"},
	{"comment only", "# nothing\n", 0, 0, "empty profile"},
	{"null document", "~\n", 1, 1, "profile: want a mapping, got nothing (null)"},
	{"list root", "- version: 1\n", 1, 1, "profile: want a mapping, got a list"},
	{"no version", "name: x\n", 1, 1, "version is missing"},
	{"version 2", "version: 2\n", 1, 10, "version 2 is not supported"},
	{"version huge", "version: 99999999999999999999\n", 1, 10, "version: want an integer, got a number"},
	{"empty rules", "version: 1\nrules: []\n", 2, 8, "rules: empty list"},
	{"version string", "version: \"1\"\n", 1, 10, "version: want an integer, got a string"},
	{"unknown field", "version: 1\nchunksize: 1MiB\n", 2, 1, `profile: unknown field "chunksize"`},
	{"duplicate field", "version: 1\nversion: 1\n", 2, 1, `field "version" given twice`},
	{"merge key", "version: 1\n<<: {name: x}\n", 2, 1, "merge keys"},
	{"malformed", "version: 1\nrules: [\n", 3, 1, "YAML: did not find expected node content"},
	{"tab indent", "version: 1\nlimits:\n\tmax_dims: 3\n", 3, 1, "YAML: found character that cannot start any token"},
	{"two documents", "version: 1\n---\nversion: 1\n", 2, 1, "single YAML document"},
	{"too deep", "version: 1\nrules: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n", 2, 40, "exceeded max depth of 32"},
	{"bad name", "version: 1\nname: Big Name\n", 2, 7, `name "Big Name": want 1 to 64`},
	{"name not string", "version: 1\nname: 12\n", 2, 7, "name: want a string, got an integer (quote it)"},
	{"negative chunk", "version: 1\nchunk_size: -5\n", 2, 13, `chunk_size: "-5" is outside [64, 64MiB]`},
	{"big chunk", "version: 1\nchunk_size: 128MiB\n", 2, 13, `chunk_size: "128MiB" is outside [64, 64MiB]`},
	{"fraction of a byte", "version: 1\nchunk_size: 0.3KiB\n", 2, 13, "not a whole number of bytes"},
	{"size unit", "version: 1\nchunk_size: 10XB\n", 2, 13, `unknown size unit "XB"`},
	{"float size", "version: 1\nchunk_size: 1.5e6\n", 2, 13, "want a size such as 65536, 64KiB or 1MiB, got a number"},
	{"limits list", "version: 1\nlimits: [1]\n", 2, 9, "limits: want a mapping, got a list"},
	{"zero limit", "version: 1\nlimits:\n  max_dims: 0\n", 3, 13, `limits.max_dims: "0" is outside [1, 2147483647]`},
	{"unknown limit", "version: 1\nlimits:\n  max_dim: 3\n", 3, 3, `limits: unknown field "max_dim"`},
	{"negative limit", "version: 1\nlimits:\n  max_tensor_size: -1\n", 3, 20, `limits.max_tensor_size: "-1" is outside`},
	{"chunk over frame limit", "version: 1\nlimits:\n  max_frame_size: 64KiB\n", 3, 3, "chunk_size 1MiB is more than limits.max_frame_size 64KiB"},
	{"chunk over decoded limit", "version: 1\nchunk_size: 1MiB\nlimits:\n  max_decoded_size: 512KiB\n", 2, 13, "chunk_size 1MiB is more than limits.max_decoded_size 512KiB"},
	{"explore", "version: 1\nautotune:\n  explore: 0.1\n", 3, 12, `autotune.explore: "0.1" is outside [0, 0.05]`},
	{"cpu budget zero", "version: 1\nautotune:\n  cpu_budget: 0\n", 3, 15, `autotune.cpu_budget: "0" is outside (0, 1]`},
	{"nan", "version: 1\nautotune:\n  hysteresis: .nan\n", 3, 15, `autotune.hysteresis: ".nan" is outside [0, 1]`},
	{"enabled yes", "version: 1\nautotune:\n  enabled: yes\n", 3, 12, `autotune.enabled: want true or false, got "yes"`},
	{"min frames", "version: 1\nautotune:\n  min_frames: 0\n", 3, 15, "autotune.min_frames"},
	{"link unit", "version: 1\nautotune:\n  link_hint: 10 furlongs\n", 3, 14, `unknown bandwidth unit "furlongs"`},
	{"link tiny", "version: 1\nautotune:\n  link_hint: 1bit\n", 3, 14, "less than 1 byte per second"},
	{"recipe parse", "version: 1\nrecipes:\n  max: \"zstd(99)\"\n", 3, 8, `recipes.max: "zstd(99)": codec: bad recipe`},
	{"recipe name is recipe", "version: 1\nrecipes:\n  raw: \"zstd(1)\"\n", 3, 3, `name "raw" is also a recipe`},
	{"recipe name auto", "version: 1\nrecipes:\n  auto: \"zstd(1)\"\n", 3, 3, "auto is reserved"},
	{"recipe name bad", "version: 1\nrecipes:\n  Fast Z: \"zstd(1)\"\n", 3, 3, `recipes: name "Fast Z"`},
	{"duplicate recipe name", "version: 1\nrecipes:\n  a: \"s2\"\n  a: \"raw\"\n", 4, 3, `recipes: field "a" given twice`},
	{"recipe not string", "version: 1\nrecipes:\n  a: [s2]\n", 3, 6, "recipes.a: want a string, got a list"},
	{"rules mapping", "version: 1\nrules: {}\n", 2, 8, "rules: want a list, got a mapping"},
	{"unknown rule field", "version: 1\nrules:\n  - requires_lossless: true\n", 3, 5, `rule 1: unknown field "requires_lossless"`},
	{"unknown recipe", "version: 1\nrules:\n  - recipes: [fats]\n", 3, 15, `rule 1: recipes: "fats" is neither a recipe named under recipes: nor a recipe`},
	{"recipe twice", "version: 1\nrecipes: {z: \"zstd(1)\"}\nrules:\n  - recipes: [z, \"zstd(1)\"]\n", 4, 18, `rule 1: recipes: "zstd(1)" is listed twice`},
	{"auto not last", "version: 1\nrules:\n  - recipes: [auto, s2]\n", 3, 21, "auto must be the last entry"},
	{"empty recipe list", "version: 1\nrules:\n  - recipes: []\n", 3, 14, "rule 1: recipes: empty list"},
	{"lossy on lossless", "version: 1\nrules:\n  - require_lossless: true\n    recipes: [s2, \"int8(4096) | *:zstd(1)\"]\n", 4, 19, `rule 1 (require_lossless): recipe "int8(4096) | *:zstd(1)" is lossy`},
	{"budget on lossless", "version: 1\nrules:\n  - require_lossless: true\n    error_budget: 0.01\n", 4, 19, "rule 1 (require_lossless): error_budget 0.01 allows lossy recipes"},
	{"gradient on lossless", "version: 1\nrules:\n  - require_lossless: true\n    gradient: \"topk(0.01)\"\n", 4, 15, "rule 1 (require_lossless): gradient compressors are lossy"},
	{"densities on lossless", "version: 1\nrules:\n  - require_lossless: true\n    densities: [0.01]\n", 4, 16, "rule 1 (require_lossless): densities"},
	{"bits on lossless", "version: 1\nrules:\n  - require_lossless: true\n    bits: [8]\n", 4, 11, "rule 1 (require_lossless): bits"},
	{"lossy without budget", "version: 1\nrules:\n  - recipes: [\"fp16 | *:zstd(1)\"]\n", 3, 15, `rule 1: recipe "fp16 | *:zstd(1)" is lossy but the rule has no error_budget`},
	{"densities without gradient", "version: 1\nrules:\n  - densities: [0.01]\n    error_budget: 0.1\n", 3, 16, "densities without a gradient compressor"},
	{"bits without budget", "version: 1\nrules:\n  - bits: [8]\n", 3, 11, "bits without an error_budget or a gradient compressor"},
	{"bits 3", "version: 1\nrules:\n  - bits: [3]\n    error_budget: 0.1\n", 3, 12, "rule 1: bits: 3: want 1, 2, 4, 8 or 16"},
	{"budget 2", "version: 1\nrules:\n  - error_budget: 2\n", 3, 19, `rule 1: error_budget: "2" is outside [0, 1]`},
	{"density 0", "version: 1\nrules:\n  - gradient: topk(0.1)\n    densities: [0.01, 0]\n", 4, 23, `rule 1: densities: "0" is outside (0, 1]`},
	{"density twice", "version: 1\nrules:\n  - gradient: topk(0.1)\n    densities: [0.01, 0.01]\n", 4, 23, "0.01 is listed twice"},
	{"gradient twice", "version: 1\nrules:\n  - gradient: [\"topk(0.1)\", \" topk(0.1)\"]\n", 3, 29, `rule 1: gradient: "topk(0.1)" is listed twice`},
	{"gradient empty", "version: 1\nrules:\n  - gradient: [\" \"]\n", 3, 16, `rule 1: gradient: an empty gradient compressor`},
	{"unknown dtype", "version: 1\nrules:\n  - match: {dtype: [f32, f33]}\n", 3, 26, `rule 1: match.dtype: unknown dtype "f33"`},
	{"dtype twice", "version: 1\nrules:\n  - match: {dtype: [f32, float32]}\n", 3, 26, "f32 is listed twice"},
	{"bad glob", "version: 1\nrules:\n  - match: {name: \"[a\"}\n", 3, 19, `rule 1: match.name: bad pattern "[a"`},
	{"max size zero", "version: 1\nrules:\n  - match: {max_size: 0}\n", 3, 23, `rule 1: match.max_size: "0" is outside [1, 1024TiB]`},
	{"size order", "version: 1\nrules:\n  - match: {min_size: 2MiB, max_size: 1MiB}\n", 3, 39, "min_size 2MiB is more than max_size 1MiB"},
	{"unknown match field", "version: 1\nrules:\n  - match: {size: 1}\n", 3, 13, `rule 1: match: unknown field "size"`},
	{"tag map value", "version: 1\nrules:\n  - match: {tags: {role: {a: b}}}\n", 3, 26, "rule 1: match.tags.role: want a list, got a mapping"},
	{"tag null", "version: 1\nrules:\n  - match: {tags: {role: }}\n", 3, 26, "rule 1: match.tags.role: want a list, got nothing"},
	{"never used", "version: 1\nrules:\n  - recipes: [s2]\n  - recipes: [raw]\n", 4, 5, "rule 2 is never used: rule 1 (line 3) matches every tensor"},
	{"static without recipe", "version: 1\nautotune: {enabled: false}\nrules:\n  - match: {dtype: f32}\n", 4, 5, "rule 1: autotune is off and the rule lists no recipe"},
	{"static auto only", "version: 1\nautotune: {enabled: false}\nrules:\n  - recipes: auto\n", 4, 14, "rule 1: autotune is off and the rule lists no recipe"},
	{"unknown anchor", "version: 1\nname: *x\n", 2, 7, "YAML: unknown anchor 'x' referenced"},
	{"custom tag", "version: 1\nname: !foo x\n", 2, 7, "name: want a string, got a value tagged !foo"},
	{"too large", "version: 1\ndescription: " + strings.Repeat("x", MaxSize) + "\n", 0, 0, "profile is larger than"},
	{"long description", "version: 1\ndescription: " + strings.Repeat("x", 5000) + "\n", 2, 14, "longer than 4096 bytes"},
}

func TestLoadBad(t *testing.T) {
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Load([]byte(c.yaml))
			if err == nil {
				t.Fatalf("Load accepted it: %+v", p)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not *Error", err, err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			if e.Line != c.line || e.Column != c.col {
				t.Errorf("error at %d:%d, want %d:%d: %v", e.Line, e.Column, c.line, c.col, err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not contain %q", err, c.msg)
			}
			if c.line > 0 && !strings.HasPrefix(err.Error(), fmt.Sprintf("profile: line %d, column %d: ", c.line, c.col)) {
				t.Errorf("error %q does not start with its position", err)
			}
		})
	}
}

func TestErrorCause(t *testing.T) {
	_, err := Load([]byte("version: 1\nrecipes:\n  max: \"zstd(99)\"\n"))
	if !errors.Is(err, codec.ErrRecipe) || !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v: want codec.ErrRecipe and ErrInvalid", err)
	}
}

// TestTestdata loads testdata/good (must load and round-trip) and
// testdata/bad, whose first line is "# want: LINE:COL MESSAGE" (LINE:COL
// may be * for any position).
func TestTestdata(t *testing.T) {
	good, _ := filepath.Glob("testdata/good/*.yaml")
	bad, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(good) == 0 || len(bad) == 0 {
		t.Fatal("no testdata")
	}
	for _, name := range good {
		p, err := LoadFile(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		roundTrip(t, name, p)
	}
	for _, name := range bad {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		want, ok := strings.CutPrefix(first, "# want: ")
		if !ok {
			t.Errorf("%s: first line is not '# want: LINE:COL MESSAGE'", name)
			continue
		}
		pos, msg, _ := strings.Cut(want, " ")
		_, err = LoadFile(name)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: error %v, want *Error", name, err)
			continue
		}
		if e.File != name || !strings.HasPrefix(err.Error(), "profile: "+name+": ") {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
		if got := fmt.Sprintf("%d:%d", e.Line, e.Column); pos != "*" && got != pos {
			t.Errorf("%s: error at %s, want %s: %v", name, got, pos, err)
		}
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: error %q does not contain %q", name, err, msg)
		}
		// Refused with bounded work (the alias bomb by the node budget),
		// counted in allocations, which do not depend on the machine's
		// speed or load, rather than in time.
		if n := testing.AllocsPerRun(1, func() { LoadFile(name) }); n > MaxNodes/10 {
			t.Errorf("%s: %.0f allocations to refuse it", name, n)
		}
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "none.yaml"))
	if err == nil || errors.Is(err, ErrInvalid) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v: want a not-exist error that is not ErrInvalid", err)
	}
}

func TestFull(t *testing.T) {
	p, err := LoadFile("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "full-example" || p.Description != "every field set" || p.ChunkSize != 512<<10 {
		t.Errorf("header: %q %q %d", p.Name, p.Description, p.ChunkSize)
	}
	wantLimits := codec.Limits{
		MaxHeaderSize: 64 << 10, MaxFrameSize: 128 << 20, MaxDecodedSize: 128 << 20, MaxSlowDecoded: 16 << 20, MaxTensorSize: 2 << 30,
		MaxDims: 16, MaxSegments: 512, MaxTensors: 1000, MaxNameLen: 1024, MaxTags: 32,
	}
	if p.Limits != wantLimits {
		t.Errorf("limits %+v, want %+v", p.Limits, wantLimits)
	}
	wantAT := Autotune{Enabled: true, Cores: 2, CPUBudget: 0.5, Explore: 0.01, Hysteresis: 0.2, MinFrames: 5, LinkHint: 12_500_000}
	if p.Autotune != wantAT {
		t.Errorf("autotune %+v, want %+v", p.Autotune, wantAT)
	}
	if len(p.Recipes) != 3 || p.Recipes[0].Name != "fast" || p.Recipes[2].Name != "q8" ||
		p.Recipes[0].Recipe.String() != "shuffle4 | plane3:huff0 | plane0..2:raw" {
		t.Errorf("recipes %v", p.Recipes)
	}
	if len(p.Rules) != 4 || !p.Rules[3].IsDefault() {
		t.Fatalf("%d rules, want 3 and the default", len(p.Rules))
	}
	r := p.Rules[0]
	if r.Index != 1 || r.Line != 30 || r.Column != 5 || !r.RequireLossless || r.Auto ||
		strings.Join(r.Match.Names, " ") != "*.weight fc*" ||
		len(r.Match.DTypes) != 2 || r.Match.DTypes[0] != codec.F32 || r.Match.DTypes[1] != codec.BF16 ||
		r.Match.MinSize != 4096 || r.Match.MaxSize != 1<<30 {
		t.Errorf("rule 1: %+v", r)
	}
	if len(r.Recipes) != 3 || r.Recipes[0].Name != "fast" || r.Recipes[2].Name != "" || r.Recipes[2].Recipe.String() != "s2" {
		t.Errorf("rule 1 recipes %v", r.Recipes)
	}
	r = p.Rules[1]
	if r.RequireLossless || !r.Auto || r.ErrorBudget != 0.01 || len(r.Gradients) != 3 ||
		r.Gradients[1].String() != "dgc(0.001,warmup=1)" || fmt.Sprint(r.Densities) != "[0.001 0.01]" ||
		fmt.Sprint(r.Bits) != "[8 16]" || len(r.Match.Tags) != 1 || r.Match.Tags[0].Key != "role" {
		t.Errorf("rule 2: %+v", r)
	}
}

func TestDefaults(t *testing.T) {
	p, err := Load([]byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.ChunkSize != codec.DefaultChunkSize || p.Limits != codec.DefaultLimits() {
		t.Errorf("chunk %d limits %+v", p.ChunkSize, p.Limits)
	}
	want := Autotune{Enabled: true, CPUBudget: 1, Explore: 0.005, Hysteresis: 0.1, MinFrames: 3}
	if p.Autotune != want {
		t.Errorf("autotune %+v, want %+v", p.Autotune, want)
	}
	if len(p.Rules) != 1 {
		t.Fatalf("%d rules, want the default rule", len(p.Rules))
	}
	r := p.Rules[0]
	if !r.IsDefault() || !r.RequireLossless || !r.Auto || len(r.Recipes) != 1 || r.Recipes[0].Recipe.String() != DefaultRecipe {
		t.Errorf("default rule %+v", r)
	}
	// A profile whose last rule matches everything gets no default rule.
	p, err = Load([]byte("version: 1\nrules:\n  - match: {dtype: f32}\n  - recipes: [s2]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 2 || p.Rules[1].IsDefault() {
		t.Errorf("rules %+v", p.Rules)
	}
}

const matchProfile = `
version: 1
recipes:
  fast: "shuffle4 | plane3:huff0 | plane0..2:raw"
rules:
  - match:
      name: ["*.weight", "fc*"]
      dtype: [f32, bf16]
      min_size: 4KiB
      max_size: 1GiB
    require_lossless: true
    recipes: [fast]
  - match:
      tags: {role: [gradient, update], stage: 2}
    recipes: ["int8(4096) | *:zstd(1)"]
    error_budget: 0.01
  - match:
      name: "layer/*"
    recipes: [s2]
`

func tags(kv ...string) codec.Tags {
	var t codec.Tags
	for i := 0; i+1 < len(kv); i += 2 {
		t.Extra = append(t.Extra, codec.Tag{Key: kv[i], Value: kv[i+1]})
	}
	return t
}

func TestMatch(t *testing.T) {
	p, err := Load([]byte(matchProfile))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		dtype codec.DType
		size  int64
		tags  codec.Tags
		want  int // rule index, 0: default
	}{
		{"fc1.weight", codec.F32, 8192, tags(), 1},
		{"fc1", codec.BF16, 8192, tags(), 1},
		{"conv.weight", codec.F32, 8192, tags(), 1},
		{"conv.bias", codec.F32, 8192, tags(), 0},
		{"fc1.weight", codec.F16, 8192, tags(), 0},
		{"fc1.weight", codec.F32, 4096, tags(), 1},
		{"fc1.weight", codec.F32, 4095, tags(), 0},
		{"fc1.weight", codec.F32, 1 << 30, tags(), 1},
		{"fc1.weight", codec.F32, 1<<30 + 1, tags(), 0},
		{"fc1.weight", codec.F32, -1, tags(), 0},
		{"g", codec.F32, 10, tags("role", "gradient", "stage", "2"), 2},
		{"g", codec.F32, 10, tags("stage", "2", "role", "update"), 2},
		{"g", codec.F32, 10, tags("role", "gradient"), 0},
		{"g", codec.F32, 10, tags("role", "weights", "stage", "2"), 0},
		{"g", codec.F32, -1, tags("role", "gradient", "stage", "2", "x", "y"), 2},
		// Rules 1 and 2 both match: the first wins.
		{"fc1.weight", codec.F32, 8192, tags("role", "gradient", "stage", "2"), 1},
		{"layer/x", codec.U8, 1, tags(), 3},
		{"layer/x/y", codec.U8, 1, tags(), 0}, // '*' does not match '/'
		{"", codec.Byte, -1, tags(), 0},
	}
	for _, c := range cases {
		r := p.Match(c.name, c.dtype, c.size, c.tags)
		if r == nil || r.Index != c.want {
			t.Errorf("Match(%q, %v, %d, %v) = rule %v, want %d", c.name, c.dtype, c.size, c.tags, r, c.want)
		}
	}
	// A Profile made by hand with no rules still matches the default.
	var zero Profile
	if r := zero.Match("x", codec.F32, 1, codec.Tags{}); r == nil || !r.IsDefault() || !r.RequireLossless {
		t.Errorf("zero profile: %+v", r)
	}
}

// roundTrip checks that p's Effective output loads to a profile with the
// same Effective output.
func roundTrip(t *testing.T, name string, p *Profile) {
	t.Helper()
	b, err := p.Effective()
	if err != nil {
		t.Fatalf("%s: Effective: %v", name, err)
	}
	q, err := Load(b)
	if err != nil {
		t.Fatalf("%s: Effective output does not load: %v\n%s", name, err, b)
	}
	b2, err := q.Effective()
	if err != nil {
		t.Fatalf("%s: Effective again: %v", name, err)
	}
	if string(b) != string(b2) {
		t.Errorf("%s: Effective output changed on reload:\n%s\n----\n%s", name, b, b2)
	}
	if len(q.Rules) != len(p.Rules) || len(q.Recipes) != len(p.Recipes) || q.Autotune != p.Autotune ||
		q.Limits != p.Limits || q.ChunkSize != p.ChunkSize || q.Name != p.Name {
		t.Errorf("%s: reloaded profile differs", name)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, src := range []string{"version: 1\n", matchProfile, "version: 1\nautotune: {explore: -0.0}\n",
		"version: 1\nautotune: {link_hint: 12.5MB/s, cores: 3}\nrules:\n  - match: {tags: {a: 'true', b: [1, 2.5]}}\n    recipes: [\"topk(0.5) | *:raw\", auto]\n    error_budget: 1e-05\n"} {
		p, err := Load([]byte(src))
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		roundTrip(t, strconv.Quote(src[:min(len(src), 40)]), p)
	}
}

func TestBuiltins(t *testing.T) {
	names := Builtins()
	want := []string{"archival", "fl-gradients", "lossless-fast", "lossless-max"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("Builtins() = %v, want %v", names, want)
	}
	for _, name := range names {
		p, err := Builtin(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.Name != name || p.Description == "" {
			t.Errorf("%s: name %q, description %q", name, p.Name, p.Description)
		}
		if last := p.Rules[len(p.Rules)-1]; last.IsDefault() {
			t.Errorf("%s: relies on the default rule; built-ins say what they do with every tensor", name)
		}
		roundTrip(t, name, p)
		lossless := strings.HasPrefix(name, "lossless-") || name == "archival"
		for _, r := range p.Rules {
			if lossless && !r.RequireLossless {
				t.Errorf("%s: rule %d is not require_lossless", name, r.Index)
			}
		}
		if (name == "archival") == p.Autotune.Enabled {
			t.Errorf("%s: autotune enabled %v", name, p.Autotune.Enabled)
		}
	}
	if _, err := Builtin("nope"); err == nil || !strings.Contains(err.Error(), "lossless-fast") {
		t.Errorf("Builtin(nope): %v", err)
	}

	p, err := Builtin("fl-gradients")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		tags  codec.Tags
		lossy bool
	}{
		{"fc1.weight", tags(), false},
		{"fc1.weight", tags("role", "gradient"), true},
		{"fc1.weight", tags("role", "update"), true},
		{"fc1.weight.grad", tags(), true},
		{"update.fc1.weight", tags(), true},
		{"upgrade.weight", tags(), false},
	} {
		r := p.Match(c.name, codec.F32, 1<<20, c.tags)
		if r.RequireLossless == c.lossy || c.lossy && (len(r.Gradients) == 0 || len(r.Densities) == 0 || r.ErrorBudget == 0) {
			t.Errorf("fl-gradients: %s %v: rule %d %+v", c.name, c.tags, r.Index, r)
		}
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]int64{
		"0": 0, "64": 64, "64KiB": 64 << 10, "1MiB": 1 << 20, "1.5 MiB": 3 << 19, "4GiB": 4 << 30,
		"2TiB": 2 << 40, "10KB": 10_000, "10kB": 10_000, "1MB": 1e6, "1GB": 1e9, "1TB": 1e12, "12B": 12,
	}
	for s, want := range sizes {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "KiB", "1..2", "-1", "1e3", "1 KiBs", "0.1B", "2000TiB", "1,5MiB", strings.Repeat("9", 40)} {
		if got, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, got)
		}
	}
	rates := map[string]int64{
		"100": 100, "1Gbit": 125_000_000, "1Gbit/s": 125_000_000, "1Gbps": 125_000_000, "10Mbit": 1_250_000,
		"100Mbps": 12_500_000, "12.5MB/s": 12_500_000, "1MiB/s": 1 << 20, "12bit": 2, "4bit": 1, "1kbit": 125,
	}
	for s, want := range rates {
		if got, err := ParseRate(s); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "1Gb", "1GB", "1bit", "10 furlongs", "2000TB/s"} {
		if got, err := ParseRate(s); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", s, got)
		}
	}
	for _, n := range []int64{1, 2, 3, 100, 125, 125_000_000, 12_500_000, 1 << 20, maxBytes} {
		if got, err := ParseRate(FormatRate(n)); err != nil || got != n {
			t.Errorf("ParseRate(FormatRate(%d) = %q) = %d, %v", n, FormatRate(n), got, err)
		}
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, FormatSize(n), got, err)
		}
	}
}

// TestDocExamples loads every YAML example in docs/PROFILES.md that is a
// whole profile.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROFILES.md")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		src, _, _ := strings.Cut(block, "```")
		if !strings.HasPrefix(src, "version: 1") {
			continue
		}
		n++
		p, err := Load([]byte(src))
		if err != nil {
			t.Errorf("%v\n%s", err, src)
			continue
		}
		roundTrip(t, "example", p)
	}
	if n < 4 {
		t.Errorf("%d examples, want at least 4", n)
	}
}

func TestNegativeZero(t *testing.T) {
	p, err := Load([]byte("version: 1\nautotune: {explore: -0.0, hysteresis: -0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Effective()
	if strings.Contains(string(b), "-0") {
		t.Errorf("-0 in the effective output:\n%s", b)
	}
}

func TestDevice(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want Device
	}{{"version: 1\n", DeviceCPU}, {"version: 1\ndevice: cpu\n", DeviceCPU}, {"version: 1\ndevice: auto\n", DeviceAuto}, {"version: 1\ndevice: cuda\n", DeviceCUDA}} {
		p, err := Load([]byte(c.yaml))
		if err != nil || p.Device != c.want {
			t.Errorf("%q: %v, %v", c.yaml, p, err)
		}
	}
}

// TestDensities: the one-rule profile of a spec and its densities, and
// the errors of a bad density.
func TestDensities(t *testing.T) {
	p, err := Densities("topk(0.01) | val:nf4(64)", []float64{0.003, 0.3, 1})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Match("w", codec.F32, 4<<20, codec.Tags{})
	if !slices.Equal(r.Densities, []float64{0.003, 0.3, 1}) || len(r.Gradients) != 1 || r.Gradients[0].String() != "topk(0.01) | val:nf4(64)" {
		t.Fatalf("rule %+v", r)
	}
	for _, bad := range []struct {
		spec string
		ds   []float64
	}{{"topk(0.01)", []float64{2}}, {"topk(0.01)", []float64{0}}, {"topk(0.01)", nil}} {
		if _, err := Densities(bad.spec, bad.ds); err == nil {
			t.Errorf("%q %v: no error", bad.spec, bad.ds)
		}
	}
}
