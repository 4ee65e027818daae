package hub

import (
	"context"
	"encoding/binary"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/lossy"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/testvectors"
)

// TestLossyDeltas serves a model through a lossy policy (fp16): tensors
// tagged lossless and fetches that require lossless stay bit for bit; the
// rest come within fp16's error, and as arithmetic deltas against a base
// the client holds, within fp16's error of the difference only.
func TestLossyDeltas(t *testing.T) {
	m1 := model(12, 21)
	m1[1].Tags.Lossless = true
	m2 := make([]*codec.Tensor, len(m1))
	for i, x := range m1 {
		y := *x
		w := f32s(x)
		for j := range w {
			w[j] += 1e-3 * w[j] * float32(j%7-3) // a small step, as between rounds
		}
		y.Data = codec.FromFloat32(x.Name, w, x.Shape...).Data
		m2[i] = &y
	}
	m2[2] = m1[2] // unchanged
	h, _ := New(WithChunkSize(16<<10), WithPolicy(codec.FixedPolicy{Recipe: codec.MustParseRecipe("fp16 | *:zstd(1)")}))
	if err := h.Publish(1, m1); err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(2, m2); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, h)
	held := func(name string) *codec.Tensor {
		for _, x := range m1 {
			if x.Name == name {
				return x
			}
		}
		return nil
	}
	fetch := func(req Request) (map[string]*codec.Tensor, Result) {
		t.Helper()
		got := map[string]*codec.Tensor{}
		res, err := Fetch(context.Background(), c, req, func(x *codec.Tensor) error {
			got[x.Name] = x
			return nil
		})
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		return got, res
	}
	// errs returns the largest error of got against m2 over fp16's bound
	// for the element's scale (the element, or its step from m1, when
	// step), and the mean absolute error.
	errs := func(got map[string]*codec.Tensor, step bool) (worst, mean float64) {
		n := 0
		for i, x := range m2 {
			g, e, b := f32s(got[x.Name]), f32s(x), f32s(m1[i])
			for j := range e {
				scale := math.Abs(float64(e[j]))
				if step {
					scale = math.Abs(float64(e[j] - b[j]))
				}
				err := math.Abs(float64(g[j] - e[j]))
				worst = max(worst, err/(scale/2048+0x1p-25))
				mean += err
				n++
			}
		}
		return worst, mean / float64(n)
	}

	exact, res := fetch(Request{Version: 2, RequireLossless: true})
	if w, _ := errs(exact, false); len(res.Lossy) != 0 || w != 0 {
		t.Fatalf("require lossless: %v lossy, error %g", res.Lossy, w)
	}
	full, res := fetch(Request{Version: 2})
	if len(res.Lossy) != len(m2)-1 || slices.Contains(res.Lossy, m1[1].Name) {
		t.Fatalf("lossy: %v", res.Lossy)
	}
	wf, mf := errs(full, false)
	if wf == 0 || wf > 1 {
		t.Fatalf("full fp16 copies: error %g of fp16's bound", wf)
	}
	if g := full[m1[1].Name]; !slices.Equal(g.Data, m2[1].Data) {
		t.Fatal("a tensor tagged lossless changed")
	}
	delta, res := fetch(Request{Version: 2, Base: 1, BaseTensor: held})
	if res.Deltas != len(m2) || len(res.Lossy) != len(m2)-1 {
		t.Fatalf("deltas: %+v", res)
	}
	// The step is up to 3e-3 of the weight: fp16 of the step errs far
	// less than fp16 of the weight.
	wd, md := errs(delta, true)
	if wd > 1 {
		t.Fatalf("deltas: error %g of fp16's bound for the step", wd)
	}
	if md > mf/100 {
		t.Fatalf("deltas: mean error %g, full copies %g", md, mf)
	}
	t.Logf("mean absolute error: full fp16 copies %.3g, fp16 deltas %.3g", mf, md)
	if !slices.Equal(delta[m1[2].Name].Data, m1[2].Data) || !slices.Equal(delta[m1[1].Name].Data, m2[1].Data) {
		t.Fatal("an unchanged or lossless tensor differs")
	}
	for _, x := range delta {
		if len(x.Tags.Extra) != 0 {
			t.Fatalf("%q kept tags %v", x.Name, x.Tags.Extra)
		}
	}
}

