package gradient

import (
	"fmt"
	"math"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/topk"
	"github.com/tensorpress/tensorpress/internal/view"
)

// modelTopK returns c as a TopK over the whole update (topk(r,model=on)).
func modelTopK(c Compressor) (TopK, bool) {
	switch c := c.(type) {
	case TopK:
		return c, c.Model
	case *TopK:
		return *c, c.Model
	}
	return TopK{}, false
}

// plans is the Outbox's scratch for Plan.
type plans struct {
	dens map[string]float32 // tensor name: the density of its next Append
	buf  []float32          // the update's compensated values, tensor after tensor
	idx  []uint32
	s    topk.Scratch
}

// Plan prepares an update ts (whole float32 tensors, every tensor that
// spec compresses in this update) for a compressor that selects over the
// whole update, topk(r,model=on): it ranks the compensated values of all
// of ts together (update plus committed residual, as the Sender adds
// them), takes the k = ceil(d*N) largest, d the compressor's density at
// the Outbox's epoch (its warm-up) and N the elements of ts, and sets the
// density of each tensor's next Append with spec to its share of them (at
// least one element). Append refuses such a tensor without a plan; an
// Append at a density of its own (AtDensity) needs none. Tensors that
// go dense (dense1d=on and rank below 2) are not ranked. For other
// compressors Plan does nothing. A tensor whose residual lives on a
// device (SetDevice) is refused: its residual cannot be ranked here.
func (o *Outbox) Plan(ts []*codec.Tensor, spec *Spec) error {
	if spec == nil {
		return fmt.Errorf("gradient: Outbox.Plan: nil spec")
	}
	c, ok := modelTopK(spec.Compressor)
	if !ok {
		return nil
	}
	if err := checkRatio("topk", c.Ratio); err != nil {
		return err
	}
	p := &o.plan
	if p.dens == nil {
		p.dens = make(map[string]float32, len(ts))
	}
	clear(p.dens)
	ranked := ts[:0:0]
	n := 0
	for _, t := range ts {
		if err := checkUpdate(t); err != nil {
			return err
		}
		if _, dev := o.onDevice[t.Name]; dev {
			return fmt.Errorf("%w: gradient: Outbox.Plan: %v: the residual of %q is on a device", codec.ErrUnsupported, c, t.Name)
		}
		if spec.Dense1D && len(t.Shape) < 2 {
			continue
		}
		ranked = append(ranked, t)
		n += len(t.Data) / 4
	}
	if n == 0 {
		return nil
	}
	p.buf = grow(p.buf, n)
	off := 0
	for _, t := range ranked {
		g, ok := view.As[float32](t.Data)
		x := p.buf[off : off+len(t.Data)/4]
		if ok {
			copy(x, g)
		} else {
			copy(view.Of(x), t.Data)
		}
		if st := o.mem.Get(t.Name); spec.Feedback && st != nil && len(st.res) == len(x) {
			for i, r := range st.res {
				x[i] += r
			}
		}
		off += len(x)
	}
	p.idx = topk.Exact(p.idx[:0], p.buf, K(c.Density(o.epoch), n), &p.s)
	off, j := 0, 0
	for _, t := range ranked {
		m := len(t.Data) / 4
		end := off + m
		cnt := 0
		for ; j < len(p.idx) && int(p.idx[j]) < end; j++ {
			cnt++
		}
		p.dens[t.Name] = densityOf(max(cnt, 1), m)
		off = end
	}
	return nil
}

// PlanEach is Plan for an update whose tensors may go through different
// specs: specOf gives each tensor's, and the tensors of one spec (specs
// parsed from the same text are one) are planned together.
func (o *Outbox) PlanEach(ts []*codec.Tensor, specOf func(*codec.Tensor) *Spec) error {
	var specs []*Spec
	groups := make(map[specKey][]*codec.Tensor)
	for _, t := range ts {
		s := specOf(t)
		if s == nil {
			return fmt.Errorf("gradient: Outbox.PlanEach: nil spec for %q", t.Name)
		}
		k := s.key()
		if _, ok := groups[k]; !ok {
			specs = append(specs, s)
		}
		groups[k] = append(groups[k], t)
	}
	for _, s := range specs {
		if err := o.Plan(groups[s.key()], s); err != nil {
			return err
		}
	}
	return nil
}

// densityOf is the density that keeps c of n elements (K), as near as a
// float32 gets: c/n, moved by a few ulps where K's tolerance or the
// rounding would keep another count.
func densityOf(c, n int) float32 {
	d := float32(c) / float32(n)
	for range 64 {
		switch k := K(d, n); {
		case k < c && d < 1:
			d = min(math.Nextafter32(d, 2), 1)
		case k > c:
			d = math.Nextafter32(d, 0)
		default:
			return d
		}
	}
	return d
}

// planned returns the compressor of t's Append with c when c selects
// over the whole update: a per-tensor TopK at the density Plan set (used
// once), or an error when Plan set none.
func (o *Outbox) planned(c Compressor, t *codec.Tensor, spec *Spec) (Compressor, error) {
	tk, ok := modelTopK(c)
	if !ok || (spec.Dense1D && len(t.Shape) < 2) {
		return c, nil
	}
	d, ok := o.plan.dens[t.Name]
	if !ok {
		return c, fmt.Errorf("gradient: Outbox.Append: %v selects over the whole update and %q has no plan: call Outbox.Plan with the update first", tk, t.Name)
	}
	delete(o.plan.dens, t.Name)
	return TopK{Ratio: d}, nil
}
