package hub

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// MaxAccounts bounds the labels of the per-recipe and per-peer counters
// (Stats.Recipes, Stats.Peers): past it, new names are counted under
// Other, so that many clients cannot grow the hub's memory or its
// metrics without limit.
const MaxAccounts = 256

// Other is the name the counters past MaxAccounts are kept under.
const Other = "other"

// Account is one label's pair of counters: for a recipe, the bytes of the
// segments it coded (In: before coding, Out: after; frame headers aside);
// for a peer, the chunks sent to it (In) and their frames' bytes (Out).
type Account struct{ In, Out int64 }

// accounts counts by name, at most MaxAccounts names.
type accounts struct {
	mu sync.Mutex
	m  map[string]*Account
}

func (a *accounts) add(name string, in, out int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]*Account{}
	}
	c := a.m[name]
	if c == nil {
		if len(a.m) >= MaxAccounts {
			name = Other
			c = a.m[name]
		}
		if c == nil {
			c = &Account{}
			a.m[name] = c
		}
	}
	c.In += in
	c.Out += out
}

func (a *accounts) snapshot() map[string]Account {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Account, len(a.m))
	for k, v := range a.m {
		out[k] = *v
	}
	return out
}

// peerName is the host of the client of ctx's call (a client's
// connections share it), or "unknown".
func peerName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	s := p.Addr.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}
