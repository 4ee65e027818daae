package autotune

import (
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/sniff"
)

// Class is a kind of data, for which codec speeds and ratios are kept
// apart: float weights, sparse gradients and text compress differently
// (package sniff tells them apart).
type Class = sniff.Class

// Sniff classifies a frame from its info and samples of its data
// (sniff.Frame).
func Sniff(fi codec.FrameInfo) Class { return sniff.Frame(fi) }
