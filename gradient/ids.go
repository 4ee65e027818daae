package gradient

import "github.com/tensorpress/tensorpress/codec"

// Permanent wire IDs of the gradient stages (range 96-127). An ID never
// changes meaning.
const (
	TopKID      codec.StageID = 96  // params: selection (see selectParams)
	RandKID     codec.StageID = 97  // params: ratio (f32 bits), seed (uvarint)
	ThresholdID codec.StageID = 98  // params: threshold (f32 bits)
	DGCID       codec.StageID = 99  // params: ratio (f32 bits), sample ratio (f32 bits)
	PowerSGDID  codec.StageID = 100 // params: rank (uvarint), seed (uvarint)
	BloomID     codec.StageID = 101 // params: ratio (f32 bits), hashes (uvarint), policy (u8), seed (uvarint)
	PolyFitID   codec.StageID = 102 // params: degree (u8, 0..8)
)
