package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

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
