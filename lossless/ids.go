package lossless

import "github.com/tensorpress/tensorpress/codec"

// Permanent wire IDs of the lossless stages. Never reuse or renumber one.
// ID 1 is codec's raw stage.
const (
	ShuffleID   codec.StageID = 2  // params: width (1 byte)
	ByteDeltaID codec.StageID = 3  // params: none
	ZstdID      codec.StageID = 4  // params: level (1 byte, 1..22)
	S2ID        codec.StageID = 5  // params: mode (1 byte: 0 default, 1 better)
	XzID        codec.StageID = 6  // params: dictionary size log2 (1 byte)
	Huff0ID     codec.StageID = 7  // params: none
	FsplitID    codec.StageID = 8  // params: none
	Huff0bID    codec.StageID = 9  // params: block size log2 (1 byte, 12..17)
	LenbitsID   codec.StageID = 10 // params: width (1 byte: 2, 4 or 8)
	FloatcmID   codec.StageID = 11 // params: model (1 byte: 1)
	Huff0pID    codec.StageID = 12 // params: block size log2 (1 byte, 12..17)
	FloatrankID codec.StageID = 13 // params: none
)
