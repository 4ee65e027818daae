package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/tensorpress/tensorpress/cmd/codec-bench/internal/fl"
)

// plotFL draws test accuracy (mean over seeds, with ±sd bars) against
// upstream bytes (log scale), one labelled point per compressor, and saves
// it as SVG or PNG by the file's extension.
func plotFL(path string, rows []*flRow, cfg fl.Config) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
	default:
		return usagef("--plot %q: want a .svg or .png file", path)
	}
	p := plot.New()
	what := fmt.Sprintf("%d clients, %d rounds", cfg.Clients, cfg.Rounds)
	if cfg.Mode == fl.SyncSGD {
		what = fmt.Sprintf("%d workers, %d epochs", cfg.Clients, cfg.Epochs)
	}
	p.Title.Text = fmt.Sprintf("Fashion-MNIST MLP, %s (%s, %s split)", cfg.Mode, what, cfg.Split)
	p.X.Label.Text = "upstream bytes per run (log scale)"
	p.Y.Label.Text = "test accuracy (%), mean ± sd over seeds"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	pts := plotter.XYLabels{XYs: make(plotter.XYs, len(rows)), Labels: make([]string, len(rows))}
	errs := make(plotter.YErrors, len(rows))
	for i, r := range rows {
		pts.XYs[i] = plotter.XY{X: r.UpstreamBytes, Y: 100 * r.Accuracy}
		pts.Labels[i] = " " + r.Compressor
		errs[i].Low, errs[i].High = 100*r.AccuracySD, 100*r.AccuracySD
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	bars, err := plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{pts.XYs, errs})
	if err != nil {
		return err
	}
	labels, err := plotter.NewLabels(pts)
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Font.Size = vg.Points(7)
	}
	p.Add(sc, bars, labels)
	// Room for the labels right of the points and for the error bars.
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, xy := range pts.XYs {
		xmin, xmax = min(xmin, xy.X), max(xmax, xy.X)
		ymin, ymax = min(ymin, xy.Y-errs[i].Low), max(ymax, xy.Y+errs[i].High)
	}
	if xmin > 0 {
		p.X.Min, p.X.Max = xmin/1.5, xmax*4
	}
	p.Y.Min, p.Y.Max = ymin-0.5, ymax+0.5
	if err := p.Save(9*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// rateTicks marks a link-rate axis (bit/s, logarithmic) at each power of
// ten with a whole label ("1 Mbit/s", "10 Gbit/s"), and at 2..9 times it
// without one; unshaped, the axis's right end, reads "unshaped".
type rateTicks struct {
	unshaped float64
	label    string // of the unshaped tick (default "unshaped")
}

func (t rateTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi*1.0001; d *= 10 {
		for m := 1.0; m < 10; m++ {
			v := d * m
			if v < lo*0.9999 || v > hi*1.0001 {
				continue
			}
			tk := plot.Tick{Value: v}
			if m == 1 {
				tk.Label = wholeRate(v)
				if t.unshaped != 0 && v == t.unshaped {
					tk.Label = "unshaped"
					if t.label != "" {
						tk.Label = t.label
					}
				}
			}
			ticks = append(ticks, tk)
		}
	}
	return ticks
}

// wholeRate names a power-of-ten rate in bit/s with a whole number.
func wholeRate(v float64) string {
	for _, u := range []struct {
		f    float64
		name string
	}{{1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if v >= u.f {
			return fmt.Sprintf("%.0f %s", v/u.f, u.name)
		}
	}
	return fmt.Sprintf("%.0f bit/s", v)
}

// saveWithLegend saves p (SVG or PNG by the file's extension) with leg
// drawn in a column of its own at the right, outside the data.
func saveWithLegend(p *plot.Plot, leg plot.Legend, w, h, legendW vg.Length, path string) error {
	var c vg.CanvasWriterTo
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c = vgsvg.New(w+legendW, h)
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(w+legendW, h)}
	default:
		return usagef("--plot %q: want a .svg or .png file", path)
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -legendW, 0, 0))
	leg.Top, leg.Left = true, true
	leg.Draw(draw.Crop(dc, w+vg.Points(6), 0, 0, -vg.Points(30)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
