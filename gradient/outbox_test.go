package gradient

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

func TestOutboxAcceptAbort(t *testing.T) {
	spec, err := Parse("topk(0.1)")
	if err != nil {
		t.Fatal(err)
	}
	o := NewOutbox(nil)
	g := func(name string, seed float32) *codec.Tensor {
		v := make([]float32, 100)
		for i := range v {
			v[i] = seed * float32(math.Sin(float64(i)+float64(seed)))
		}
		return codec.FromFloat32(name, v, 10, 10)
	}
	a1, b1 := g("a", 1), g("b", 2)
	if _, err := o.Append(nil, a1, spec, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Append(nil, b1, spec, 0.2); err != nil {
		t.Fatal(err)
	}
	if o.Pending() != 2 || !o.IsPending("a") || !o.IsPending("b") {
		t.Fatalf("pending %d", o.Pending())
	}
	if _, err := o.Append(nil, g("a", 3), spec, 0); err == nil {
		t.Fatal("a tensor with an update pending was appended again")
	}
	o.Accept(1) // a arrived
	if o.IsPending("a") || !o.IsPending("b") || o.Memory().Get("a").Step() != 1 {
		t.Fatal("Accept(1) did not commit the oldest update only")
	}
	o.Abort() // b did not
	st := o.Memory().Get("b")
	if o.Pending() != 0 || st.Step() != 0 {
		t.Fatalf("after Abort: %d pending, b at step %d", o.Pending(), st.Step())
	}
	want, _ := codec.View[float32](b1)
	for i, r := range st.Residual() {
		if r != want[i] {
			t.Fatalf("b's residual[%d] = %g, want the whole gradient %g", i, r, want[i])
		}
	}
	if _, err := o.Append(nil, nil, nil, 0); err == nil {
		t.Fatal("nil spec accepted")
	}
}

func TestPeersExclusive(t *testing.T) {
	p := NewPeers()
	ctx := context.Background()
	a, err := p.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := p.Acquire(short, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Acquire while held: %v", err)
	}
	got := make(chan *Outbox)
	go func() {
		b, _ := p.Acquire(ctx, "x")
		got <- b
	}()
	p.Release("x", a)
	if b := <-got; b != a {
		t.Fatal("the peer's Outbox changed across connections")
	}
	if p.Memory("x") != a.Memory() || p.Memory("y") != nil {
		t.Fatal("Memory")
	}
	p.Release("x", a)
}

// TestOutboxSenderPerSpecText: specs parsed from the same text (each
// connection or upload parses its profile's) share one Sender, so an
// Outbox kept across connections does not grow a Sender per connection.
func TestOutboxSenderPerSpecText(t *testing.T) {
	ob := NewOutbox(nil)
	for i := range 3 {
		spec, err := Parse("topk(0.5)")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Append(nil, codec.FromFloat32("g", []float32{1, -2, 3, float32(i)}, 4), spec, 0); err != nil {
			t.Fatal(err)
		}
		ob.Accept(1)
	}
	if len(ob.senders) != 1 {
		t.Fatalf("%d senders for one spec text, want 1", len(ob.senders))
	}
}
