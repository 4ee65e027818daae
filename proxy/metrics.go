package proxy

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports s for Prometheus, read at each scrape:
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
//	tensorpress_proxy_link_bits_per_second{peer}       each hop connection's link estimate (+Inf on loopback, 0 before any)
func Collector(s *Stats) prometheus.Collector { return collector{s} }

type collector struct{ s *Stats }

var (
	callsDesc    = prometheus.NewDesc("tensorpress_proxy_calls_total", "Calls forwarded.", nil, nil)
	activeDesc   = prometheus.NewDesc("tensorpress_proxy_active_calls", "Calls open.", nil, nil)
	messagesDesc = prometheus.NewDesc("tensorpress_proxy_messages_total", "Messages forwarded, up (to the server) or down.", []string{"direction"}, nil)
	bytesDesc    = prometheus.NewDesc("tensorpress_proxy_bytes_total", "The application's message bytes forwarded, up or down, before the hop's coding.", []string{"direction"}, nil)
	hopDesc      = prometheus.NewDesc("tensorpress_proxy_hop_bytes_total", "Bytes written (out) and read (in) on the connection toward the next proxy, as counted by the caller.", []string{"direction"}, nil)
	recipeDesc   = prometheus.NewDesc("tensorpress_proxy_recipe_bytes_total", "Bytes into each recipe (in) and out of it onto the hop (out); none: messages sent as they were.", []string{"recipe", "direction"}, nil)
	framesDesc   = prometheus.NewDesc("tensorpress_proxy_recipe_frames_total", "Frames (or plain messages) sent with each recipe.", []string{"recipe"}, nil)
	encDesc      = prometheus.NewDesc("tensorpress_proxy_encode_seconds_total", "Time spent coding messages for the hop.", nil, nil)
	decDesc      = prometheus.NewDesc("tensorpress_proxy_decode_seconds_total", "Time spent decoding messages from the hop.", nil, nil)
	switchDesc   = prometheus.NewDesc("tensorpress_proxy_autotune_switches_total", "Recipe switches of the hop's autotuners.", nil, nil)
	errDesc      = prometheus.NewDesc("tensorpress_proxy_decode_errors_total", "Messages from the hop that failed to decode, by kind.", []string{"kind"}, nil)
	peerDesc     = prometheus.NewDesc("tensorpress_proxy_peer_bytes_total", "Bytes on the hop by the other proxy's address.", []string{"peer", "direction"}, nil)
	linkDesc     = prometheus.NewDesc("tensorpress_proxy_link_bits_per_second", "The autotuner's estimate of each hop connection's bandwidth.", []string{"peer"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{callsDesc, activeDesc, messagesDesc, bytesDesc, hopDesc,
		recipeDesc, framesDesc, encDesc, decDesc, switchDesc, errDesc, peerDesc, linkDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(callsDesc, float64(s.Calls.Load()))
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(s.Active.Load()))
	counter(messagesDesc, float64(s.MessagesUp.Load()), "up")
	counter(messagesDesc, float64(s.MessagesDown.Load()), "down")
	counter(bytesDesc, float64(s.BytesUp.Load()), "up")
	counter(bytesDesc, float64(s.BytesDown.Load()), "down")
	counter(hopDesc, float64(s.HopOut.Load()), "out")
	counter(hopDesc, float64(s.HopIn.Load()), "in")

	s.mu.Lock()
	hops := len(s.hops) > 0
	for name, r := range s.recipes {
		counter(recipeDesc, float64(r.in.Load()), name, "in")
		counter(recipeDesc, float64(r.out.Load()), name, "out")
		counter(framesDesc, float64(r.frames.Load()), name)
	}
	for kind, n := range s.errs {
		counter(errDesc, float64(n.Load()), kind)
	}
	for p, n := range s.peers {
		counter(peerDesc, float64(n.out.Load()), p, "out")
		counter(peerDesc, float64(n.in.Load()), p, "in")
	}
	links := map[string]float64{}
	for _, h := range s.hops {
		h.mu.Lock()
		for _, hc := range h.conns {
			links[hc.peerKey] = hc.estimate()
		}
		h.mu.Unlock()
	}
	s.mu.Unlock()
	if hops {
		counter(encDesc, float64(s.EncodeNanos.Load())/1e9)
		counter(decDesc, float64(s.DecodeNanos.Load())/1e9)
		counter(switchDesc, float64(s.Switches.Load()))
	}
	for p, bw := range links {
		if math.IsNaN(bw) {
			continue
		}
		ch <- prometheus.MustNewConstMetric(linkDesc, prometheus.GaugeValue, bw, p)
	}
}
