package gradient

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// sentOf appends ts through o with spec (Plan first), accepts them and
// returns how many elements of each were sent: the residual is zero
// where an element was sent whole (every element of ts is nonzero).
func sentOf(t *testing.T, o *Outbox, spec *Spec, ts ...*codec.Tensor) []int {
	t.Helper()
	if err := o.Plan(ts, spec); err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if _, err := o.Append(nil, x, spec, 0); err != nil {
			t.Fatal(err)
		}
	}
	o.Accept(len(ts))
	out := make([]int, len(ts))
	for i, x := range ts {
		for _, r := range o.Memory().Get(x.Name).Residual() {
			if r == 0 {
				out[i]++
			}
		}
	}
	return out
}

// layers is a large tensor of small values and a small one of large
// values, as a first layer and an output layer.
func layers(seed uint64) (big, small *codec.Tensor) {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]float32, 1000)
	for i := range b {
		b[i] = float32(0.01 * (r.Float64() + 0.5))
	}
	s := make([]float32, 10)
	for i := range s {
		s[i] = float32(1 + r.Float64())
	}
	return codec.FromFloat32("fc1", b, 100, 10), codec.FromFloat32("fc3", s, 5, 2)
}

func TestPlanModelTopK(t *testing.T) {
	model, err := Parse("topk(0.01,model=on)")
	if err != nil {
		t.Fatal(err)
	}
	perTensor, _ := Parse("topk(0.01)")
	big, small := layers(1)
	// Per tensor: 10 of fc1's 1000, 1 of fc3's 10.
	if got := sentOf(t, NewOutbox(nil), perTensor, big, small); got[0] != 10 || got[1] != 1 {
		t.Errorf("topk(0.01) sent %v, want [10 1]", got)
	}
	// Over the model: k = ceil(0.01*1010) = 11, fc3's 10 large values and
	// fc1's largest.
	o := NewOutbox(nil)
	if got := sentOf(t, o, model, big, small); got[0] != 1 || got[1] != 10 {
		t.Errorf("topk(0.01,model=on) sent %v, want [1 10]", got)
	}
	// The residual is ranked too: a second update of fc1's values again
	// and tiny fc3 values. fc1's residual (about twice its update) now
	// outranks fc3's values: 11 of fc1's, and fc3 its one element.
	big2, _ := layers(2)
	tiny := codec.FromFloat32("fc3", []float32{1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6}, 5, 2)
	if got := sentOf(t, o, model, big2, tiny); got[0] != 11 || got[1] != 1 {
		t.Errorf("second update sent %v (zero residuals), want [11 1]", got)
	}
}

func TestPlanWarmup(t *testing.T) {
	spec, err := Parse("topk(0.01,warmup=4,model=on)")
	if err != nil {
		t.Fatal(err)
	}
	if spec.Compressor.(TopK).String() != "topk(0.01,warmup=4,model=on)" {
		t.Errorf("String() = %q", spec.Compressor.(TopK).String())
	}
	o := NewOutbox(nil)
	o.SetEpoch(0) // density 0.25 over the model: ceil(0.25*1010) = 253
	big, small := layers(3)
	got := sentOf(t, o, spec, big, small)
	if got[0]+got[1] != 253 || got[1] != 10 {
		t.Errorf("warm-up epoch 0 sent %v, want 253 in all, fc3 whole", got)
	}
}

func TestPlanRefusals(t *testing.T) {
	spec, _ := Parse("topk(0.01,model=on)")
	big, small := layers(4)
	o := NewOutbox(nil)
	if _, err := o.Append(nil, big, spec, 0); err == nil || !strings.Contains(err.Error(), "Plan") {
		t.Fatalf("Append without a plan: %v", err)
	}
	// A density of its own needs no plan: per tensor at 0.5.
	if _, err := o.Append(nil, big, spec, 0.5); err != nil {
		t.Fatal(err)
	}
	o.Abort()
	// A plan is used once.
	if err := o.Plan([]*codec.Tensor{big, small}, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Append(nil, big, spec, 0); err != nil {
		t.Fatal(err)
	}
	o.Accept(1)
	if _, err := o.Append(nil, big, spec, 0); err == nil {
		t.Fatal("a plan was used twice")
	}
	if err := o.Plan([]*codec.Tensor{{Name: "h", DType: codec.F16, Shape: []int64{2}, Data: make([]byte, 4)}}, spec); err == nil {
		t.Fatal("Plan took a float16 tensor")
	}
	if err := o.Plan(nil, nil); err == nil {
		t.Fatal("Plan took a nil spec")
	}
	// Other compressors: nothing to plan, Append as before.
	per, _ := Parse("topk(0.01)")
	if err := o.Plan([]*codec.Tensor{big}, per); err != nil {
		t.Fatal(err)
	}
	// dense1d=on: vectors go dense, unranked and without a plan.
	d1, err := Parse("topk(0.01,model=on,dense1d=on)")
	if err != nil {
		t.Fatal(err)
	}
	bias := codec.FromFloat32("b", []float32{1, 2, 3}, 3)
	o2 := NewOutbox(nil)
	if got := sentOf(t, o2, d1, big, bias); got[0] != 10 || got[1] != 3 {
		t.Errorf("dense1d=on sent %v, want [10 3]", got)
	}
	if _, err := Parse("topk(0.01,model=maybe)"); err == nil {
		t.Fatal("model=maybe parsed")
	}
}

// TestPlanDensity checks that the density Plan sets keeps the planned
// count (K(densityOf(c, n), n) == c) exactly up to 2^24 elements where
// fewer than a million are kept, and else within K's tolerance (a
// millionth) and a float32 ulp's share (n/2^24).
func TestPlanDensity(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 100000 {
		n := 1 + r.IntN(1<<28)
		switch i % 3 {
		case 0:
			n = 1 + r.IntN(1000)
		case 1:
			n = 1 + r.IntN(1<<20)
		}
		c := 1 + r.IntN(n)
		if i%5 == 0 {
			c = 1 + r.IntN(min(n, 64))
		}
		got := K(densityOf(c, n), n)
		if n <= 1<<24 && c < 1e6 && got != c || abs(got-c) > n>>24+c/1e6+1 {
			t.Fatalf("K(densityOf(%d, %d)) = %d", c, n, got)
		}
	}
}

func abs(x int) int { return max(x, -x) }
