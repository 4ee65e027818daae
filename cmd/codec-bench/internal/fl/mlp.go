package fl

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/tensorpress/tensorpress/codec"
)

// Layer widths of the default model: 784-128-64-10.
var widths = [4]int{ImageSize, 128, 64, NumClasses}

// maxHidden bounds a hidden layer's width.
const maxHidden = 1 << 14

// Large is the hidden widths of a model 12x the default (784-1024-512-10,
// 1333770 parameters), for runs where the links, not the arithmetic, set
// the pace.
var Large = [2]int{1024, 512}

// NumParams is the number of parameters of the MLP.
const NumParams = 128*784 + 128 + 64*128 + 64 + 10*64 + 10 // 109386

// evalBatch is the number of rows Evaluate pushes through at once.
const evalBatch = 1000

// Param is one parameter tensor of the model: views into the model's flat
// weight and gradient storage, shaped like PyTorch's nn.Linear (weight
// [out, in], row-major; bias [out]).
type Param struct {
	Name  string
	Shape []int64
	W, G  []float32
}

// MLP is a 784-128-64-10 perceptron with ReLU activations, in float32,
// with parameters named and laid out like the PyTorch module with
// fc1 = nn.Linear(784, 128), fc2 = nn.Linear(128, 64) and
// fc3 = nn.Linear(64, 10), computing fc3(relu(fc2(relu(fc1(x))))).
// Weights and gradients are each one flat []float32, in the order
// fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias.
// Make one with NewMLP. An MLP keeps the buffers of its forward and
// backward passes, so it is not safe for concurrent use.
type MLP struct {
	w, g   []float32
	params []Param
	widths [4]int
	ws     workspace
}

// workspace holds the per-batch buffers, grown on demand and reused.
type workspace struct {
	rows int          // capacity in rows
	x    []float32    // gathered input rows (training only)
	y    []uint8      // gathered labels (training only)
	a    [3][]float32 // layer outputs: hidden activations after ReLU, then logits
	d    [3][]float32 // gradients of the loss with respect to the layer outputs (pre-activation)
}

func (ws *workspace) grow(rows int, widths [4]int) {
	if rows <= ws.rows {
		return
	}
	ws.rows = rows
	for l := range ws.a {
		ws.a[l] = make([]float32, rows*widths[l+1])
		ws.d[l] = make([]float32, rows*widths[l+1])
	}
}

// NewMLP returns a model initialised from seed (see Init).
func NewMLP(seed uint64) *MLP {
	m := newMLP()
	m.Init(seed)
	return m
}

// NewMLPHidden returns a model with hidden layers of the given widths
// (784-h1-h2-10; {0, 0}: the default 128, 64) initialised from seed.
// The widths must be positive (at most 16384 each).
func NewMLPHidden(seed uint64, hidden [2]int) (*MLP, error) {
	m, err := newMLPHidden(hidden)
	if err != nil {
		return nil, err
	}
	m.Init(seed)
	return m, nil
}

func newMLPHidden(hidden [2]int) (*MLP, error) {
	if hidden == ([2]int{}) {
		return newMLP(), nil
	}
	for _, h := range hidden {
		if h <= 0 || h > maxHidden {
			return nil, fmt.Errorf("fl: hidden widths %v: each must be in 1..%d", hidden, maxHidden)
		}
	}
	return newMLPWidths([4]int{ImageSize, hidden[0], hidden[1], NumClasses}), nil
}

func newMLP() *MLP { return newMLPWidths(widths) }

// paramCount is the parameters of an MLP of the given layer widths.
func paramCount(widths [4]int) int {
	n := 0
	for l := 0; l < 3; l++ {
		n += widths[l]*widths[l+1] + widths[l+1]
	}
	return n
}

func newMLPWidths(widths [4]int) *MLP {
	n := paramCount(widths)
	m := &MLP{w: make([]float32, n), g: make([]float32, n), widths: widths}
	off := 0
	for l := 0; l < 3; l++ {
		in, out := widths[l], widths[l+1]
		name := fmt.Sprintf("fc%d", l+1)
		m.params = append(m.params,
			Param{Name: name + ".weight", Shape: []int64{int64(out), int64(in)},
				W: m.w[off : off+out*in : off+out*in], G: m.g[off : off+out*in : off+out*in]})
		off += out * in
		m.params = append(m.params,
			Param{Name: name + ".bias", Shape: []int64{int64(out)},
				W: m.w[off : off+out : off+out], G: m.g[off : off+out : off+out]})
		off += out
	}
	return m
}

