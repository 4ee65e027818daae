package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// summary prints, per tensor, the lossless chain with the best ratio
// against the zstd tool at the peer level, and the lossy chain with the
// best ratio whose relative L2 error is within a bound. It reads the rows
// of the whole run.
type summary struct {
	maxRelErr float64 // the lossy bound: relative L2 error
	peer      string  // what External of the rows to compare with starts with, "" for none
	peerName  string  // how the header names the peer: "zstd -3"
	peerCmd   string  // its command for inputs that are timed
	// tieRatio: lossless chains whose ratio is within this fraction of
	// the best count as tied, and the fastest encoder of them wins.
	tieRatio float64
}

// tensorRows are the rows of one tensor, in the order they came.
type tensorRows struct {
	name, dtype string
	bytesIn     int64
	rows        []row
}

// groupRows groups rows by tensor, keeping the order of the tensors.
func groupRows(rows []row) []*tensorRows {
	var out []*tensorRows
	at := map[string]*tensorRows{}
	for _, r := range rows {
		t := at[r.Tensor]
		if t == nil {
			t = &tensorRows{name: r.Tensor, dtype: r.DType, bytesIn: r.BytesIn}
			at[r.Tensor] = t
			out = append(out, t)
		}
		t.rows = append(t.rows, r)
	}
	return out
}

// bestLossless is the tensorpress lossless row with the best ratio; of the
// rows within tieRatio of it, the one that encodes fastest. nil if none.
func (s *summary) bestLossless(t *tensorRows) *row {
	top := 0.0
	for _, r := range t.rows {
		if r.External == "" && !r.Lossy {
			top = max(top, r.Ratio)
		}
	}
	var best *row
	for i := range t.rows {
		r := &t.rows[i]
		if r.External != "" || r.Lossy || r.Ratio < top*(1-s.tieRatio) {
			continue
		}
		if best == nil || r.CompressMBps > best.CompressMBps {
			best = r
		}
	}
	return best
}

// bestLossy is the lossy row with the best ratio whose relative L2 error
// is at most maxRelErr and whose ratio beats the best lossless one (on a
// tiny tensor a lossy chain's parameters can cost more than it saves). It
// also reports whether the tensor had lossy rows.
func (s *summary) bestLossy(t *tensorRows) (best *row, any bool) {
	floor := 0.0
	if b := s.bestLossless(t); b != nil {
		floor = b.Ratio
	}
	for i := range t.rows {
		r := &t.rows[i]
		if !r.Lossy {
			continue
		}
		any = true
		if e := float64(r.RelL2Err); !(e <= s.maxRelErr) || r.Ratio <= floor { // NaN does not qualify
			continue
		}
		if best == nil || r.Ratio > best.Ratio {
			best = r
		}
	}
	return best, any
}

func (s *summary) peerRow(t *tensorRows) *row {
	for i := range t.rows {
		if r := &t.rows[i]; s.peer != "" && strings.HasPrefix(r.External, s.peer) {
			return r
		}
	}
	return nil
}

// write prints the summary of rows to w.
func (s *summary) write(w io.Writer, rows []row) error {
	groups := groupRows(rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	peer := "no peer"
	if s.peer != "" {
		peer = fmt.Sprintf("%s (%s on the whole input)", s.peerName, s.peerCmd)
	}
	fmt.Fprintf(tw, "Lossless: the chain with the best ratio (within %.1f%% of it: the fastest), against %s\n", 100*s.tieRatio, peer)
	fmt.Fprintf(tw, "TENSOR\tDTYPE\tBYTES\t%s\tENC MB/s\tDEC MB/s\tBEST\tENC MB/s\tDEC MB/s\tCHAIN\n", strings.ToUpper(s.peerName))
	for _, t := range groups {
		b := s.bestLossless(t)
		if b == nil {
			continue
		}
		zr, ze, zd := "-", "-", "-"
		if z := s.peerRow(t); z != nil {
			zr, ze, zd = ratio(z.Ratio), speed(z.CompressMBps), speed(z.DecompressMBps)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.name, t.dtype, t.bytesIn, zr, ze, zd,
			ratio(b.Ratio), speed(b.CompressMBps), speed(b.DecompressMBps), displayChain(b.Chain))
	}
	fmt.Fprintf(tw, "\nLossy: the chain with the best ratio whose relative L2 error is at most %g, if it beats the lossless one\n", s.maxRelErr)
	fmt.Fprintln(tw, "TENSOR\tDTYPE\tBYTES\tRATIO\tREL L2\tMAX ERR\tENC MB/s\tDEC MB/s\tCHAIN")
	var none []string
	for _, t := range groups {
		b, any := s.bestLossy(t)
		if !any {
			continue
		}
		if b == nil {
			none = append(none, t.name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.3g\t%.3g\t%s\t%s\t%s\n", t.name, t.dtype, t.bytesIn, ratio(b.Ratio),
			float64(b.RelL2Err), float64(b.MaxAbsErr), speed(b.CompressMBps), speed(b.DecompressMBps), b.Chain)
	}
	if len(none) > 0 {
		fmt.Fprintf(tw, "(none for %s)\n", strings.Join(none, ", "))
	}
	return tw.Flush()
}

func ratio(r float64) string { return fmt.Sprintf("%.3fx", r) }

// speed prints MB/s with no decimals from 100 up, one below, and "-" when
// it was not measured.
func speed(m metric) string {
	v := float64(m)
	if math.IsNaN(v) {
		return "-"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
