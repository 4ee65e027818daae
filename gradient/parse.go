package gradient

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tensorpress/tensorpress/codec"
)

// Spec is a compressor with the Sender settings that go with it, as
// written in a profile or on codec-bench's command line:
//
//	spec = compressor [ "|" recipe ]
//	compressor = name [ "(" [ arg { "," arg } ] ")" ]
//
// The recipe is the tail applied to the compressor's segments (default
// DefaultTail). Every compressor takes dense1d=on|off (send tensors of
// rank 0 and 1, such as biases, dense and exact, as DGC's reference
// does; default off) and ef=on|off (error feedback, default
// on). Compressors:
//
//	none                         dense float32, exact (the baseline)
//	topk(r[,warmup=e,model=on])  exact top-k, k = ceil(r*n); warm-up as DGC's; model=on: k over the whole update (Outbox.Plan)
//	randk(r[,seed=S])            random k, positions from a per-step seed
//	thresh(t)                    |x| >= t
//	dgc(r[,momentum=m,nesterov=on,clip=c,warmup=e,sample=s])   Deep Gradient Compression
//	powersgd(rank[,min=n,iters=i,warmup=e,from=R]) PowerSGD, rank-r factors with warm start; warm-up from rank R
//	sign / efsign                EF-signSGD (sign with a per-block mean magnitude)
//	qsgd(s[,B]) int8(B) fp16 ... any lossy stage, applied to every element
//
// Examples: "topk(0.01)", "topk(0.01,ef=off)", "dgc(0.001) | idx:delta,bitpack | val:fp16 | *:huff0".
type Spec struct {
	Compressor Compressor
	Feedback   bool
	Dense1D    bool          // vectors (biases) go dense: dense1d=on
	Tail       *codec.Recipe // nil: DefaultTail
	text       string
}

func (s *Spec) String() string { return s.text }

// NewSender returns a Sender for the spec (opts come after the spec's
// own settings).
func (s *Spec) NewSender(opts ...Option) (*Sender, error) {
	var o []Option
	if s.Tail != nil {
		o = append(o, WithTail(s.Tail))
	}
	if !s.Feedback {
		o = append(o, WithoutFeedback())
	}
	if s.Dense1D {
		o = append(o, WithDenseVectors())
	}
	return NewSender(s.Compressor, append(o, opts...)...)
}

