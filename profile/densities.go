package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// Densities returns a profile of one rule for float32 tensors: their
// updates go through gradient compressor spec at a density chosen among
// densities (autotune.Tuner.Density, for hub.UploadRequest.Densities).
// The densities are checked as a profile file's are; the spec, as a
// file's, where the profile is used (hub.Upload).
func Densities(spec string, densities []float64) (*Profile, error) {
	ds := make([]string, len(densities))
	for i, d := range densities {
		ds[i] = strconv.FormatFloat(d, 'g', -1, 64)
	}
	return Load(fmt.Appendf(nil, "version: 1\nname: densities\nrules:\n  - match: {dtype: f32}\n    gradient: [%s]\n    densities: [%s]\n",
		strconv.Quote(spec), strings.Join(ds, ", ")))
}
