package rpc

// A receiver decodes whatever recipe a sender's policy chose: the package
// links every standard stage, as transport does.
import (
	_ "github.com/tensorpress/tensorpress/gradient"
	_ "github.com/tensorpress/tensorpress/lossless"
	_ "github.com/tensorpress/tensorpress/lossy"
	_ "github.com/tensorpress/tensorpress/sparse"
)
