package natsfan

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the counters of a Publisher and of a Relay (either
// may be nil) as Prometheus metrics, read at each scrape:
//
//	tensorpress_nats_published_total      versions put into the bucket
//	tensorpress_nats_put_bytes_total      their objects' bytes (what crossed the origin's link)
//	tensorpress_nats_put_retries_total    put attempts that failed and were tried again
//	tensorpress_nats_chunk_republishes_total chunks published again (same bytes) for want of an acknowledgement
//	tensorpress_nats_relayed_total        versions a relay got and serves
//	tensorpress_nats_relayed_bytes_total  their objects' bytes
//	tensorpress_nats_relay_failures_total gets or decodes that failed (tried again)
func Collector(p *Publisher, r *Relay) prometheus.Collector { return collector{p, r} }

type collector struct {
	p *Publisher
	r *Relay
}

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("tensorpress_nats_"+name, help, nil, nil)
}

var descs = struct{ published, putBytes, retries, republished, relayed, relayedBytes, failures *prometheus.Desc }{
	published:    desc("published_total", "Versions put into the NATS bucket."),
	putBytes:     desc("put_bytes_total", "Bytes of the versions put into the NATS bucket."),
	retries:      desc("put_retries_total", "Put attempts that failed and were tried again."),
	republished:  desc("chunk_republishes_total", "Chunks published again, from the same bytes, for want of an acknowledgement."),
	relayed:      desc("relayed_total", "Versions got from the NATS bucket and served."),
	relayedBytes: desc("relayed_bytes_total", "Bytes of the versions got from the NATS bucket."),
	failures:     desc("relay_failures_total", "Gets or decodes of versions from NATS that failed (tried again)."),
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	if c.p != nil {
		ch <- descs.published
		ch <- descs.putBytes
		ch <- descs.retries
		ch <- descs.republished
	}
	if c.r != nil {
		ch <- descs.relayed
		ch <- descs.relayedBytes
		ch <- descs.failures
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if c.p != nil {
		counter(descs.published, c.p.Published.Load())
		counter(descs.putBytes, c.p.PutBytes.Load())
		counter(descs.retries, c.p.Retries.Load())
		counter(descs.republished, c.p.Republished.Load())
	}
	if c.r != nil {
		counter(descs.relayed, c.r.Relayed.Load())
		counter(descs.relayedBytes, c.r.GotBytes.Load())
		counter(descs.failures, c.r.Failed.Load())
	}
}
