package profile

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// maxBytes bounds every size and bandwidth a profile may give: 1 PiB (per
// second for a bandwidth).
const maxBytes = 1 << 50

// unit is a unit of a quantity: its name and what one of it is worth
// (bytes for a size, bits per second for a bandwidth).
type unit struct {
	name string
	mul  int64
}

// Size units: IEC binary and SI decimal multiples of a byte.
var sizeUnits = []unit{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1},
}

// Bandwidth units in bits per second (FormatRate uses the first four).
var rateUnits = []unit{
	{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"Kbit", 1e3}, {"kbit", 1e3}, {"bit", 1},
	{"Tbit/s", 1e12}, {"Gbit/s", 1e9}, {"Mbit/s", 1e6}, {"Kbit/s", 1e3}, {"kbit/s", 1e3}, {"bit/s", 1},
	{"Tbps", 1e12}, {"Gbps", 1e9}, {"Mbps", 1e6}, {"Kbps", 1e3}, {"kbps", 1e3}, {"bps", 1},
	{"TiB/s", 8 << 40}, {"GiB/s", 8 << 30}, {"MiB/s", 8 << 20}, {"KiB/s", 8 << 10},
	{"TB/s", 8e12}, {"GB/s", 8e9}, {"MB/s", 8e6}, {"KB/s", 8e3}, {"kB/s", 8e3}, {"B/s", 8},
}

// quantity says how to read a number with a unit: the units, the worth
// of a number without one, a divisor that turns worth into the result
// (8: bits into bytes), and the messages for a malformed number and an
// unknown unit (with %q for the unit).
type quantity struct {
	units     []unit
	bare, div int64
	want      string
	unknown   string
}

var (
	sizeQuantity = quantity{sizeUnits, 1, 1,
		"want a size in bytes such as 65536, 64KiB or 1MiB",
		"unknown size unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)"}
	rateQuantity = quantity{rateUnits, 8, 8,
		"want a bandwidth such as 1Gbit, 100Mbps or 12.5MB/s",
		"unknown bandwidth unit %q (want bit, Kbit, Mbit, Gbit, Tbit (or /s, or bps), or B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s)"}
)

// parse reads s as a number with an optional unit and returns its value
// in bytes (per second, for a bandwidth), exactly.
func (q quantity) parse(s string) (*big.Rat, error) {
	num, name, ok := splitNumber(s)
	if !ok {
		return nil, errors.New(q.want)
	}
	mul := int64(-1)
	if name == "" {
		mul = q.bare
	}
	for _, u := range q.units {
		if name == u.name {
			mul = u.mul
		}
	}
	if mul < 0 {
		return nil, fmt.Errorf(q.unknown, name)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, errors.New(q.want)
	}
	return r.Mul(r, big.NewRat(mul, q.div)), nil
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

// ParseSize parses a byte count: an integer, or a number with a unit
// ("64KiB", "1.5 MiB", "10MB"). The result must be a whole number of bytes
// in [0, maxBytes].
func ParseSize(s string) (int64, error) {
	r, err := sizeQuantity.parse(s)
	if err != nil {
		return 0, err
	}
	if !r.IsInt() {
		return 0, fmt.Errorf("not a whole number of bytes")
	}
	if r.Cmp(new(big.Rat).SetInt64(maxBytes)) > 0 {
		return 0, fmt.Errorf("more than 1 PiB")
	}
	return r.Num().Int64(), nil
}

// FormatSize writes n with the largest binary unit that divides it, so
// that ParseSize gives n back.
func FormatSize(n int64) string {
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
	r, err := rateQuantity.parse(s)
	if err != nil {
		return 0, err
	}
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
		if bits%u.mul == 0 {
			return strconv.FormatInt(bits/u.mul, 10) + u.name
		}
	}
	return strconv.FormatInt(bits, 10) + "bit"
}
