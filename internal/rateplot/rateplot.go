// Package rateplot draws what the benchmarks plot against a link's rate:
// an axis of link rates with whole labels, and a legend in a column of its
// own outside the data.
package rateplot

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// RateTicks marks a link-rate axis (bit/s, logarithmic) at each power of
// ten with a whole label ("1 Mbit/s", "10 Gbit/s"), and at 2..9 times it
// without one; unshaped, the axis's right end, reads "unshaped".
type RateTicks struct {
	Unshaped float64
	Label    string // of the unshaped tick (default "unshaped")
}

func (t RateTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi*1.0001; d *= 10 {
		for m := 1.0; m < 10; m++ {
			v := d * m
			if v < lo*0.9999 || v > hi*1.0001 {
				continue
			}
			tk := plot.Tick{Value: v}
			if m == 1 {
				tk.Label = WholeRate(v)
				if t.Unshaped != 0 && v == t.Unshaped {
					tk.Label = "unshaped"
					if t.Label != "" {
						tk.Label = t.Label
					}
				}
			}
			ticks = append(ticks, tk)
		}
	}
	return ticks
}

// WholeRate names a power-of-ten rate in bit/s with a whole number.
func WholeRate(v float64) string {
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

// SaveWithLegend saves p (SVG or PNG by the file's extension) with leg
// drawn in a column of its own at the right, outside the data.
func SaveWithLegend(p *plot.Plot, leg plot.Legend, w, h, legendW vg.Length, path string) error {
	var c vg.CanvasWriterTo
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c = vgsvg.New(w+legendW, h)
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(w+legendW, h)}
	default:
		return fmt.Errorf("%q: want a .svg or .png file", path)
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
