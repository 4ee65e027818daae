package autotune

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

// pacedSpeed is the encode speed of the test stage paced, in bytes per
// second of the clock.
const pacedSpeed = 8e6

// paced is a test-only coder: s2's coding, at pacedSpeed on the clock.
// Inside a bubble of testing/synctest the clock moves only while every
// goroutine waits, so coding costs no time of its own there: paced gives
// a coder whose speed is the same on every machine and under any load,
// and tests of the Tuner's choices between coding and the link come out
// the same every run.
var pacedStage = &codec.Stage{
	ID: 240, Name: "testpaced", Kind: codec.Coder,
	Reads: "any byte segment", Writes: "one S2 block",
	Doc:  fmt.Sprintf("test only: s2 at %g bytes/s of the clock", pacedSpeed),
	New:  func([]codec.Arg) (codec.Op, error) { return pacedOp{s2Op()}, nil },
	Load: func([]byte) (codec.Op, error) { return pacedOp{s2Op()}, nil },
}

var pacedRecipe *codec.Recipe

func init() {
	codec.Register(pacedStage)
	pacedRecipe = codec.MustParseRecipe("*:testpaced")
}

func s2Op() codec.Op { return codec.MustParseRecipe("*:s2").Steps[0].Ops[0] }

type pacedOp struct{ codec.Op }

func (pacedOp) Stage() *codec.Stage            { return pacedStage }
func (pacedOp) String() string                 { return "testpaced" }
func (pacedOp) AppendParams(dst []byte) []byte { return dst }

func (p pacedOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	time.Sleep(time.Duration(float64(len(in.Data)) / pacedSpeed * float64(time.Second)))
	return p.Op.Encode(ctx, in)
}

// The pure-Go zstd backend (CGO_ENABLED=0) keeps a pool of encoders and
// one decoder for the process, with channels inside: one made in a bubble
// of testing/synctest may not be used outside it, nor one made outside in
// it. Tests in bubbles leave the zstd recipes out.

func usesZstd(r *codec.Recipe) bool { return r != nil && strings.Contains(r.String(), "zstd") }

// withoutZstd returns rs without the recipes that use zstd.
func withoutZstd(rs []*codec.Recipe) []*codec.Recipe {
	return slices.DeleteFunc(slices.Clone(rs), usesZstd)
}

// profileWithoutZstd returns a copy of p whose rules list no recipe that
// uses zstd.
func profileWithoutZstd(p *profile.Profile) *profile.Profile {
	q := *p
	q.Rules = slices.Clone(p.Rules)
	for i := range q.Rules {
		q.Rules[i].Recipes = slices.DeleteFunc(slices.Clone(q.Rules[i].Recipes), func(n profile.NamedRecipe) bool { return usesZstd(n.Recipe) })
	}
	return &q
}
