package sparse

import "github.com/tensorpress/tensorpress/codec"

// Permanent wire IDs of the sparse stages and index codecs (range 32-63).
// An ID never changes meaning.
const (
	SparseID  codec.StageID = 32 // params: layout (1 byte)
	COOID     codec.StageID = 33 // params: none
	DeltaID   codec.StageID = 34 // params: none
	VarintID  codec.StageID = 35 // params: none
	BitpackID codec.StageID = 36 // params: none
)

// WidthID is the width stage (sparse/width.go): params, the element width
// in bytes (1 byte: 2, 4 or 8).
const WidthID codec.StageID = 37
