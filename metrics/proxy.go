package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tensorpress/tensorpress/proxy"
)

// Proxy exports s (a Side's or a Proxy's Stats), read at each scrape:
//
//	tensorpress_proxy_calls_total                      calls forwarded
//	tensorpress_proxy_active_calls                     calls open
//	tensorpress_proxy_messages_total{direction="up"|"down"}
//	tensorpress_proxy_bytes_total{direction="up"|"down"}   the application's bytes, before the hop's coding
//	tensorpress_proxy_hop_bytes_total{direction="out"|"in"} the bytes on the connection to the next proxy (Stats.HopOut, HopIn)
//
// and with a Hop:
//
//	tensorpress_proxy_recipe_bytes_total{recipe, direction="in"|"out"} bytes into each recipe and out of it onto the hop ("none": sent as they were, with their mark byte)
//	tensorpress_proxy_recipe_frames_total{recipe}
//	tensorpress_proxy_encode_seconds_total, tensorpress_proxy_decode_seconds_total
//	tensorpress_proxy_autotune_switches_total
//	tensorpress_proxy_decode_errors_total{kind}        checksum, corrupt, limit, truncated, unsupported, unmarked, version (a call marked with another hop version), other
//	tensorpress_proxy_peer_bytes_total{peer, direction="out"|"in"} the hop's bytes by the other proxy's address (64 apart at most, then "other")
//	tensorpress_proxy_link_bits_per_second{peer}       each hop connection's link estimate (+Inf on loopback; absent before any)
func Proxy(s *proxy.Stats) prometheus.Collector { return proxyCollector{s} }

type proxyCollector struct{ s *proxy.Stats }

func proxyDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tensorpress_proxy_"+name, help, labels, nil)
}

var proxyDescs = struct {
	calls, active, messages, bytes, hop, recipe, frames, enc, dec, switches, errs, peer, link *prometheus.Desc
}{
	calls:    proxyDesc("calls_total", "Calls forwarded."),
	active:   proxyDesc("active_calls", "Calls open."),
	messages: proxyDesc("messages_total", "Messages forwarded, up (to the server) or down.", "direction"),
	bytes:    proxyDesc("bytes_total", "The application's message bytes forwarded, up or down, before the hop's coding.", "direction"),
	hop:      proxyDesc("hop_bytes_total", "Bytes written (out) and read (in) on the connection toward the next proxy, as counted by the caller.", "direction"),
	recipe:   proxyDesc("recipe_bytes_total", "Bytes into each recipe (in) and out of it onto the hop (out); none: messages sent as they were.", "recipe", "direction"),
	frames:   proxyDesc("recipe_frames_total", "Frames (or plain messages) sent with each recipe.", "recipe"),
	enc:      proxyDesc("encode_seconds_total", "Time spent coding messages for the hop."),
	dec:      proxyDesc("decode_seconds_total", "Time spent decoding messages from the hop."),
	switches: proxyDesc("autotune_switches_total", "Recipe switches of the hop's autotuners."),
	errs:     proxyDesc("decode_errors_total", "Messages from the hop that failed to decode, by kind.", "kind"),
	peer:     proxyDesc("peer_bytes_total", "Bytes on the hop by the other proxy's address.", "peer", "direction"),
	link:     proxyDesc("link_bits_per_second", "The autotuner's estimate of each hop connection's bandwidth.", "peer"),
}

func (proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	d := proxyDescs
	for _, x := range []*prometheus.Desc{d.calls, d.active, d.messages, d.bytes, d.hop,
		d.recipe, d.frames, d.enc, d.dec, d.switches, d.errs, d.peer, d.link} {
		ch <- x
	}
}

func (c proxyCollector) Collect(ch chan<- prometheus.Metric) {
	s, d := c.s, proxyDescs
	counter(ch, d.calls, float64(s.Calls.Load()))
	gauge(ch, d.active, float64(s.Active.Load()))
	counter(ch, d.messages, float64(s.MessagesUp.Load()), "up")
	counter(ch, d.messages, float64(s.MessagesDown.Load()), "down")
	counter(ch, d.bytes, float64(s.BytesUp.Load()), "up")
	counter(ch, d.bytes, float64(s.BytesDown.Load()), "down")
	counter(ch, d.hop, float64(s.HopOut.Load()), "out")
	counter(ch, d.hop, float64(s.HopIn.Load()), "in")
	x := s.Detail()
	for name, r := range x.Recipes {
		counter(ch, d.recipe, float64(r.In), name, "in")
		counter(ch, d.recipe, float64(r.Out), name, "out")
		counter(ch, d.frames, float64(r.Frames), name)
	}
	for kind, n := range x.Errors {
		counter(ch, d.errs, float64(n), kind)
	}
	for p, n := range x.Peers {
		counter(ch, d.peer, float64(n.Out), p, "out")
		counter(ch, d.peer, float64(n.In), p, "in")
	}
	if x.Hop {
		counter(ch, d.enc, float64(s.EncodeNanos.Load())/1e9)
		counter(ch, d.dec, float64(s.DecodeNanos.Load())/1e9)
		counter(ch, d.switches, float64(s.Switches.Load()))
	}
	for p, bw := range x.Links {
		gauge(ch, d.link, bw, p)
	}
}
