package cabi

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/sniff"
)

// profileObj is a loaded profile whose gradient compressors were checked.
type profileObj struct {
	p *profile.Profile
}

func newProfile(p *profile.Profile, err error) (uint64, int32, string) {
	if err == nil {
		err = p.CheckGradients(func(s string) error { _, err := gradient.Parse(s); return err })
	}
	if err != nil {
		return 0, ERECIPE, err.Error()
	}
	return newHandle(&profileObj{p: p}), OK, ""
}

// ProfileLoad loads a YAML profile.
func ProfileLoad(yaml unsafe.Pointer, n int64) (h uint64, code int32, msg string) {
	defer guard(&code, &msg)
	return newProfile(profile.Load(bytes.Clone(mem(yaml, n))))
}

// ProfileBuiltin loads a built-in profile by name.
func ProfileBuiltin(p *byte, n int64) (h uint64, code int32, msg string) {
	defer guard(&code, &msg)
	return newProfile(profile.Builtin(strings.Clone(str(p, n))))
}

// ProfileBuiltins lists the built-in profiles' names, one per line.
func ProfileBuiltins() string { return strings.Join(profile.Builtins(), "\n") }

// profileOf returns the profile of handle h (nil for 0).
func profileOf(h uint64) (*profile.Profile, error) {
	if h == 0 {
		return nil, nil
	}
	o, err := lookup[*profileObj](h, "profile")
	if err != nil {
		return nil, err
	}
	return o.p, nil
}

// baseLimits are the decode limits of profile h, or the defaults.
func baseLimits(h uint64) (codec.Limits, error) {
	p, err := profileOf(h)
	if err != nil || p == nil {
		return codec.DefaultLimits(), err
	}
	return p.Limits, nil
}

// choose returns the recipe t is encoded with: r when given, else the
// static choice of profile p's rule for t (tagging t lossless where the
// rule requires it), else sniff.ByClass's. A rule with gradient
// compressors is refused: those updates go through a Sender.
func choose(t *codec.Tensor, r *codec.Recipe, p *profile.Profile) (*codec.Recipe, error) {
	if r != nil {
		return r, nil
	}
	if p != nil {
		rule := p.Match(t.Name, t.DType, t.NumBytes(), t.Tags)
		if rule.RequireLossless {
			t.Tags.Lossless = true
		}
		if len(rule.Gradients) > 0 {
			return nil, codeErrorf(ERECIPE, "tensorpress: tensor %q: profile %q rule %d names gradient compressors; use a Sender (tp.Sender)", t.Name, p.Name, rule.Index)
		}
		if len(rule.Recipes) > 0 {
			return rule.Recipes[0].Recipe, nil
		}
	}
	return byClass(t), nil
}

func byClass(t *codec.Tensor) *codec.Recipe {
	return sniff.ByClass{}.Choose(codec.FrameInfo{
		Type: codec.FrameTensor, Name: t.Name, DType: t.DType, Shape: t.Shape,
		Tags: t.Tags, Len: len(t.Data), First: true, Data: t.Data,
	})
}
