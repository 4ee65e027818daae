package gradient

import "github.com/tensorpress/tensorpress/codec"

// Permanent wire IDs of the gradient stages (range 96-127). An ID never
// changes meaning.
const (
	TopKID      codec.StageID = 96  // params: selection (see selectParams)
	RandKID     codec.StageID = 97  // params: ratio (f32 bits), seed (uvarint)
	ThresholdID codec.StageID = 98  // params: threshold (f32 bits)
	DGCID       codec.StageID = 99  // params: ratio (f32 bits), sample ratio (f32 bits)
	PowerSGDID  codec.StageID = 100 // params: rank (uvarint), rows (uvarint)
	BloomID     codec.StageID = 101 // params: see bloom.go
)
