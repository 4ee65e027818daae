package transport

// The standard stages are linked into every program that wraps a
// connection, so that a receiver decodes whatever a sender's policy may
// choose without importing the stage packages itself, and its hello
// announces them all.
import (
	_ "github.com/tensorpress/tensorpress/gradient"
	_ "github.com/tensorpress/tensorpress/lossless"
	_ "github.com/tensorpress/tensorpress/lossy"
	_ "github.com/tensorpress/tensorpress/sparse"
)
