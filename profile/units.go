package profile

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// maxBytes bounds every size and bandwidth a profile may give: 1 PiB (per
// second for a bandwidth).
const maxBytes = 1 << 50

// Size units: IEC binary and SI decimal multiples of a byte.
var sizeUnits = []struct {
	name string
	mul  int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1},
}

// Bandwidth units, as bytes per second times 8 (bits per second).
var rateUnits = []struct {
	name string
	bits int64 // bits per second per unit
}{
	{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"Kbit", 1e3}, {"kbit", 1e3}, {"bit", 1},
	{"Tbps", 1e12}, {"Gbps", 1e9}, {"Mbps", 1e6}, {"Kbps", 1e3}, {"kbps", 1e3}, {"bps", 1},
	{"TiB/s", 8 << 40}, {"GiB/s", 8 << 30}, {"MiB/s", 8 << 20}, {"KiB/s", 8 << 10},
	{"TB/s", 8e12}, {"GB/s", 8e9}, {"MB/s", 8e6}, {"KB/s", 8e3}, {"kB/s", 8e3}, {"B/s", 8},
}

// splitNumber splits "12.5 MiB" into "12.5" and "MiB". The number is
// decimal digits with at most one '.', at most 30 characters.
func splitNumber(s string) (num, unit string, ok bool) {
	s = strings.TrimSpace(s)
	i, dot := 0, false
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' && !dot) {
		dot = dot || s[i] == '.'
		i++
	}
	num, unit = s[:i], strings.TrimSpace(s[i:])
	if num == "" || num == "." || len(num) > 30 {
		return "", "", false
	}
	return num, unit, true
}

// parseSize parses a byte count: an integer, or a number with a unit
// ("64KiB", "1.5 MiB", "10MB"). The result must be a whole number of bytes
// in [0, maxBytes].
func parseSize(s string) (int64, error) {
	num, unit, ok := splitNumber(s)
	if !ok {
		return 0, fmt.Errorf("want a size in bytes such as 65536, 64KiB or 1MiB")
	}
	mul := int64(-1)
	if unit == "" {
		mul = 1
	}
	for _, u := range sizeUnits {
		if unit == u.name {
			mul = u.mul
		}
	}
	if mul < 0 {
		return 0, fmt.Errorf("unknown size unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("want a size in bytes such as 65536, 64KiB or 1MiB")
	}
	r.Mul(r, new(big.Rat).SetInt64(mul))
	if !r.IsInt() {
		return 0, fmt.Errorf("not a whole number of bytes")
	}
	if r.Cmp(new(big.Rat).SetInt64(maxBytes)) > 0 {
		return 0, fmt.Errorf("more than 1 PiB")
	}
	return r.Num().Int64(), nil
}

// formatSize writes n with the largest binary unit that divides it, so
// that parseSize gives n back.
func formatSize(n int64) string {
	for _, u := range sizeUnits[:4] {
		if n >= u.mul && n%u.mul == 0 {
			return strconv.FormatInt(n/u.mul, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseRate parses a bandwidth into bytes per second: an integer (bytes
// per second), or a number with a unit ("1Gbit", "100Mbps", "12.5MB/s").
// The result is rounded to a whole byte per second and must be in
// [1, maxBytes].
func ParseRate(s string) (int64, error) {
	num, unit, ok := splitNumber(s)
	if !ok {
		return 0, fmt.Errorf("want a bandwidth such as 1Gbit, 100Mbps or 12.5MB/s")
	}
	bits := int64(-1)
	if unit == "" {
		bits = 8
	}
	if strings.HasSuffix(unit, "bit/s") {
		unit = strings.TrimSuffix(unit, "/s")
	}
	for _, u := range rateUnits {
		if unit == u.name {
			bits = u.bits
		}
	}
	if bits < 0 {
		return 0, fmt.Errorf("unknown bandwidth unit %q (want bit, Kbit, Mbit, Gbit, Tbit (or /s, or bps), or B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s)", unit)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("want a bandwidth such as 1Gbit, 100Mbps or 12.5MB/s")
	}
	r.Mul(r, new(big.Rat).SetFrac64(bits, 8))
	if r.Cmp(new(big.Rat).SetInt64(maxBytes)) > 0 {
		return 0, fmt.Errorf("more than 1 PiB/s")
	}
	// Round half up: floor(r + 1/2).
	r.Add(r, big.NewRat(1, 2))
	n := new(big.Int).Quo(r.Num(), r.Denom()).Int64()
	if n < 1 {
		return 0, fmt.Errorf("less than 1 byte per second")
	}
	return n, nil
}

// FormatRate writes a bandwidth in bytes per second as bits per second
// with the largest decimal unit that divides it ("1Gbit", "100Mbit"), so
// that ParseRate gives n back.
func FormatRate(n int64) string {
	bits := n * 8 // n <= maxBytes: no overflow
	for _, u := range rateUnits[:4] {
		if bits%u.bits == 0 {
			return strconv.FormatInt(bits/u.bits, 10) + u.name
		}
	}
	return strconv.FormatInt(bits, 10) + "bit"
}
