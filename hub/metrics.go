package hub

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Hub's Stats as Prometheus metrics, read at each
// scrape (no bookkeeping of its own): register it (prometheus.Register, or
// a registry of your own) and serve /metrics with promhttp.
//
//	tensorpress_hub_fetches_total               fetch RPCs
//	tensorpress_hub_active_fetches              fetch streams open
//	tensorpress_hub_chunks_sent_total           chunks sent
//	tensorpress_hub_sent_bytes_total            their frames' bytes (protobuf and gRPC framing aside)
//	tensorpress_hub_sent_raw_bytes_total        their tensors' decoded bytes
//	tensorpress_hub_encodes_total               chunks encoded
//	tensorpress_hub_cache_hits_total            chunks taken from the cache of encoded chunks
//	tensorpress_hub_encode_seconds_total        time spent encoding
//	tensorpress_hub_updates_total               uploaded updates added into a round's sum
//	tensorpress_hub_update_bytes_total          their frames' bytes
//	tensorpress_hub_active_uploads              upload streams open
//	tensorpress_hub_refused_updates_total{reason="malformed"|"oversized"}
//	tensorpress_hub_versions                    versions held
//	tensorpress_hub_memory_limit_bytes          the memory budget (WithBudget; 0: none)
//	tensorpress_hub_memory_in_use_bytes         what is charged to it now
//	tensorpress_hub_memory_peak_bytes           the most charged at once
//	tensorpress_hub_memory_refused_total        charges refused (ResourceExhausted)
//	tensorpress_hub_recipe_in_bytes_total{recipe}   bytes of the segments each recipe coded, before coding
//	tensorpress_hub_recipe_out_bytes_total{recipe}  and after (frame headers aside; the ratio is in/out)
//	tensorpress_hub_peer_chunks_total{peer}          chunks sent to each client host
//	tensorpress_hub_peer_sent_bytes_total{peer}      their frames' bytes
//
// The recipe and peer labels are bounded (MaxAccounts, then "other").
func Collector(h *Hub) prometheus.Collector { return collector{h} }

type collector struct{ h *Hub }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tensorpress_hub_"+name, help, labels, nil)
}

var descs = struct {
	fetches, active, chunks, sent, raw, encodes, hits, encodeSecs, updates, updateBytes, uploads, refused, versions,
	recipeIn, recipeOut, peerChunks, peerBytes, memLimit, memInUse, memPeak, memRefused *prometheus.Desc
}{
	fetches:     desc("fetches_total", "Fetch RPCs served."),
	active:      desc("active_fetches", "Fetch streams open."),
	chunks:      desc("chunks_sent_total", "Chunks sent to clients."),
	sent:        desc("sent_bytes_total", "Bytes of the frames of the chunks sent (protobuf and gRPC framing aside)."),
	raw:         desc("sent_raw_bytes_total", "Decoded bytes of the tensors in the chunks sent."),
	encodes:     desc("encodes_total", "Chunks encoded; the chunks sent beyond them came from the cache."),
	hits:        desc("cache_hits_total", "Chunks taken from the cache of encoded chunks."),
	encodeSecs:  desc("encode_seconds_total", "Time spent encoding chunks."),
	updates:     desc("updates_total", "Uploaded updates added into a round's sum."),
	updateBytes: desc("update_bytes_total", "Bytes of the frames of the updates added."),
	uploads:     desc("active_uploads", "Upload streams open."),
	refused:     desc("refused_updates_total", "Uploaded updates refused, by reason.", "reason"),
	versions:    desc("versions", "Model versions held."),
	recipeIn:    desc("recipe_in_bytes_total", "Bytes of the segments each recipe coded, before coding.", "recipe"),
	recipeOut:   desc("recipe_out_bytes_total", "Bytes of the segments each recipe coded, after coding (frame headers aside).", "recipe"),
	peerChunks:  desc("peer_chunks_total", "Chunks sent, by client host.", "peer"),
	peerBytes:   desc("peer_sent_bytes_total", "Bytes of the frames sent, by client host.", "peer"),
	memLimit:    desc("memory_limit_bytes", "The memory budget for what the hub holds for its peers (0: none)."),
	memInUse:    desc("memory_in_use_bytes", "Bytes charged to the memory budget now."),
	memPeak:     desc("memory_peak_bytes", "The most bytes charged to the memory budget at once."),
	memRefused:  desc("memory_refused_total", "Charges the memory budget refused."),
}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descs.fetches, descs.active, descs.chunks, descs.sent, descs.raw, descs.encodes,
		descs.hits, descs.encodeSecs, descs.updates, descs.updateBytes, descs.uploads, descs.refused, descs.versions,
		descs.recipeIn, descs.recipeOut, descs.peerChunks, descs.peerBytes, descs.memLimit, descs.memInUse, descs.memPeak, descs.memRefused} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.h.Stats()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descs.fetches, float64(s.Fetches))
	gauge(descs.active, float64(s.ActiveFetches))
	counter(descs.chunks, float64(s.ChunksSent))
	counter(descs.sent, float64(s.BytesSent))
	counter(descs.raw, float64(s.RawBytesSent))
	counter(descs.encodes, float64(s.Encodes))
	counter(descs.hits, float64(s.CacheHits))
	counter(descs.encodeSecs, s.EncodeSeconds)
	counter(descs.updates, float64(s.Updates))
	counter(descs.updateBytes, float64(s.UpdateBytes))
	gauge(descs.uploads, float64(s.ActiveUploads))
	counter(descs.refused, float64(s.MalformedUpdates), "malformed")
	counter(descs.refused, float64(s.OversizedUpdates), "oversized")
	for r, a := range s.Recipes {
		counter(descs.recipeIn, float64(a.In), r)
		counter(descs.recipeOut, float64(a.Out), r)
	}
	for p, a := range s.Peers {
		counter(descs.peerChunks, float64(a.In), p)
		counter(descs.peerBytes, float64(a.Out), p)
	}
	m := c.h.budget.Stats()
	gauge(descs.memLimit, float64(m.Limit))
	gauge(descs.memInUse, float64(m.InUse))
	gauge(descs.memPeak, float64(m.Peak))
	counter(descs.memRefused, float64(m.Refused))
	c.h.mu.RLock()
	n := len(c.h.versions)
	c.h.mu.RUnlock()
	gauge(descs.versions, float64(n))
}