// f32s copies t's elements out.
func f32s(t *codec.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// TestLossyThroughProfile serves a model with an autotune.Tuner on a
// profile as the hub's policy: the rule that allows fp16 sends its
// tensors as fp16 deltas, every other tensor comes bit for bit.
func TestLossyThroughProfile(t *testing.T) {
	p, err := profile.Load([]byte(`version: 1
autotune: {enabled: false}
rules:
  - match: {name: ["layer00[0-5].*"], dtype: f32}
    error_budget: 0.01
    recipes: ["fp16 | *:zstd(1)"]
  - match: {}
    require_lossless: true
    recipes: ["shuffle4 | *:zstd(1)"]
`))
	if err != nil {
		t.Fatal(err)
	}
	tu, err := autotune.New(autotune.WithProfile(p))
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := model(10, 31), model(10, 32)
	h, _ := New(WithChunkSize(16<<10), WithPolicy(tu))
	h.Publish(1, m1)
	h.Publish(2, m2)
	c, _ := serve(t, h)
	got := map[string][]byte{}
	res, err := Fetch(context.Background(), c, Request{Base: 1, BaseTensor: func(name string) *codec.Tensor {
		return m1[slices.IndexFunc(m1, func(x *codec.Tensor) bool { return x.Name == name })]
	}}, func(x *codec.Tensor) error {
		got[x.Name] = x.Data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"layer000.weight", "layer001.weight", "layer002.weight", "layer003.weight", "layer004.weight", "layer005.weight"}
	if !slices.Equal(res.Lossy, want) || res.Deltas != len(m2) {
		t.Fatalf("%+v", res)
	}
	for _, x := range m2 {
		if exact := slices.Equal(got[x.Name], x.Data); exact == slices.Contains(want, x.Name) {
			t.Errorf("%q: bit for bit %t", x.Name, exact)
		}
	}
}

// TestLossyBlockwise: a blockwise recipe whose blocks tile the chunks
// (int8 with blocks of 4096, chunks of 16 KiB: 4096 float32) serves a
// tensor of several chunks as the whole tensor would be coded; one whose
// blocks do not tile them is not used (the tensor comes lossless).
func TestLossyBlockwise(t *testing.T) {
	m := model(1, 5) // one tensor of 1<<14 elements: 4 chunks
	for _, tc := range []struct {
		recipe string
		lossy  bool
	}{{"int8(4096)", true}, {"int8(3000)", false}} {
		h, _ := New(WithChunkSize(16<<10), WithPolicy(codec.FixedPolicy{Recipe: codec.MustParseRecipe(tc.recipe)}))
		if err := h.Publish(1, m); err != nil {
			t.Fatal(err)
		}
		c, _ := serve(t, h)
		var got *codec.Tensor
		res, err := Fetch(context.Background(), c, Request{}, func(x *codec.Tensor) error { got = x; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if (len(res.Lossy) == 1) != tc.lossy {
			t.Fatalf("%s: lossy tensors %v", tc.recipe, res.Lossy)
		}
		want := f32s(m[0])
		v := f32s(got)
		for b := 0; b < len(want); b += 4096 {
			var absmax float64
			for _, x := range want[b : b+4096] {
				absmax = math.Max(absmax, math.Abs(float64(x)))
			}
			for i := b; i < b+4096; i++ {
				if d := math.Abs(float64(v[i] - want[i])); d > absmax/127*0.51+1e-9 || !tc.lossy && d != 0 {
					t.Fatalf("%s: element %d: %v, want %v (block absmax %v)", tc.recipe, i, v[i], want[i], absmax)
				}
			}
		}
	}
}

// TestLossyShadow publishes 24 versions a small step apart and fetches
// each as int8 deltas against the version before. A client that holds
// the first version exactly holds the hub's shadow of each later one bit
// for bit, within one rounding of a step of the version, version after
// version (deltas taken from the version itself would leave each
// version's rounding in the copy: a random walk). A client that starts
// from the model whole in int8 keeps that rounding and adds nothing to
// it; one that fetches every other version stays within a few roundings.
func TestLossyShadow(t *testing.T) {
	const versions = 24
	h, _ := New(WithChunkSize(16<<10), WithRetention(3), WithPolicy(codec.FixedPolicy{Recipe: codec.MustParseRecipe("int8(4096) | q:huff0")}))
	c, _ := serve(t, h)
	vs := [][]*codec.Tensor{nil, model(9, 40)}
	for k := 2; k <= versions; k++ {
		next := make([]*codec.Tensor, len(vs[k-1]))
		for i, x := range vs[k-1] {
			w, step := f32s(x), f32s(testvectors.Normal(x.Name, int(x.NumElements()), 1e-3, uint64(1000*k+i)))
			for j := range w {
				w[j] += step[j]
			}
			next[i] = codec.FromFloat32(x.Name, w, x.Shape...)
		}
		vs = append(vs, next)
	}
	type client struct {
		held  map[string]*codec.Tensor
		heldV uint64
		errs  []float64 // mean absolute error of the copy at each version fetched
	}
	fetch := func(cl *client, k int) {
		t.Helper()
		req := Request{Version: uint64(k)}
		if cl.heldV > 0 {
			req.Base, req.BaseTensor = cl.heldV, func(name string) *codec.Tensor { return cl.held[name] }
		}
		got := map[string]*codec.Tensor{}
		if _, err := Fetch(context.Background(), c, req, func(x *codec.Tensor) error { got[x.Name] = x; return nil }); err != nil {
			t.Fatalf("version %d against %d: %v", k, cl.heldV, err)
		}
		var sum float64
		n := 0
		for _, x := range vs[k] {
			g, w := f32s(got[x.Name]), f32s(x)
			for j := range w {
				sum += math.Abs(float64(g[j] - w[j]))
				n++
			}
		}
		cl.held, cl.heldV, cl.errs = got, uint64(k), append(cl.errs, sum/float64(n))
	}
	exactFirst := func() *client {
		return &client{held: maps.Collect(func(yield func(string, *codec.Tensor) bool) {
			for _, x := range vs[1] {
				if !yield(x.Name, x) {
					return
				}
			}
		}), heldV: 1}
	}
	follow, skip, exact := &client{}, &client{}, exactFirst()
	for k := 1; k <= versions; k++ {
		if err := h.Publish(uint64(k), vs[k]); err != nil {
			t.Fatal(err)
		}
		fetch(follow, k)
		if k%2 == 0 {
			fetch(skip, k)
		}
		if k > 1 {
			fetch(exact, k)
		}
		ver, err := h.get(uint64(k))
		if err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			if len(ver.shadow) != 0 {
				t.Fatalf("the first version has a shadow of %d tensors", len(ver.shadow))
			}
			continue
		}
		if len(ver.shadow) != len(vs[k]) {
			t.Fatalf("version %d: a shadow of %d tensors, want %d", k, len(ver.shadow), len(vs[k]))
		}
		for name, sh := range ver.shadow {
			if !slices.Equal(sh, exact.held[name].Data) {
				t.Fatalf("version %d: the client's copy of %q is not the hub's shadow", k, name)
			}
		}
	}
	// The 3 versions kept hold a shadow of every tensor.
	var modelBytes int64
	for _, x := range vs[versions] {
		modelBytes += int64(len(x.Data))
	}
	if got := h.Stats().ShadowBytes; got != 3*modelBytes {
		t.Errorf("Stats.ShadowBytes %d, want 3 versions of %d", got, modelBytes)
	}
	// Deltas taken from the versions themselves, as a hub does that holds
	// only the version before (no shadow of it): the roundings add up.
	naive := exactFirst()
	for k := 2; k <= versions; k++ {
		h2, _ := New(WithChunkSize(16<<10), WithPolicy(codec.FixedPolicy{Recipe: codec.MustParseRecipe("int8(4096) | q:huff0")}))
		if err := h2.Publish(uint64(k-1), vs[k-1]); err != nil {
			t.Fatal(err)
		}
		if err := h2.Publish(uint64(k), vs[k]); err != nil {
			t.Fatal(err)
		}
		c, _ = serve(t, h2)
		fetch(naive, k)
	}
	if e, ex := naive.errs[len(naive.errs)-1], exact.errs[len(exact.errs)-1]; e < 2*ex {
		t.Errorf("deltas from the versions themselves: error %.3g after %d versions, from the shadows %.3g", e, versions-1, ex)
	}
	// The first fetch is the model whole in int8: its rounding is the
	// weights', far above a step's, and stays in the copy of a client
	// that starts from it (the chain's error does not add to it).
	whole, delta := follow.errs[0], exact.errs[0]
	t.Logf("mean absolute error: from the model whole in int8 %.3g, after %d versions %.3g; from the first version held exactly %.3g after one delta, %.3g after %d (without shadows %.3g); every other version %.3g",
		whole, versions-1, follow.errs[len(follow.errs)-1], delta, exact.errs[len(exact.errs)-1], versions-1, naive.errs[len(naive.errs)-1], skip.errs[len(skip.errs)-1])
	for i, e := range exact.errs {
		if e > 1.5*delta {
			t.Errorf("held exactly, version %d: error %.3g, %.1fx one delta's", i+2, e, e/delta)
		}
	}
	for i, e := range skip.errs {
		if e > whole+3*delta {
			t.Errorf("every other version, version %d: error %.3g", 2*i+2, e)
		}
	}
	for i, e := range follow.errs {
		if e > whole+1.5*delta {
			t.Errorf("from the int8 model, version %d: error %.3g, the model's own %.3g", i+1, e, whole)
		}
	}
}

// TestLossyShadowBadValues: a version whose tensor the lossy recipe
// cannot code (a NaN: int8 refuses it) is published all the same, that
// tensor without a shadow, and fetched exactly by a client that requires
// lossless.
func TestLossyShadowBadValues(t *testing.T) {
	h, _ := New(WithChunkSize(16<<10), WithPolicy(codec.FixedPolicy{Recipe: codec.MustParseRecipe("int8(4096) | q:huff0")}))
	m1 := model(3, 50)
	if err := h.Publish(1, m1); err != nil {
		t.Fatal(err)
	}
	m2 := model(3, 51)
	w := f32s(m2[1])
	w[7] = float32(math.NaN())
	m2[1] = codec.FromFloat32(m2[1].Name, w, m2[1].Shape...)
	if err := h.Publish(2, m2); err != nil {
		t.Fatalf("a version the lossy recipe cannot code: %v", err)
	}
	ver, _ := h.get(2)
	if _, ok := ver.shadow[m2[1].Name]; ok || len(ver.shadow) != 2 {
		t.Fatalf("shadows of %d tensors (%q among them: %t), want the 2 others", len(ver.shadow), m2[1].Name, ok)
	}
	c, _ := serve(t, h)
	got := map[string][]byte{}
	if _, err := Fetch(context.Background(), c, Request{Version: 2, RequireLossless: true}, func(x *codec.Tensor) error {
		got[x.Name] = x.Data
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, x := range m2 {
		if !slices.Equal(got[x.Name], x.Data) {
			t.Errorf("%q differs", x.Name)
		}
	}
}
