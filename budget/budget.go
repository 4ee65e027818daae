// Package budget bounds the memory a process holds on behalf of its peers.
//
// A service on an open port decodes what its peers send: a frame of a few
// bytes may claim gigabytes once decoded. A Budget is the process's
// allowance for such memory, in bytes. Before decoding, a service charges
// what the frames' checked headers claim (codec.DecodedSize reads them
// without decoding); when the budget is spent, the call is refused
// (TryCharge: the service answers ResourceExhausted) or waits for memory
// to be released (Charge: backpressure). The charge is released when the
// decoded data is no longer held.
//
// One Budget is meant to be shared by everything in a process that holds
// data for peers (the proxy's hops, the hub's uploads and fetches, the
// NATS relays), so that concurrent calls cannot add up past it. A nil
// *Budget charges nothing and never refuses.
//
// A Budget is safe for concurrent use. It is built on
// golang.org/x/sync/semaphore.
package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// DefaultBytes is the budget a service gets unless told otherwise: 512 MiB.
const DefaultBytes = 512 << 20

// ErrExhausted is returned when a charge does not fit in what is left of
// the budget now (TryCharge), or can never fit (more than the whole
// budget). Services answer it with gRPC's ResourceExhausted.
var ErrExhausted = errors.New("budget: memory budget spent")

// Budget is a process's allowance of memory for peers' data, in bytes.
type Budget struct {
	sem              *semaphore.Weighted
	limit            int64
	used, peak       atomic.Int64
	charges, refused atomic.Int64
}

// New returns a budget of limit bytes. It panics if limit is not
// positive (a programmer's mistake: a flag's value is checked first).
func New(limit int64) *Budget {
	if limit <= 0 {
		panic(fmt.Sprintf("budget: New(%d): the limit must be positive", limit))
	}
	return &Budget{sem: semaphore.NewWeighted(limit), limit: limit}
}

// Charge is memory charged to a Budget, held until Release.
type Charge struct {
	b    *Budget
	n    int64
	once sync.Once
}

// Release gives the charged memory back. It may be called more than
// once, and on a nil *Charge; only the first call counts.
func (c *Charge) Release() {
	if c == nil || c.b == nil {
		return
	}
	c.once.Do(func() {
		c.b.used.Add(-c.n)
		c.b.sem.Release(c.n)
	})
}

// Bytes is the size of the charge.
func (c *Charge) Bytes() int64 {
	if c == nil {
		return 0
	}
	return c.n
}

// TryCharge charges n bytes if they fit in what is left now, and returns
// an error wrapping ErrExhausted (saying how much is in use) if not.
func (b *Budget) TryCharge(n int64) (*Charge, error) {
	if b == nil || n <= 0 {
		return &Charge{}, nil
	}
	if n > b.limit {
		b.refused.Add(1)
		return nil, fmt.Errorf("%w: %d bytes asked, more than the whole budget of %d", ErrExhausted, n, b.limit)
	}
	if !b.sem.TryAcquire(n) {
		b.refused.Add(1)
		return nil, fmt.Errorf("%w: %d bytes asked, %d of %d in use", ErrExhausted, n, b.used.Load(), b.limit)
	}
	return b.charged(n), nil
}

// Charge charges n bytes, waiting until they fit or ctx ends (then it
// returns ctx's error). A charge larger than the whole budget fails at
// once with ErrExhausted.
func (b *Budget) Charge(ctx context.Context, n int64) (*Charge, error) {
	if b == nil || n <= 0 {
		return &Charge{}, nil
	}
	if n > b.limit {
		b.refused.Add(1)
		return nil, fmt.Errorf("%w: %d bytes asked, more than the whole budget of %d", ErrExhausted, n, b.limit)
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	return b.charged(n), nil
}

func (b *Budget) charged(n int64) *Charge {
	b.charges.Add(1)
	u := b.used.Add(n)
	for {
		p := b.peak.Load()
		if u <= p || b.peak.CompareAndSwap(p, u) {
			break
		}
	}
	return &Charge{b: b, n: n}
}

// Stats is a snapshot of a Budget, for metrics.
type Stats struct {
	Limit, InUse, Peak int64 // bytes
	Charges, Refused   int64 // charges made and refused since New
}

// Stats returns the budget's current figures (zero for a nil Budget).
func (b *Budget) Stats() Stats {
	if b == nil {
		return Stats{}
	}
	return Stats{Limit: b.limit, InUse: b.used.Load(), Peak: b.peak.Load(), Charges: b.charges.Load(), Refused: b.refused.Load()}
}
