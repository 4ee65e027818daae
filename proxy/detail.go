package proxy

import "math"

// Detail is what Stats counts by name, read at once: an observer (such
// as the metrics package's Prometheus collector) reads it at each scrape.
type Detail struct {
	// Recipes: by recipe (its text; "none" for messages sent as they
	// were, with their mark byte), the bytes into it, the bytes out of it
	// onto the hop and the frames (or plain messages) sent with it.
	Recipes map[string]RecipeCount
	// Errors: messages from the hop that failed to decode, by kind:
	// checksum, corrupt, limit, truncated, unsupported, unmarked, version
	// (a call marked with another hop version), other.
	Errors map[string]int64
	// Peers: the hop's bytes by the other proxy's address (maxPeers apart
	// at most, then "other").
	Peers map[string]PeerCount
	// Links: each hop connection's link estimate in bits per second, by
	// the other proxy's address (+Inf on loopback; absent before any).
	Links map[string]float64
	// Hop: whether a Hop counts into these Stats (the encode and decode
	// times and the switches mean something only then).
	Hop bool
}

// RecipeCount is one recipe's counts in Detail.
type RecipeCount struct{ In, Out, Frames int64 }

// PeerCount is one peer's hop bytes in Detail.
type PeerCount struct{ Out, In int64 }

// Detail returns the counts that s keeps by name.
func (s *Stats) Detail() Detail {
	d := Detail{Recipes: map[string]RecipeCount{}, Errors: map[string]int64{}, Peers: map[string]PeerCount{}, Links: map[string]float64{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.Hop = len(s.hops) > 0
	for name, r := range s.recipes {
		d.Recipes[name] = RecipeCount{In: r.in.Load(), Out: r.out.Load(), Frames: r.frames.Load()}
	}
	for kind, n := range s.errs {
		d.Errors[kind] = n.Load()
	}
	for p, n := range s.peers {
		d.Peers[p] = PeerCount{Out: n.out.Load(), In: n.in.Load()}
	}
	for _, h := range s.hops {
		h.mu.Lock()
		for _, hc := range h.conns {
			if bw := hc.estimate(); !math.IsNaN(bw) {
				d.Links[hc.peerKey] = bw
			}
		}
		h.mu.Unlock()
	}
	return d
}
