package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one measurement: a chain (or an external tool) on one input.
type row struct {
	Tensor string `json:"tensor"`
	DType  string `json:"dtype"`
	// Chain is the printed form of the parsed recipe: encode --chain
	// accepts it as it is. External rows give the equivalent spec.
	Chain    string  `json:"chain"`
	External string  `json:"external"` // "" for tensorpress, else the tool's command
	BytesIn  int64   `json:"bytes_in"`
	BytesOut int64   `json:"bytes_out"` // all frame bytes, headers included
	Frames   int     `json:"frames"`    // 0 for external rows
	Ratio    float64 `json:"ratio"`
	// MB/s are input bytes per second / 1e6, from the median of the
	// repetitions; null (NaN) for the zstd tool on tiny inputs, where
	// only its sizes are taken.
	CompressMBps   metric `json:"compress_mbps"`
	DecompressMBps metric `json:"decompress_mbps"`
	// EntropyBound is the best ratio a per-byte-plane order-0 coder can
	// reach on the whole input; 0 when the input is not a float tensor or
	// the bound is unbounded (every plane constant).
	EntropyBound float64   `json:"entropy_bound"`
	PlaneBits    []float64 `json:"plane_bits,omitempty"` // bits per byte of plane 0 (least significant) up
	// FieldBound and FieldBoundCtx are the best ratios of coders of a
	// float's fields, chunk by chunk: the exponent with an order-0 model
	// (FieldBound) or given the element before's exponent (order 1,
	// FieldBoundCtx), the sign with the mantissa as byte planes with
	// order-0 models; 0 for other types (see fieldBounds).
	FieldBound    float64 `json:"field_bound,omitempty"`
	FieldBoundCtx float64 `json:"field_bound_ctx,omitempty"`
	// FieldBoundCtx2: the exponent given the two exponents before (order
	// 2), each byte of the sign and mantissa given the exponent.
	FieldBoundCtx2 float64 `json:"field_bound_ctx2,omitempty"`
	// Density is the fraction of elements (bytes for byte streams) whose
	// bits are not all zero.
	Density float64 `json:"density"`
	// Lossy chains report how far the decoded values are from the input:
	// the largest absolute difference and ||x - y|| / ||x||.
	// Non-finite errors (an overflow to Inf, a NaN that came back as a
	// number) are written as null in JSON.
	Lossy     bool   `json:"lossy"`
	MaxAbsErr metric `json:"max_abs_err"`
	RelL2Err  metric `json:"rel_l2_err"`
	// Recipes: autotune rows, the frames of the first pass per recipe the
	// Tuner chose ("" is stored raw).
	Recipes map[string]int `json:"recipes,omitempty"`
}

// metric is a float64 that JSON writes as null when it is not finite
// (encoding/json refuses Inf and NaN).
type metric float64

// UnmarshalJSON reads null as NaN.
func (m *metric) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*m = metric(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*m = metric(f)
	return err
}

