package profile

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/tensorpress/tensorpress/codec"
)

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

// ruleGradients reads a rule's gradient compressors: their text, each
// once (Profile.CheckGradients parses them).
func (d *decoder) ruleGradients(v *yaml.Node, fw string, r *Rule) error {
	seen := map[string]bool{}
	return d.list(v, fw, true, func(i int, item *yaml.Node) error {
		text, in, err := d.str(item, fw)
		if err != nil {
			return err
		}
		text = strings.TrimSpace(text)
		if text == "" {
			return errAt(in, "%s: an empty gradient compressor", fw)
		}
		if seen[text] {
			return errAt(in, "%s: %s is listed twice", fw, quote(text))
		}
		seen[text] = true
		r.Gradients = append(r.Gradients, Gradient{Text: text, Line: in.Line, Column: in.Column})
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
		err = errAt(sizeNode, "%s: min_size %s is more than max_size %s", what, FormatSize(m.MinSize), FormatSize(m.MaxSize))
	}
	return err
}
