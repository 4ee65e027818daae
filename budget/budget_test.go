package budget

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestTryCharge(t *testing.T) {
	b := New(100)
	c1, err := b.TryCharge(60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryCharge(50); !errors.Is(err, ErrExhausted) {
		t.Fatalf("50 more of 100 with 60 in use: %v, want ErrExhausted", err)
	}
	if _, err := b.TryCharge(101); !errors.Is(err, ErrExhausted) {
		t.Fatalf("more than the whole budget: %v", err)
	}
	c1.Release()
	c1.Release() // a second release changes nothing
	c2, err := b.TryCharge(100)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	s := b.Stats()
	if s.InUse != 100 || s.Peak != 100 || s.Charges != 2 || s.Refused != 2 || s.Limit != 100 {
		t.Fatalf("stats %+v", s)
	}
	c2.Release()
	if s := b.Stats(); s.InUse != 0 {
		t.Fatalf("in use after releases: %d", s.InUse)
	}
}

func TestChargeWaits(t *testing.T) {
	b := New(10)
	c, _ := b.TryCharge(10)
	got := make(chan error, 1)
	go func() {
		c2, err := b.Charge(context.Background(), 5)
		c2.Release()
		got <- err
	}()
	c.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	c3, _ := b.TryCharge(10)
	if _, err := b.Charge(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("charge past its context: %v", err)
	}
	c3.Release()
	if _, err := b.Charge(context.Background(), 11); !errors.Is(err, ErrExhausted) {
		t.Fatalf("charge over the limit: %v", err)
	}
}

func TestNil(t *testing.T) {
	var b *Budget
	c, err := b.TryCharge(1 << 40)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	var nc *Charge
	nc.Release()
	if b.Stats() != (Stats{}) || nc.Bytes() != 0 {
		t.Fatal("nil budget stats")
	}
}

func TestConcurrent(t *testing.T) {
	b := New(1000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c, err := b.Charge(context.Background(), 300)
				if err != nil {
					t.Error(err)
					return
				}
				if u := b.Stats().InUse; u > 1000 {
					t.Errorf("in use %d over the limit", u)
				}
				c.Release()
			}
		})
	}
	wg.Wait()
	if s := b.Stats(); s.InUse != 0 || s.Peak > 1000 {
		t.Fatalf("%+v", s)
	}
}
