package codec

import (
	"fmt"
	"strconv"
	"strings"
)

// Recipe is an ordered list of steps that turns a tensor (or a chunk of a
// byte stream) into coded segments. Its text form is
//
//	recipe   = [ step { "|" step } ]
//	step     = [ selector ":" ] stage { "," stage }
//	selector = "*" | slot { "+" slot }
//	slot     = name [ int ".." int ]        plane3, plane0..2, val.plane1
//	stage    = name [ "(" [ arg { "," arg } ] ")" ]
//	arg      = value | key "=" value
//
// Encoding starts with one segment, "data", holding the tensor's bytes with
// the tensor's dtype (bytes for a byte stream). Each step applies its stages
// in order to every segment its selector matches; a step without a selector
// (or with "*") matches every segment not yet coded. Split stages replace a
// segment by their outputs ("shuffle4" turns data into plane0..plane3; on a
// segment named val it makes val.plane0..val.plane3). A coder (zstd, s2,
// xz, huff0, raw) ends a segment's pipeline: no later step touches it.
// Segments that no coder reached are stored as they are. A slot that
// matches no segment of a given frame is skipped.
//
// Examples:
//
//	*:zstd(3)
//	shuffle4 | plane3:huff0 | plane0..2:raw
//	shuffle4 | bytedelta | *:zstd(1)
//
// The empty recipe stores the data raw. Recipes are immutable once parsed
// and safe for concurrent use.
type Recipe struct {
	Steps []Step
}

// Step applies Ops, in order, to the segments Sel matches.
type Step struct {
	Sel Selector
	Ops []Op
}

// Selector picks segments by name. The zero Selector (no selector written)
// matches like "*".
type Selector struct {
	Star  bool // "*" was written
	Slots []Slot
}

// Slot is one selector term: a name, or a name prefix with an index range.
type Slot struct {
	Name   string // full name, or prefix when Ranged
	Ranged bool
	Lo, Hi int
}

// Matches reports whether a segment called name is selected.
func (s Selector) Matches(name string) bool {
	if len(s.Slots) == 0 {
		return true
	}
	for _, sl := range s.Slots {
		if !sl.Ranged {
			if name == sl.Name {
				return true
			}
			continue
		}
		rest, ok := strings.CutPrefix(name, sl.Name)
		if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		if i, err := strconv.Atoi(rest); err == nil && i >= sl.Lo && i <= sl.Hi {
			return true
		}
	}
	return false
}

func (s Selector) String() string {
	if s.Star {
		return "*"
	}
	parts := make([]string, len(s.Slots))
	for i, sl := range s.Slots {
		if sl.Ranged {
			parts[i] = fmt.Sprintf("%s%d..%d", sl.Name, sl.Lo, sl.Hi)
		} else {
			parts[i] = sl.Name
		}
	}
	return strings.Join(parts, "+")
}

// String prints the recipe in the grammar above; ParseRecipe of the result
// gives back an equal recipe.
func (r *Recipe) String() string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for i, st := range r.Steps {
		if i > 0 {
			b.WriteString(" | ")
		}
		if sel := st.Sel.String(); sel != "" {
			b.WriteString(sel)
			b.WriteByte(':')
		}
		for j, op := range st.Ops {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(op.String())
		}
	}
	return b.String()
}

// Lossy reports whether any op of the recipe is lossy.
func (r *Recipe) Lossy() bool {
	if r == nil {
		return false
	}
	for _, st := range r.Steps {
		for _, op := range st.Ops {
			if op.Stage().Lossy {
				return true
			}
		}
	}
	return false
}

// Granularity is the most restrictive granularity of the recipe's ops, and
// the block size (in elements) when it is Block: the largest block of its
// block ops (an op's BlockElems when it has one, else its Stage.Block).
func (r *Recipe) Granularity() (Granularity, int) {
	g, blk := Elementwise, 0
	if r == nil {
		return g, blk
	}
	for _, st := range r.Steps {
		for _, op := range st.Ops {
			s := op.Stage()
			if s.Granularity > g {
				g = s.Granularity
			}
			if s.Granularity == Block {
				b := s.Block
				if be, ok := op.(BlockSizer); ok {
					b = be.BlockElems()
				}
				blk = max(blk, b)
			}
		}
	}
	return g, blk
}

// MustParseRecipe is ParseRecipe for recipes known at compile time; it
// panics on error.
func MustParseRecipe(s string) *Recipe {
	r, err := ParseRecipe(s)
	if err != nil {
		panic(err)
	}
	return r
}

// ParseRecipe parses the text form of a recipe. Errors wrap ErrRecipe (or
// the stage's own error) and give the byte offset.
func ParseRecipe(s string) (*Recipe, error) {
	p := &recipeParser{src: s}
	r := &Recipe{}
	p.space()
	if p.eof() {
		return r, nil
	}
	for {
		st, err := p.step()
		if err != nil {
			return nil, err
		}
		r.Steps = append(r.Steps, st)
		p.space()
		if p.eof() {
			return r, nil
		}
		if !p.accept('|') {
			return nil, p.errf("want '|' between steps")
		}
	}
}

