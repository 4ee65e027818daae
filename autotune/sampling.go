package autotune

import (
	"math"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/sniff"
)

// classify returns the class of frame fi: the one Cut found for its data,
// else what Sniff finds, with the class of the frame before for the
// sparsity hysteresis where the data is of the same type.
func (t *Tuner) classify(fi *codec.FrameInfo) Class {
	var c Class
	if fi.Type == codec.FrameBytes && t.cutData == &fi.Data[0] && t.cutLen == len(fi.Data) {
		c = t.cutClass
	} else {
		var prev *Class
		if t.sniffed && t.class.DType == fi.DType {
			prev = &t.class
		}
		c = sniff.FrameAfter(*fi, prev)
	}
	t.cutData = nil
	t.class, t.sniffed = c, true
	return c
}

// sample returns the middle size bytes of the frame's data.
func sample(fi *codec.FrameInfo, size int) []byte {
	b := fi.Data
	if len(b) > size {
		off := (len(b) - size) / 2 &^ 7
		b = b[off : off+size]
	}
	return b
}

// bootstrap returns the candidates to measure on a sample of the first
// frame of a class: all that the frame allows.
func (t *Tuner) bootstrap(c Class, rs *ruleSet, fi *codec.FrameInfo) []candidate {
	var todo []candidate
	for _, cd := range rs.cands {
		if t.usable(rs, cd, fi, c) {
			todo = append(todo, cd)
		}
	}
	return todo
}

// exploreOne returns the candidate sampled longest ago, the current one
// included (its frames give its ratio, not its speed), to measure again.
func (t *Tuner) exploreOne(c Class, rs *ruleSet, fi *codec.FrameInfo) []candidate {
	if len(rs.cands) < 2 {
		return nil
	}
	pick, oldest := -1, uint64(math.MaxUint64)
	for i, cd := range rs.cands {
		if !t.usable(rs, cd, fi, c) {
			continue
		}
		if at := t.measured[profKey{c, cd.name}]; at < oldest { // 0: never
			pick, oldest = i, at
		}
	}
	if pick < 0 {
		return nil
	}
	return []candidate{rs.cands[pick]}
}
