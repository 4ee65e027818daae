package rateplot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func TestRateTicks(t *testing.T) {
	var labels []string
	for _, tk := range (RateTicks{Unshaped: 10e9, Label: "loopback"}).Ticks(10e6, 10e9) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, ","); got != "10 Mbit/s,100 Mbit/s,1 Gbit/s,loopback" {
		t.Errorf("labels %q", got)
	}
}

func TestSaveWithLegend(t *testing.T) {
	p := plot.New()
	l, err := plotter.NewLine(plotter.XYs{{X: 1e7, Y: 1}, {X: 1e8, Y: 2}})
	if err != nil {
		t.Fatal(err)
	}
	p.Add(l)
	leg := plot.NewLegend()
	leg.Add("a line", l)
	dir := t.TempDir()
	svg := filepath.Join(dir, "p.svg")
	if err := SaveWithLegend(p, leg, 4*vg.Inch, 3*vg.Inch, vg.Inch, svg); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "a line") {
		t.Fatalf("%v: the legend is not in the SVG", err)
	}
	if err := SaveWithLegend(p, leg, 4*vg.Inch, 3*vg.Inch, vg.Inch, filepath.Join(dir, "p.pdf")); err == nil {
		t.Fatal("a .pdf was accepted")
	}
}
