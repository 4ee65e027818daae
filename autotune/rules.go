package autotune

import (
	"slices"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

type candidate struct {
	r    *codec.Recipe // nil: stored raw
	name string
}

// ruleSet is what a Tuner may choose from for the frames of one profile
// rule (or, without a profile, for every frame).
type ruleSet struct {
	cands  []candidate
	static bool // autotune off: always the first candidate
	// budget is the largest relative RMS error a lossy candidate may
	// show on samples; 0 allows lossless candidates only.
	budget float64
}

// rule returns the index and candidates of the profile rule frame fi
// falls under.
func (t *Tuner) rule(fi *codec.FrameInfo) (int, *ruleSet) {
	if t.prof2 == nil {
		rs := t.sets[0]
		if rs == nil {
			rs = &ruleSet{cands: t.cands, budget: t.budget}
			t.sets[0] = rs
		}
		return 0, rs
	}
	size := int64(-1)
	if fi.Type == codec.FrameTensor {
		size = int64(fi.DType.Size())
		for _, d := range fi.Shape {
			size *= d
		}
	}
	// The rule's place in the profile, from 1 (0: the default rule when
	// none matches), whatever its Index says: a Profile built by hand may
	// leave Index 0.
	i := t.prof2.MatchIndex(fi.Name, fi.DType, size, fi.Tags)
	key := i + 1
	var r *profile.Rule
	if i >= 0 {
		r = &t.prof2.Rules[i]
	} else {
		d := profile.DefaultRule()
		r = &d
	}
	rs := t.sets[key]
	if rs == nil {
		rs = &ruleSet{static: !t.prof2.Autotune.Enabled, budget: r.ErrorBudget}
		seen := map[string]bool{}
		add := func(r *codec.Recipe) {
			if r != nil && (r.String() == "raw" || r.String() == "*:raw") {
				r = nil // stored raw: what the cost model treats as free
			}
			if name := recipeName(r); !seen[name] {
				seen[name] = true
				rs.cands = append(rs.cands, candidate{r: r, name: name})
			}
		}
		for _, nr := range r.Recipes {
			add(nr.Recipe)
		}
		if r.Auto && !rs.static {
			for _, c := range t.cands {
				add(c.r)
			}
			if r.ErrorBudget > 0 {
				for _, l := range DefaultLossyCandidates() {
					if len(r.Bits) == 0 || slices.Contains(r.Bits, l.Bits()) {
						add(l)
					}
				}
			}
		}
		if len(rs.cands) == 0 {
			add(nil)
		}
		t.sets[key] = rs
	}
	return key, rs
}

// allows reports whether cd may code frame fi: a lossy recipe only on a
// float tensor not tagged lossless (the Writer refuses the rest), and
// only under a rule with an error budget.
func (rs *ruleSet) allows(cd candidate, fi *codec.FrameInfo) bool {
	return cd.r == nil || !cd.r.Lossy() ||
		rs.budget > 0 && !fi.Tags.Lossless && fi.Type == codec.FrameTensor && fi.DType.IsFloat()
}

// withinBudget reports whether cd's error, measured on samples of class
// c, is within the rule's budget; a lossy candidate not yet measured is
// not.
func (t *Tuner) withinBudget(c Class, cd candidate, rs *ruleSet) bool {
	if cd.r == nil || !cd.r.Lossy() {
		return true
	}
	s, _ := t.prof.Get(c, cd.name)
	return s.ErrorSamples > 0 && s.Error <= rs.budget
}

// usable reports whether cd may code frame fi: the rule allows it and
// the peer decodes every stage it uses.
func (t *Tuner) usable(rs *ruleSet, cd candidate, fi *codec.FrameInfo, c Class) bool {
	if !rs.allows(cd, fi) || !fitsWidth(cd, c) {
		return false
	}
	if cd.r == nil || t.peer == nil {
		return true
	}
	ok, seen := t.peerOK[cd.name]
	if !seen {
		ok = true
		for _, s := range cd.r.Steps {
			for _, op := range s.Ops {
				ok = ok && t.peer[op.Stage().ID]
			}
		}
		t.peerOK[cd.name] = ok
	}
	return ok
}

// fitsWidth reports whether candidate cd suits data of class c: a recipe
// that starts with a shuffle of a fixed width (shuffle2, shuffle4) suits
// the classes of that element width only, where one is known (a tensor's
// dtype, or a period found in a byte stream), so that the 4-byte plane
// recipe is not weighed on bf16 nor the 2-byte one on float32.
func fitsWidth(cd candidate, c Class) bool {
	if cd.r == nil || len(cd.r.Steps) == 0 || len(cd.r.Steps[0].Ops) == 0 {
		return true
	}
	op := cd.r.Steps[0].Ops[0]
	switch op.Stage().Name {
	case "width":
		return c.DType.Size() == 1 && c.Sparse // elements out of bytes: for sparse byte streams
	case "fsplit":
		// The exponent apart pays on bfloat16 (1.465x against the planes'
		// 1.435x on real weights) and on float32 (1.203x against 1.190x;
		// 2.937x against 2.870x where the values are bfloat16's); float16's
		// 11 bits of sign and mantissa fill two bytes: the planes do better.
		// A recipe that shuffles sm into 3 planes is float32's; the others
		// bfloat16's.
		if fsplitThree(cd.r) {
			return c.DType == codec.F32
		}
		return c.DType == codec.BF16
	}
	if c.DType == codec.Byte && (c.Period <= 1 || c.Sparse) {
		return true // no width found in the bytes, or a noisy one (sparse)
	}
	if op.Stage().Name != "shuffle" {
		return true
	}
	p := op.AppendParams(nil)
	return len(p) != 1 || p[0] == 0 || p[0] == max(c.Period, 1)
}

// fsplitThree reports whether r shuffles a segment into 3 planes (float32's
// sign and mantissa after fsplit).
func fsplitThree(r *codec.Recipe) bool {
	for _, st := range r.Steps {
		for _, op := range st.Ops {
			if p := op.AppendParams(nil); op.Stage().Name == "shuffle" && len(p) == 1 && p[0] == 3 {
				return true
			}
		}
	}
	return false
}