type recipeParser struct {
	src string
	pos int
}

func (p *recipeParser) eof() bool { return p.pos >= len(p.src) }

func (p *recipeParser) space() {
	for !p.eof() && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t' || p.src[p.pos] == '\n' || p.src[p.pos] == '\r') {
		p.pos++
	}
}

func (p *recipeParser) accept(c byte) bool {
	p.space()
	if !p.eof() && p.src[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *recipeParser) errf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d in %q", ErrRecipe, fmt.Sprintf(format, args...), p.pos, p.src)
}

func isNameByte(c byte, first bool) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || (!first && (c >= '0' && c <= '9' || c == '.' || c == '-'))
}

// word reads a run of name bytes (letters, digits, '_', '.', '-').
func (p *recipeParser) word() string {
	p.space()
	start := p.pos
	for !p.eof() && isNameByte(p.src[p.pos], p.pos == start) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *recipeParser) step() (Step, error) {
	var st Step
	// A selector is present when a ':' follows before any '|' or '('.
	if rest := p.src[p.pos:]; strings.ContainsRune(firstUntil(rest, "|("), ':') {
		sel, err := p.selector()
		if err != nil {
			return st, err
		}
		st.Sel = sel
	}
	for {
		op, err := p.stage()
		if err != nil {
			return st, err
		}
		if n := len(st.Ops); n > 0 && st.Ops[n-1].Stage().Kind == Coder {
			return st, p.errf("%s is a coder and must end its step (%s follows it)", st.Ops[n-1], op)
		}
		st.Ops = append(st.Ops, op)
		if !p.accept(',') {
			return st, nil
		}
	}
}

func firstUntil(s, stops string) string {
	if i := strings.IndexAny(s, stops); i >= 0 {
		return s[:i]
	}
	return s
}

func (p *recipeParser) selector() (Selector, error) {
	var sel Selector
	if p.accept('*') {
		sel.Star = true
	} else {
		for {
			w := p.word()
			if w == "" {
				return sel, p.errf("want a slot name or '*'")
			}
			sl := Slot{Name: w}
			if i := strings.Index(w, ".."); i >= 0 {
				// name digits .. digits: the name part ends where the trailing
				// digits before ".." start.
				left, right := w[:i], w[i+2:]
				j := len(left)
				for j > 0 && left[j-1] >= '0' && left[j-1] <= '9' {
					j--
				}
				lo, err1 := strconv.Atoi(left[j:])
				hi, err2 := strconv.Atoi(right)
				if j == 0 || err1 != nil || err2 != nil || lo > hi || lo < 0 {
					return sel, p.errf("bad slot range %q (want like plane0..2)", w)
				}
				sl = Slot{Name: left[:j], Ranged: true, Lo: lo, Hi: hi}
			}
			sel.Slots = append(sel.Slots, sl)
			if !p.accept('+') {
				break
			}
		}
	}
	if !p.accept(':') {
		return sel, p.errf("want ':' after selector")
	}
	return sel, nil
}

func (p *recipeParser) stage() (Op, error) {
	at := p.pos
	name := p.word()
	if name == "" {
		return nil, p.errf("want a stage name")
	}
	s, args, ok := LookupName(name)
	if !ok {
		p.pos = at
		return nil, p.errf("unknown stage %q (stages register when their package is linked: lossless, sparse, lossy, gradient; transport links them all)", name)
	}
	args = append([]Arg(nil), args...)
	if p.accept('(') {
		if !p.accept(')') {
			for {
				p.space()
				start := p.pos
				for !p.eof() && strings.IndexByte(",()|", p.src[p.pos]) < 0 {
					p.pos++
				}
				a := strings.TrimSpace(p.src[start:p.pos])
				if a == "" {
					return nil, p.errf("empty argument to %s", name)
				}
				k, v, hasKey := strings.Cut(a, "=")
				if hasKey {
					args = append(args, Arg{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)})
				} else {
					args = append(args, Arg{Value: a})
				}
				if p.accept(')') {
					break
				}
				if !p.accept(',') {
					return nil, p.errf("want ',' or ')' in arguments of %s", name)
				}
			}
		}
	}
	op, err := s.New(args)
	if err != nil {
		return nil, fmt.Errorf("%w (at offset %d in %q)", err, at, p.src)
	}
	return op, nil
}

// ChunkElements is how many elements of esz bytes go into each frame when
// a tensor of nel elements is cut into chunks of about chunkSize bytes for
// this recipe: whole-tensor recipes take all of them, block recipes a
// multiple of their block. Writers and benchmarks cut the same way.
func (r *Recipe) ChunkElements(esz, nel, chunkSize int) int {
	n := max(1, chunkSize/esz)
	switch g, blk := r.Granularity(); g {
	case WholeTensor:
		n = max(nel, 1)
	case Block:
		if blk > 0 {
			n = max(blk, n/blk*blk)
		}
	}
	return n
}

// pinned reports whether a recipe must stay in force for a whole tensor.
func (r *Recipe) pinned() bool {
	g, _ := r.Granularity()
	return r.Lossy() || g != Elementwise
}