// Init sets the weights like PyTorch's default nn.Linear initialisation
// (kaiming_uniform_ with a=√5): every weight and bias of a layer with
// fan_in inputs is drawn from U(-1/√fan_in, 1/√fan_in), from a PCG
// generator seeded with seed. The same seed gives the same weights; they
// are not PyTorch's values.
func (m *MLP) Init(seed uint64) {
	m.initFrom(newRand(seed, streamInit, 0))
}

func (m *MLP) initFrom(r *rand.Rand) {
	for i, p := range m.params {
		bound := 1 / math.Sqrt(float64(m.widths[i/2])) // fan_in of the layer
		for j := range p.W {
			p.W[j] = float32((2*r.Float64() - 1) * bound)
		}
	}
}

// Params returns the parameter tensors in PyTorch order. The views alias
// the model's storage; the slice and shapes are fresh copies.
func (m *MLP) Params() []Param {
	ps := slices.Clone(m.params)
	for i := range ps {
		ps[i].Shape = slices.Clone(ps[i].Shape)
	}
	return ps
}

// Weights returns all parameters as one flat slice, aliasing the model.
func (m *MLP) Weights() []float32 { return m.w }

// Grads returns all gradients as one flat slice, aliasing the model. They
// hold the result of the last Gradient call.
func (m *MLP) Grads() []float32 { return m.g }

// NumParams returns the number of m's parameters.
func (m *MLP) NumParams() int { return len(m.w) }

// CopyFrom sets m's weights to src's (a model of the same widths).
func (m *MLP) CopyFrom(src *MLP) { copy(m.w, src.w) }

// Load sets the weights from float32 tensors named like the parameters
// ("fc1.weight", ...) with the same shapes, such as a PyTorch state dict
// or a Snapshot. Every parameter must be given exactly once.
func (m *MLP) Load(ts []*codec.Tensor) error {
	seen := make([]bool, len(m.params))
	for _, t := range ts {
		if t == nil {
			return errors.New("fl: load: nil tensor")
		}
		i := slices.IndexFunc(m.params, func(p Param) bool { return p.Name == t.Name })
		if i < 0 {
			return fmt.Errorf("fl: load: unknown parameter %q", t.Name)
		}
		p := m.params[i]
		if seen[i] {
			return fmt.Errorf("fl: load: parameter %q given twice", t.Name)
		}
		if t.DType != codec.F32 || !slices.Equal(t.Shape, p.Shape) || !t.IsWhole() {
			return fmt.Errorf("fl: load: %s is %v %v, want float32 %v", t.Name, t.DType, t.Shape, p.Shape)
		}
		v, err := codec.View[float32](t)
		if err != nil {
			return fmt.Errorf("fl: load: %s: %w", t.Name, err)
		}
		copy(p.W, v)
		seen[i] = true
	}
	if i := slices.Index(seen, false); i >= 0 {
		return fmt.Errorf("fl: load: parameter %q missing", m.params[i].Name)
	}
	return nil
}

// Snapshot returns a copy of the weights as float32 tensors named and
// shaped like the parameters, ready to be written as safetensors.
func (m *MLP) Snapshot() []*codec.Tensor {
	ts := make([]*codec.Tensor, len(m.params))
	for i, p := range m.params {
		ts[i] = codec.FromFloat32(p.Name, slices.Clone(p.W), slices.Clone(p.Shape)...)
	}
	return ts
}

// Gradient sets the gradients to those of the mean cross-entropy loss of
// the batch (x holds len(y) images, row-major) and returns that loss.
func (m *MLP) Gradient(x []float32, y []uint8) (loss float64, err error) {
	if len(y) == 0 || len(x) != len(y)*ImageSize {
		return 0, fmt.Errorf("fl: gradient: %d pixels for %d labels, want %d per image and at least one image", len(x), len(y), ImageSize)
	}
	for i, c := range y {
		if c >= NumClasses {
			return 0, fmt.Errorf("fl: gradient: label %d of sample %d is not in 0..%d", c, i, NumClasses-1)
		}
	}
	m.ws.grow(len(y), m.widths)
	return m.gradient(x, y), nil
}

// gradientOf is Gradient on the samples idx of a validated dataset.
func (m *MLP) gradientOf(d *Dataset, idx []int) float64 {
	m.ws.grow(len(idx), m.widths)
	if len(m.ws.y) < len(idx) {
		m.ws.x = make([]float32, len(idx)*ImageSize)
		m.ws.y = make([]uint8, len(idx))
	}
	x, y := m.ws.x[:len(idx)*ImageSize], m.ws.y[:len(idx)]
	for j, i := range idx {
		copy(x[j*ImageSize:(j+1)*ImageSize], d.X[i*ImageSize:(i+1)*ImageSize])
		y[j] = d.Y[i]
	}
	return m.gradient(x, y)
}