// Parse parses a Spec.
func Parse(text string) (*Spec, error) {
	head, tail, hasTail := strings.Cut(text, "|")
	name, args, err := splitCall(head)
	if err != nil {
		return nil, err
	}
	s := &Spec{Feedback: true, text: strings.TrimSpace(text)}
	var rest []codec.Arg
	seen := map[string]bool{}
	for i, a := range args {
		if a.Key == "" && i > 0 && args[i-1].Key != "" {
			// CheckArgs sees the arguments without ef and dense1d, so
			// it cannot tell "topk(ef=off,0.1)" from "topk(0.1,ef=off)".
			return nil, fmt.Errorf("%w: %s: positional argument %q after %s", codec.ErrRecipe, name, a.Value, args[i-1])
		}
		if a.Key == "ef" || a.Key == "dense1d" {
			if seen[a.Key] {
				return nil, fmt.Errorf("%w: %s: %s given twice", codec.ErrRecipe, name, a.Key)
			}
			seen[a.Key] = true
			on, err := onOff(name, a)
			if err != nil {
				return nil, err
			}
			if a.Key == "ef" {
				s.Feedback = on
			} else {
				s.Dense1D = on
			}
			continue
		}
		rest = append(rest, a)
	}
	if s.Compressor, err = newCompressor(name, rest); err != nil {
		return nil, err
	}
	if hasTail {
		switch {
		case strings.TrimSpace(tail) == "":
			return nil, fmt.Errorf("%w: %q: empty recipe after '|' (*:raw stores the segments as they are)", codec.ErrRecipe, s.text)
		case s.Compressor == None{}:
			return nil, fmt.Errorf("%w: %q: none sends tensors raw and takes no recipe", codec.ErrRecipe, s.text)
		}
		if s.Tail, err = codec.ParseRecipe(tail); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// New parses a compressor's text (without ef or a tail).
func New(text string) (Compressor, error) {
	name, args, err := splitCall(text)
	if err != nil {
		return nil, err
	}
	return newCompressor(name, args)
}

func newCompressor(name string, args []codec.Arg) (Compressor, error) {
	switch name {
	case "none":
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: none takes no arguments", codec.ErrRecipe)
		}
		return None{}, nil
	case "topk":
		if err := codec.CheckArgs(name, args, 1, "ratio", "warmup", "model"); err != nil {
			return nil, err
		}
		if err := noRepeats(name, args, "ratio"); err != nil {
			return nil, err
		}
		c := TopK{}
		for _, a := range args {
			var err error
			switch a.Key {
			case "warmup":
				c.Warmup, err = floatArg(name, a, 0, 1e6)
			case "model":
				c.Model, err = onOff(name, a)
			}
			if err != nil {
				return nil, err
			}
		}
		var err error
		c.Ratio, err = needRatio(name, args)
		return c, err
	case "randk":
		if err := codec.CheckArgs(name, args, 1, "ratio", "seed"); err != nil {
			return nil, err
		}
		if err := noRepeats(name, args, "ratio"); err != nil {
			return nil, err
		}
		c := RandK{}
		for _, a := range args {
			if a.Key == "seed" {
				v, err := strconv.ParseUint(a.Value, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: randk: seed %q", codec.ErrRecipe, a.Value)
				}
				c.Seed = v
			}
		}
		var err error
		c.Ratio, err = needRatio(name, args)
		return c, err
	case "thresh":
		if err := codec.CheckArgs(name, args, 1, "t"); err != nil {
			return nil, err
		}
		op, err := thresholdStage.New(args)
		if err != nil {
			return nil, err
		}
		return Threshold{T: op.(selectOp).thresh}, nil
	case "dgc":
		return parseDGC(args)
	case "powersgd":
		return parsePowerSGD(args)
	case "efsign":
		name = "sign"
	}
	var b strings.Builder
	b.WriteString(name)
	if len(args) > 0 {
		b.WriteByte('(')
		for i, a := range args {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(a.String())
		}
		b.WriteByte(')')
	}
	if _, _, ok := codec.LookupName(name); !ok {
		return nil, fmt.Errorf("%w: unknown compressor %q (known: none, topk, randk, thresh, dgc, powersgd, efsign, and lossy stages such as sign, qsgd, int8)", codec.ErrRecipe, name)
	}
	return NewQuantize(b.String())
}

func needRatio(name string, args []codec.Arg) (float32, error) {
	for _, a := range args {
		if a.Key == "" || a.Key == "ratio" {
			return ratioArg(name, a.Value)
		}
	}
	return 0, fmt.Errorf("%w: %s needs a ratio", codec.ErrRecipe, name)
}

func onOff(name string, a codec.Arg) (bool, error) {
	switch a.Value {
	case "on", "true", "1", "yes":
		return true, nil
	case "off", "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s: %s=%q: want on or off", codec.ErrRecipe, name, a.Key, a.Value)
}

func floatArg(name string, a codec.Arg, lo, hi float64) (float64, error) {
	v, err := strconv.ParseFloat(a.Value, 64)
	if err != nil || !(v >= lo && v <= hi) {
		return 0, fmt.Errorf("%w: %s: %s=%q: want a number in [%g, %g]", codec.ErrRecipe, name, a.Key, a.Value, lo, hi)
	}
	return v, nil
}

// splitCall splits "name(a, k=v)" into its name and arguments.
func splitCall(s string) (string, []codec.Arg, error) {
	s = strings.TrimSpace(s)
	name, rest, hasArgs := strings.Cut(s, "(")
	name = strings.TrimSpace(name)
	if name == "" {
		return "", nil, fmt.Errorf("%w: empty compressor", codec.ErrRecipe)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return "", nil, fmt.Errorf("%w: compressor name %q", codec.ErrRecipe, name)
		}
	}
	if !hasArgs {
		return name, nil, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), ")")
	if !ok || strings.ContainsAny(body, "()") {
		return "", nil, fmt.Errorf("%w: %q: unbalanced parentheses", codec.ErrRecipe, s)
	}
	var args []codec.Arg
	if strings.TrimSpace(body) == "" {
		return name, nil, nil
	}
	for _, part := range strings.Split(body, ",") {
		k, v, kv := strings.Cut(part, "=")
		a := codec.Arg{Value: strings.TrimSpace(k)}
		if kv {
			a = codec.Arg{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v)}
		}
		if a.Value == "" || kv && a.Key == "" {
			return "", nil, fmt.Errorf("%w: %q: empty argument", codec.ErrRecipe, s)
		}
		args = append(args, a)
	}
	return name, args, nil
}
