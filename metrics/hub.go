package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tensorpress/tensorpress/hub"
)

// Hub exports h's Stats, read at each scrape:
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
//	tensorpress_hub_shadow_bytes                what the versions' shadows hold (lossy deltas' error feedback)
//	tensorpress_hub_memory_limit_bytes          the memory budget (hub.WithBudget; 0: none)
//	tensorpress_hub_memory_in_use_bytes         what is charged to it now
//	tensorpress_hub_memory_peak_bytes           the most charged at once
//	tensorpress_hub_memory_refused_total        charges refused (ResourceExhausted)
//	tensorpress_hub_recipe_in_bytes_total{recipe}   bytes of the segments each recipe coded, before coding
//	tensorpress_hub_recipe_out_bytes_total{recipe}  and after (frame headers aside; the ratio is in/out)
//	tensorpress_hub_peer_chunks_total{peer}          chunks sent to each client host
//	tensorpress_hub_peer_sent_bytes_total{peer}      their frames' bytes
//
// The recipe and peer labels are bounded (hub.MaxAccounts, then "other").
func Hub(h *hub.Hub) prometheus.Collector { return hubCollector{h} }

type hubCollector struct{ h *hub.Hub }

func hubDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("tensorpress_hub_"+name, help, labels, nil)
}

var hubDescs = struct {
	fetches, active, chunks, sent, raw, encodes, hits, encodeSecs, updates, updateBytes, uploads, refused, versions, shadow,
	recipeIn, recipeOut, peerChunks, peerBytes, memLimit, memInUse, memPeak, memRefused *prometheus.Desc
}{
	fetches:     hubDesc("fetches_total", "Fetch RPCs served."),
	active:      hubDesc("active_fetches", "Fetch streams open."),
	chunks:      hubDesc("chunks_sent_total", "Chunks sent to clients."),
	sent:        hubDesc("sent_bytes_total", "Bytes of the frames of the chunks sent (protobuf and gRPC framing aside)."),
	raw:         hubDesc("sent_raw_bytes_total", "Decoded bytes of the tensors in the chunks sent."),
	encodes:     hubDesc("encodes_total", "Chunks encoded; the chunks sent beyond them came from the cache."),
	hits:        hubDesc("cache_hits_total", "Chunks taken from the cache of encoded chunks."),
	encodeSecs:  hubDesc("encode_seconds_total", "Time spent encoding chunks."),
	updates:     hubDesc("updates_total", "Uploaded updates added into a round's sum."),
	updateBytes: hubDesc("update_bytes_total", "Bytes of the frames of the updates added."),
	uploads:     hubDesc("active_uploads", "Upload streams open."),
	refused:     hubDesc("refused_updates_total", "Uploaded updates refused, by reason.", "reason"),
	versions:    hubDesc("versions", "Model versions held."),
	shadow:      hubDesc("shadow_bytes", "Bytes the versions' shadows hold: the copies lossy deltas are taken from."),
	recipeIn:    hubDesc("recipe_in_bytes_total", "Bytes of the segments each recipe coded, before coding.", "recipe"),
	recipeOut:   hubDesc("recipe_out_bytes_total", "Bytes of the segments each recipe coded, after coding (frame headers aside).", "recipe"),
	peerChunks:  hubDesc("peer_chunks_total", "Chunks sent, by client host.", "peer"),
	peerBytes:   hubDesc("peer_sent_bytes_total", "Bytes of the frames sent, by client host.", "peer"),
	memLimit:    hubDesc("memory_limit_bytes", "The memory budget for what the hub holds for its peers (0: none)."),
	memInUse:    hubDesc("memory_in_use_bytes", "Bytes charged to the memory budget now."),
	memPeak:     hubDesc("memory_peak_bytes", "The most bytes charged to the memory budget at once."),
	memRefused:  hubDesc("memory_refused_total", "Charges the memory budget refused."),
}

func (hubCollector) Describe(ch chan<- *prometheus.Desc) {
	d := hubDescs
	for _, x := range []*prometheus.Desc{d.fetches, d.active, d.chunks, d.sent, d.raw, d.encodes,
		d.hits, d.encodeSecs, d.updates, d.updateBytes, d.uploads, d.refused, d.versions, d.shadow,
		d.recipeIn, d.recipeOut, d.peerChunks, d.peerBytes, d.memLimit, d.memInUse, d.memPeak, d.memRefused} {
		ch <- x
	}
}

func (c hubCollector) Collect(ch chan<- prometheus.Metric) {
	s, d := c.h.Stats(), hubDescs
	counter(ch, d.fetches, float64(s.Fetches))
	gauge(ch, d.active, float64(s.ActiveFetches))
	counter(ch, d.chunks, float64(s.ChunksSent))
	counter(ch, d.sent, float64(s.BytesSent))
	counter(ch, d.raw, float64(s.RawBytesSent))
	counter(ch, d.encodes, float64(s.Encodes))
	counter(ch, d.hits, float64(s.CacheHits))
	counter(ch, d.encodeSecs, s.EncodeSeconds)
	counter(ch, d.updates, float64(s.Updates))
	counter(ch, d.updateBytes, float64(s.UpdateBytes))
	gauge(ch, d.uploads, float64(s.ActiveUploads))
	counter(ch, d.refused, float64(s.MalformedUpdates), "malformed")
	counter(ch, d.refused, float64(s.OversizedUpdates), "oversized")
	for r, a := range s.Recipes {
		counter(ch, d.recipeIn, float64(a.In), r)
		counter(ch, d.recipeOut, float64(a.Out), r)
	}
	for p, a := range s.Peers {
		counter(ch, d.peerChunks, float64(a.In), p)
		counter(ch, d.peerBytes, float64(a.Out), p)
	}
	gauge(ch, d.memLimit, float64(s.Memory.Limit))
	gauge(ch, d.memInUse, float64(s.Memory.InUse))
	gauge(ch, d.memPeak, float64(s.Memory.Peak))
	counter(ch, d.memRefused, float64(s.Memory.Refused))
	gauge(ch, d.versions, float64(s.Versions))
	gauge(ch, d.shadow, float64(s.ShadowBytes))
}