// forward computes the layer outputs of rows images (the workspace must
// hold rows) and returns the logits.
func (m *MLP) forward(x []float32, rows int) []float32 {
	in := x
	for l := 0; l < 3; l++ {
		w, b := m.params[2*l].W, m.params[2*l+1].W
		nin, nout := m.widths[l], m.widths[l+1]
		a := m.ws.a[l][:rows*nout]
		for r := 0; r < rows; r++ {
			copy(a[r*nout:(r+1)*nout], b)
		}
		// a = in · wᵀ + a
		blas32.Gemm(blas.NoTrans, blas.Trans, 1,
			blas32.General{Rows: rows, Cols: nin, Stride: nin, Data: in},
			blas32.General{Rows: nout, Cols: nin, Stride: nin, Data: w},
			1, blas32.General{Rows: rows, Cols: nout, Stride: nout, Data: a})
		if l < 2 {
			for i, v := range a {
				if v < 0 {
					a[i] = 0
				}
			}
		}
		in = a
	}
	return in
}

// gradient is Gradient without the checks; the workspace must hold
// len(y) rows.
func (m *MLP) gradient(x []float32, y []uint8) float64 {
	rows := len(y)
	logits := m.forward(x, rows)

	// Mean cross-entropy and its gradient (softmax - onehot) / rows.
	d := m.ws.d[2][:rows*NumClasses]
	scale := 1 / float64(rows)
	var loss float64
	for r := 0; r < rows; r++ {
		z := logits[r*NumClasses : (r+1)*NumClasses]
		dz := d[r*NumClasses : (r+1)*NumClasses]
		mx := z[0]
		for _, v := range z[1:] {
			mx = max(mx, v)
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v - mx))
		}
		lse := float64(mx) + math.Log(sum)
		loss += lse - float64(z[y[r]])
		for k, v := range z {
			dz[k] = float32(math.Exp(float64(v)-lse) * scale)
		}
		dz[y[r]] -= float32(scale)
	}

	// Back through the layers: for layer l with input in and output
	// gradient d, gW = dᵀ·in, gb = Σ_rows d, and the input gradient d·W
	// masked by the ReLU.
	for l := 2; l >= 0; l-- {
		nin, nout := m.widths[l], m.widths[l+1]
		d := m.ws.d[l][:rows*nout]
		in := x
		if l > 0 {
			in = m.ws.a[l-1][:rows*nin]
		}
		gw, gb := m.params[2*l].G, m.params[2*l+1].G
		blas32.Gemm(blas.Trans, blas.NoTrans, 1,
			blas32.General{Rows: rows, Cols: nout, Stride: nout, Data: d},
			blas32.General{Rows: rows, Cols: nin, Stride: nin, Data: in},
			0, blas32.General{Rows: nout, Cols: nin, Stride: nin, Data: gw})
		clear(gb)
		for r := 0; r < rows; r++ {
			for k, v := range d[r*nout : (r+1)*nout] {
				gb[k] += v
			}
		}
		if l == 0 {
			break
		}
		din := m.ws.d[l-1][:rows*nin]
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1,
			blas32.General{Rows: rows, Cols: nout, Stride: nout, Data: d},
			blas32.General{Rows: nout, Cols: nin, Stride: nin, Data: m.params[2*l].W},
			0, blas32.General{Rows: rows, Cols: nin, Stride: nin, Data: din})
		for i, v := range in {
			if v <= 0 { // ReLU output 0: no gradient, as in PyTorch
				din[i] = 0
			}
		}
	}
	return loss * scale
}

// Evaluate returns the fraction of d's samples whose largest logit is at
// their label (ties go to the lower class, like torch.argmax).
func (m *MLP) Evaluate(d *Dataset) (accuracy float64, err error) {
	if err := d.Validate(); err != nil {
		return 0, err
	}
	if d.N == 0 {
		return 0, errors.New("fl: evaluate: empty dataset")
	}
	return m.evaluate(d), nil
}

func (m *MLP) evaluate(d *Dataset) float64 {
	m.ws.grow(min(d.N, evalBatch), m.widths)
	correct := 0
	for lo := 0; lo < d.N; lo += evalBatch {
		rows := min(evalBatch, d.N-lo)
		logits := m.forward(d.X[lo*ImageSize:(lo+rows)*ImageSize], rows)
		for r := 0; r < rows; r++ {
			z := logits[r*NumClasses : (r+1)*NumClasses]
			best := 0
			for k, v := range z {
				if v > z[best] {
					best = k
				}
			}
			if best == int(d.Y[lo+r]) {
				correct++
			}
		}
	}
	return float64(correct) / float64(d.N)
}
