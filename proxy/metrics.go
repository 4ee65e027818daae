package proxy

import "github.com/prometheus/client_golang/prometheus"

// Collector exports s for Prometheus, read at each scrape:
//
//	tensorpress_proxy_calls_total                      calls forwarded
//	tensorpress_proxy_active_calls                     calls open
//	tensorpress_proxy_messages_total{direction="up"|"down"}
//	tensorpress_proxy_bytes_total{direction="up"|"down"}   the application's bytes, before the hop's coding
//	tensorpress_proxy_hop_bytes_total{direction="out"|"in"} the bytes on the connection to the next proxy (Stats.HopOut, HopIn)
func Collector(s *Stats) prometheus.Collector { return collector{s} }

type collector struct{ s *Stats }

var (
	callsDesc    = prometheus.NewDesc("tensorpress_proxy_calls_total", "Calls forwarded.", nil, nil)
	activeDesc   = prometheus.NewDesc("tensorpress_proxy_active_calls", "Calls open.", nil, nil)
	messagesDesc = prometheus.NewDesc("tensorpress_proxy_messages_total", "Messages forwarded, up (to the server) or down.", []string{"direction"}, nil)
	bytesDesc    = prometheus.NewDesc("tensorpress_proxy_bytes_total", "The application's message bytes forwarded, up or down, before the hop's coding.", []string{"direction"}, nil)
	hopDesc      = prometheus.NewDesc("tensorpress_proxy_hop_bytes_total", "Bytes written (out) and read (in) on the connection toward the next proxy, as counted by the caller.", []string{"direction"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- callsDesc
	ch <- activeDesc
	ch <- messagesDesc
	ch <- bytesDesc
	ch <- hopDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.CounterValue, float64(s.Calls.Load()))
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(s.Active.Load()))
	ch <- prometheus.MustNewConstMetric(messagesDesc, prometheus.CounterValue, float64(s.MessagesUp.Load()), "up")
	ch <- prometheus.MustNewConstMetric(messagesDesc, prometheus.CounterValue, float64(s.MessagesDown.Load()), "down")
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.BytesUp.Load()), "up")
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.BytesDown.Load()), "down")
	ch <- prometheus.MustNewConstMetric(hopDesc, prometheus.CounterValue, float64(s.HopOut.Load()), "out")
	ch <- prometheus.MustNewConstMetric(hopDesc, prometheus.CounterValue, float64(s.HopIn.Load()), "in")
}