func (m metric) MarshalJSON() ([]byte, error) {
	f := float64(m)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// rowWriter prints rows in one of the output formats.
type rowWriter interface {
	write(r row) error
	flush() error
}

// newRowWriter returns the writer of a --format. summary and table keep
// the rows until flush, which prints the summary (and, for table, every
// row after it); json and csv write each row as it comes.
func newRowWriter(format string, w io.Writer, sum *summary) (rowWriter, error) {
	switch format {
	case "summary", "table":
		return &reportWriter{w: w, sum: sum, table: format == "table"}, nil
	case "json":
		return jsonWriter{json.NewEncoder(w)}, nil
	case "csv":
		cw := csv.NewWriter(w)
		err := cw.Write([]string{"tensor", "dtype", "chain", "external", "bytes_in", "bytes_out", "frames", "ratio",
			"compress_mbps", "decompress_mbps", "entropy_bound", "plane_bits", "density", "lossy", "max_abs_err", "rel_l2_err",
			"field_bound", "field_bound_ctx", "field_bound_ctx2"})
		return csvWriter{cw}, err
	}
	return nil, usagef("unknown --format %q (want summary, table, json or csv)", format)
}

func planeBits(bits []float64) string {
	s := make([]string, len(bits))
	for i, b := range bits {
		s[i] = strconv.FormatFloat(b, 'f', 2, 64)
	}
	return strings.Join(s, "/")
}

// density prints a fraction of non-zero elements as a percentage, with
// four significant digits (99.96%, 1%, 0.004%).
func density(d float64) string { return fmt.Sprintf("%.4g%%", 100*d) }

// reportWriter keeps the rows for the summary and the full table.
type reportWriter struct {
	w     io.Writer
	sum   *summary
	table bool
	rows  []row
}

func (r *reportWriter) write(x row) error {
	r.rows = append(r.rows, x)
	return nil
}

func (r *reportWriter) flush() error {
	if len(r.rows) == 0 {
		return nil
	}
	if err := r.sum.write(r.w, r.rows); err != nil || !r.table {
		return err
	}
	fmt.Fprintln(r.w)
	t := newTableWriter(r.w)
	for _, x := range r.rows {
		if err := t.write(x); err != nil {
			return err
		}
	}
	return t.flush()
}

type tableWriter struct{ tw *tabwriter.Writer }

// newTableWriter writes the header of the full table.
func newTableWriter(w io.Writer) tableWriter {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tDTYPE\tBYTES\tDENSITY\tCHAIN\tOUT\tRATIO\tCOMP MB/s\tDECOMP MB/s\tBOUND\tPLANE BITS\tFIELD BOUND\tMAX ERR\tREL L2\tEXTERNAL")
	return tableWriter{tw}
}

func (t tableWriter) write(r row) error {
	chain := r.Chain
	if chain == "" {
		chain = "(raw)"
	}
	bound, ext := "-", r.External
	if r.EntropyBound > 0 {
		bound = fmt.Sprintf("%.3fx", r.EntropyBound)
	}
	if ext == "" {
		ext = "-"
	}
	pb := planeBits(r.PlaneBits)
	if pb == "" {
		pb = "-"
	}
	fields := "-"
	if r.FieldBound > 0 {
		fields = fmt.Sprintf("%.3fx/%.3fx/%.3fx", r.FieldBound, r.FieldBoundCtx, r.FieldBoundCtx2)
	}
	maxErr, rel := "-", "-"
	if r.Lossy {
		maxErr, rel = fmt.Sprintf("%.3g", r.MaxAbsErr), fmt.Sprintf("%.3g", r.RelL2Err)
	}
	_, err := fmt.Fprintf(t.tw, "%s\t%s\t%d\t%s\t%s\t%d\t%.3fx\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
		r.Tensor, r.DType, r.BytesIn, density(r.Density), chain, r.BytesOut, r.Ratio, mbpsCell(r.CompressMBps), mbpsCell(r.DecompressMBps), bound, pb, fields, maxErr, rel, ext)
	return err
}

func (t tableWriter) flush() error { return t.tw.Flush() }

type jsonWriter struct{ enc *json.Encoder }

func (j jsonWriter) write(r row) error { return j.enc.Encode(r) }
func (j jsonWriter) flush() error      { return nil }

type csvWriter struct{ w *csv.Writer }

// write writes and flushes one row, so that rows stream as they come.
func (c csvWriter) write(r row) error {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	c.w.Write([]string{r.Tensor, r.DType, r.Chain, r.External,
		strconv.FormatInt(r.BytesIn, 10), strconv.FormatInt(r.BytesOut, 10), strconv.Itoa(r.Frames),
		f(r.Ratio), f(float64(r.CompressMBps)), f(float64(r.DecompressMBps)), f(r.EntropyBound), planeBits(r.PlaneBits),
		f(r.Density), strconv.FormatBool(r.Lossy), f(float64(r.MaxAbsErr)), f(float64(r.RelL2Err)),
		f(r.FieldBound), f(r.FieldBoundCtx), f(r.FieldBoundCtx2)})
	return c.flush()
}

func (c csvWriter) flush() error {
	c.w.Flush()
	return c.w.Error()
}

// mbpsCell prints a speed of the full table, "-" when it was not measured.
func mbpsCell(m metric) string {
	if math.IsNaN(float64(m)) {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(m))
}
