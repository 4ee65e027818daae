package sniff

import (
	"github.com/tensorpress/tensorpress/codec"

	_ "github.com/tensorpress/tensorpress/lossless" // the recipes ByClass chooses: shuffle, huff0, zstd
	"github.com/tensorpress/tensorpress/sparse"     // and the sparse layout
)

// ByClass is a codec.Policy that takes the recipe of each frame from the
// kind of data in it (Frame): plane coding for runs of 4- and 2-byte
// floats, the sparse layout then zstd for mostly-zero data (over 2-, 4-
// or 8-byte elements in a byte stream whose non-zero runs start on such
// boundaries: width), zstd level 1 for the rest. It measures nothing, so it chooses the same on every link
// (use an autotune.Tuner to choose by the link), and it is safe for
// concurrent use. It is the default policy of rpc's compressors and of the
// hub's chunks.
type ByClass struct{}

var (
	planes4 = codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw")
	planes2 = codec.MustParseRecipe("shuffle2 | plane1:huff0 | plane0:raw")
	sparseZ = codec.MustParseRecipe("sparse | *:zstd(1)")
	// Mostly-zero bytes whose runs start on w-byte boundaries (floats
	// in an opaque message): the sparse layout over w-byte elements.
	sparseW = map[int]*codec.Recipe{
		2: codec.MustParseRecipe("width(2) | sparse | *:zstd(1)"),
		4: codec.MustParseRecipe("width(4) | sparse | *:zstd(1)"),
		8: codec.MustParseRecipe("width(8) | sparse | *:zstd(1)"),
	}
	zstd1 = codec.MustParseRecipe("*:zstd(1)")
)

// tinyFrame is the size below which ByClass stores a frame as it is:
// nothing much to gain, and every coder's header to pay.
const tinyFrame = 64

// Choose implements codec.Policy.
func (ByClass) Choose(fi codec.FrameInfo) *codec.Recipe {
	if fi.Len < tinyFrame {
		return nil
	}
	cl := Frame(fi)
	switch {
	case cl.Sparse:
		if cl.DType == codec.Byte {
			// The sample holds too few non-zero runs to tell their
			// width: the whole frame is read (eight zero bytes a step).
			if r := sparseW[sparse.ElementWidth(fi.Data)]; r != nil {
				return r
			}
		}
		return sparseZ
	case cl.Period == 4:
		return planes4
	case cl.Period == 2:
		return planes2
	}
	return zstd1
}

// Observe implements codec.Policy.
func (ByClass) Observe(codec.FrameStats) {}
