package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tensorpress/tensorpress/hub/natsfan"
)

// NATS exports the counters of a Publisher and of a Relay (either may be
// nil), read at each scrape:
//
//	tensorpress_nats_published_total      versions put into the bucket
//	tensorpress_nats_put_bytes_total      their objects' bytes (what crossed the origin's link)
//	tensorpress_nats_put_retries_total    put attempts that failed and were tried again
//	tensorpress_nats_chunk_republishes_total chunks published again (same bytes) for want of an acknowledgement
//	tensorpress_nats_relayed_total        versions a relay got and serves
//	tensorpress_nats_relayed_bytes_total  their objects' bytes
//	tensorpress_nats_relay_failures_total gets or decodes that failed (tried again)
func NATS(p *natsfan.Publisher, r *natsfan.Relay) prometheus.Collector { return natsCollector{p, r} }

type natsCollector struct {
	p *natsfan.Publisher
	r *natsfan.Relay
}

func natsDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("tensorpress_nats_"+name, help, nil, nil)
}

var natsDescs = struct{ published, putBytes, retries, republished, relayed, relayedBytes, failures *prometheus.Desc }{
	published:    natsDesc("published_total", "Versions put into the NATS bucket."),
	putBytes:     natsDesc("put_bytes_total", "Bytes of the versions put into the NATS bucket."),
	retries:      natsDesc("put_retries_total", "Put attempts that failed and were tried again."),
	republished:  natsDesc("chunk_republishes_total", "Chunks published again, from the same bytes, for want of an acknowledgement."),
	relayed:      natsDesc("relayed_total", "Versions got from the NATS bucket and served."),
	relayedBytes: natsDesc("relayed_bytes_total", "Bytes of the versions got from the NATS bucket."),
	failures:     natsDesc("relay_failures_total", "Gets or decodes of versions from NATS that failed (tried again)."),
}

func (c natsCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.p != nil {
		ch <- natsDescs.published
		ch <- natsDescs.putBytes
		ch <- natsDescs.retries
		ch <- natsDescs.republished
	}
	if c.r != nil {
		ch <- natsDescs.relayed
		ch <- natsDescs.relayedBytes
		ch <- natsDescs.failures
	}
}

func (c natsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.p != nil {
		counter(ch, natsDescs.published, float64(c.p.Published.Load()))
		counter(ch, natsDescs.putBytes, float64(c.p.PutBytes.Load()))
		counter(ch, natsDescs.retries, float64(c.p.Retries.Load()))
		counter(ch, natsDescs.republished, float64(c.p.Republished.Load()))
	}
	if c.r != nil {
		counter(ch, natsDescs.relayed, float64(c.r.Relayed.Load()))
		counter(ch, natsDescs.relayedBytes, float64(c.r.GotBytes.Load()))
		counter(ch, natsDescs.failures, float64(c.r.Failed.Load()))
	}
}
