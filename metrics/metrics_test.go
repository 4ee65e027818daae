package metrics

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/hub/natsfan"
	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// families serves cs through Handler over HTTP and parses the answer with
// Prometheus's own text parser.
func families(t *testing.T, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(Handler(cs...))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of the series of name with the labels given as
// name, value pairs; ok false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			if !hasLabel(m, labels[i], labels[i+1]) {
				continue next
			}
		}
		if f.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

type series struct {
	name   string
	labels []string
	want   float64
}

func check(t *testing.T, fams map[string]*dto.MetricFamily, want []series) {
	t.Helper()
	for _, s := range want {
		got, ok := value(fams, s.name, s.labels...)
		if !ok {
			t.Errorf("no series %s%v", s.name, s.labels)
		} else if got != s.want {
			t.Errorf("%s%v = %v, want %v", s.name, s.labels, got, s.want)
		}
	}
}

// TestHub fetches a version twice from a real hub over gRPC and scrapes:
// every series equals the Hub's Stats, and the Go and process collectors
// are served beside them.
func TestHub(t *testing.T) {
	b := budget.New(64 << 20)
	h, err := hub.New(hub.WithBudget(b), hub.WithChunkSize(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, 20000)
	for i := range data {
		data[i] = float32(math.Sin(float64(i)))
	}
	if err := h.Publish(1, []*codec.Tensor{codec.FromFloat32("w", data)}); err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, hub.NewServer(h))
	c := hubpb.NewHubClient(grpctest.Serve(t, s))
	for range 2 {
		if _, err := hub.Fetch(context.Background(), c, hub.Request{}, func(*codec.Tensor) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	st := h.Stats()
	if st.Fetches != 2 || st.CacheHits == 0 || st.Memory.Limit != 64<<20 {
		t.Fatalf("stats %+v", st)
	}
	fams := families(t, Hub(h))
	want := []series{
		{"tensorpress_hub_fetches_total", nil, 2},
		{"tensorpress_hub_active_fetches", nil, 0},
		{"tensorpress_hub_chunks_sent_total", nil, float64(st.ChunksSent)},
		{"tensorpress_hub_sent_bytes_total", nil, float64(st.BytesSent)},
		{"tensorpress_hub_sent_raw_bytes_total", nil, float64(st.RawBytesSent)},
		{"tensorpress_hub_encodes_total", nil, float64(st.Encodes)},
		{"tensorpress_hub_cache_hits_total", nil, float64(st.CacheHits)},
		{"tensorpress_hub_encode_seconds_total", nil, st.EncodeSeconds},
		{"tensorpress_hub_updates_total", nil, 0},
		{"tensorpress_hub_active_uploads", nil, 0},
		{"tensorpress_hub_refused_updates_total", []string{"reason", "malformed"}, 0},
		{"tensorpress_hub_refused_updates_total", []string{"reason", "oversized"}, 0},
		{"tensorpress_hub_versions", nil, 1},
		{"tensorpress_hub_shadow_bytes", nil, 0},
		{"tensorpress_hub_memory_limit_bytes", nil, 64 << 20},
		{"tensorpress_hub_memory_peak_bytes", nil, float64(st.Memory.Peak)},
		{"tensorpress_hub_memory_refused_total", nil, 0},
	}
	for r, a := range st.Recipes {
		want = append(want, series{"tensorpress_hub_recipe_in_bytes_total", []string{"recipe", r}, float64(a.In)},
			series{"tensorpress_hub_recipe_out_bytes_total", []string{"recipe", r}, float64(a.Out)})
	}
	for p, a := range st.Peers {
		want = append(want, series{"tensorpress_hub_peer_chunks_total", []string{"peer", p}, float64(a.In)},
			series{"tensorpress_hub_peer_sent_bytes_total", []string{"peer", p}, float64(a.Out)})
	}
	if len(st.Recipes) == 0 || len(st.Peers) != 1 {
		t.Errorf("recipes %v, peers %v", st.Recipes, st.Peers)
	}
	check(t, fams, want)
	if _, ok := value(fams, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics")
	}
}

// TestProxy: a proxy's counters under their names; without a Hop, no
// coding series.
func TestProxy(t *testing.T) {
	var s proxy.Stats
	s.Calls.Add(3)
	s.Active.Add(1)
	s.MessagesUp.Add(5)
	s.MessagesDown.Add(4)
	s.BytesUp.Add(1000)
	s.BytesDown.Add(800)
	s.HopOut.Add(600)
	s.HopIn.Add(500)
	fams := families(t, Proxy(&s))
	check(t, fams, []series{
		{"tensorpress_proxy_calls_total", nil, 3},
		{"tensorpress_proxy_active_calls", nil, 1},
		{"tensorpress_proxy_messages_total", []string{"direction", "up"}, 5},
		{"tensorpress_proxy_messages_total", []string{"direction", "down"}, 4},
		{"tensorpress_proxy_bytes_total", []string{"direction", "up"}, 1000},
		{"tensorpress_proxy_bytes_total", []string{"direction", "down"}, 800},
		{"tensorpress_proxy_hop_bytes_total", []string{"direction", "out"}, 600},
		{"tensorpress_proxy_hop_bytes_total", []string{"direction", "in"}, 500},
	})
	if _, ok := fams["tensorpress_proxy_encode_seconds_total"]; ok {
		t.Error("coding time exported without a Hop")
	}
}

// TestNATS: the publisher's and the relay's counters, each only when
// given.
func TestNATS(t *testing.T) {
	var p natsfan.Publisher
	p.Published.Add(2)
	p.PutBytes.Add(4096)
	p.Retries.Add(1)
	fams := families(t, NATS(&p, nil))
	check(t, fams, []series{
		{"tensorpress_nats_published_total", nil, 2},
		{"tensorpress_nats_put_bytes_total", nil, 4096},
		{"tensorpress_nats_put_retries_total", nil, 1},
		{"tensorpress_nats_chunk_republishes_total", nil, 0},
	})
	if _, ok := fams["tensorpress_nats_relayed_total"]; ok {
		t.Error("relay series without a relay")
	}
	var r natsfan.Relay
	r.Relayed.Add(7)
	check(t, families(t, NATS(nil, &r)), []series{{"tensorpress_nats_relayed_total", nil, 7}})
}
