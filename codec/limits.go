package codec

// Limits bound what a decoder accepts. Every field has a safe default (see
// DefaultLimits); a zero field means "use the default". Limits are checked
// against the header, before any allocation that depends on the input.
type Limits struct {
	// MaxHeaderSize bounds a frame header in bytes. Default 1 MiB.
	MaxHeaderSize int
	// MaxFrameSize bounds a frame's stored payload in bytes. Default 256 MiB.
	MaxFrameSize int64
	// MaxDecodedSize bounds the decoded bytes of one frame, and of every
	// intermediate segment in it. Default 256 MiB.
	MaxDecodedSize int64
	// MaxSlowDecoded bounds the bytes of one frame decoded by stages
	// marked SlowDecode (floatcm: some MB/s, so that a short frame can
	// cost seconds of CPU). Default 64 MiB, the largest chunk a Writer
	// makes: 4-10 s of one core at the 7-15 MB/s floatcm decodes at in
	// docs/BENCHMARKS.md. A service that takes frames
	// from peers it does not trust may lower it.
	MaxSlowDecoded int64
	// MaxTensorSize bounds a whole tensor assembled by Reader.ReadTensor
	// (shape times element size). Default 4 GiB.
	MaxTensorSize int64
	// MaxDims bounds a tensor's rank. Default 32.
	MaxDims int
	// MaxSegments bounds the steps applied plus segments stored, per tensor
	// entry; a frame records at most 16 times as many steps over all its
	// entries. Default 1024.
	MaxSegments int
	// MaxTensors bounds the tensors in one frame. Default 4096.
	MaxTensors int
	// MaxNameLen bounds a tensor name, a tag key or value. Default 4096.
	MaxNameLen int
	// MaxTags bounds the tags of one tensor. Default 64.
	MaxTags int
}

// DefaultLimits returns the limits a decoder uses when given none.
func DefaultLimits() Limits {
	return Limits{
		MaxHeaderSize:  1 << 20,
		MaxFrameSize:   256 << 20,
		MaxDecodedSize: 256 << 20,
		MaxSlowDecoded: 64 << 20,
		MaxTensorSize:  4 << 30,
		MaxDims:        32,
		MaxSegments:    1024,
		MaxTensors:     4096,
		MaxNameLen:     4096,
		MaxTags:        64,
	}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits { return l.Fill(DefaultLimits()) }

// Fill returns l with its zero (or negative) fields taken from base: how
// a caller's partial limits are laid over a set of defaults.
func (l Limits) Fill(base Limits) Limits {
	fill := func(v *int, b int) {
		if *v <= 0 {
			*v = b
		}
	}
	fill64 := func(v *int64, b int64) {
		if *v <= 0 {
			*v = b
		}
	}
	fill(&l.MaxHeaderSize, base.MaxHeaderSize)
	fill64(&l.MaxFrameSize, base.MaxFrameSize)
	fill64(&l.MaxDecodedSize, base.MaxDecodedSize)
	fill64(&l.MaxSlowDecoded, base.MaxSlowDecoded)
	fill64(&l.MaxTensorSize, base.MaxTensorSize)
	fill(&l.MaxDims, base.MaxDims)
	fill(&l.MaxSegments, base.MaxSegments)
	fill(&l.MaxTensors, base.MaxTensors)
	fill(&l.MaxNameLen, base.MaxNameLen)
	fill(&l.MaxTags, base.MaxTags)
	return l
}
