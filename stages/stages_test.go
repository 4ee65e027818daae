package stages_test

import (
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/stages"
)

// TestLinked: importing stages is enough to parse a recipe naming a stage
// of each of the three packages it links, and leaves the gradient stages
// to package gradient.
func TestLinked(t *testing.T) {
	for _, name := range []string{"shuffle4", "zstd", "s2", "xz", "huff0", "bytedelta", "sparse", "coo", "fp16", "bf16", "int8", "nf4", "fp4", "qsgd", "sign", "ternary"} {
		if _, _, ok := codec.LookupName(name); !ok {
			t.Errorf("stage %q not registered", name)
		}
	}
	if _, err := codec.ParseRecipe("int8 | *:zstd(1)"); err != nil {
		t.Errorf("a lossy recipe: %v", err)
	}
	if _, _, ok := codec.LookupName("topk"); ok {
		t.Error("topk registered without package gradient")
	}
}
