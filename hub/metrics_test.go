package hub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// TestMetrics fetches a model by hand (summing the frame bytes of the
// chunks that arrive) and uploads updates (summing the frames sent), then
// scrapes /metrics over HTTP and parses it with Prometheus's own text
// parser: the counters equal what the client counted.
func TestMetrics(t *testing.T) {
	h, _ := New(WithChunkSize(16 << 10))
	m := model(10, 5)
	if err := h.Publish(1, m); err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, h)
	var frameBytes, raw, chunks int64
	for range 2 { // the second from the cache
		st, err := c.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&hubpb.FetchMessage{Msg: &hubpb.FetchMessage_Request{Request: &hubpb.FetchRequest{Credit: 64}}})
		for {
			ch, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			frameBytes += int64(len(ch.Frames))
			chunks++
			if ch.Last {
				st.CloseSend()
			}
		}
	}
	for _, x := range m {
		raw += 2 * int64(len(x.Data))
	}
	spec, _ := gradient.Parse("topk(0.1)")
	ob := gradient.NewOutbox(nil)
	var sentUpdates int64
	var ups []*codec.Tensor
	for _, g := range grads(3) {
		ups = append(ups, g)
	}
	// The frames the client will send, measured the way Upload makes them.
	probe := gradient.NewOutbox(nil)
	for _, g := range ups {
		f, err := probe.Append(nil, g, spec, 0)
		if err != nil {
			t.Fatal(err)
		}
		sentUpdates += int64(len(f))
	}
	if err := Upload(context.Background(), c, ob, UploadRequest{Spec: spec, Round: 1, Peer: "p"}, ups); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(h))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(pmodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, label ...string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
		for _, mt := range f.Metric {
			if len(label) == 2 && !hasLabel(mt, label[0], label[1]) {
				continue
			}
			if f.GetType() == dto.MetricType_COUNTER {
				return mt.GetCounter().GetValue()
			}
			return mt.GetGauge().GetValue()
		}
		t.Fatalf("%s%v: no such series", name, label)
		return 0
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"tensorpress_hub_fetches_total", 2},
		{"tensorpress_hub_active_fetches", 0},
		{"tensorpress_hub_chunks_sent_total", float64(chunks)},
		{"tensorpress_hub_sent_bytes_total", float64(frameBytes)},
		{"tensorpress_hub_sent_raw_bytes_total", float64(raw)},
		{"tensorpress_hub_encodes_total", float64(chunks / 2)},
		{"tensorpress_hub_cache_hits_total", float64(chunks / 2)},
		{"tensorpress_hub_updates_total", float64(len(ups))},
		{"tensorpress_hub_update_bytes_total", float64(sentUpdates)},
		{"tensorpress_hub_versions", 1},
	} {
		if got := value(c.name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if got := value("tensorpress_hub_refused_updates_total", "reason", "malformed"); got != 0 {
		t.Errorf("refused: %v", got)
	}
	// By recipe: every byte of the encoded segments is under one recipe,
	// and they are the frames' bytes less the headers. By peer: all the
	// chunks went to this test's one client.
	var in, out float64
	for _, m := range fams["tensorpress_hub_recipe_out_bytes_total"].GetMetric() {
		out += m.GetCounter().GetValue()
	}
	for _, m := range fams["tensorpress_hub_recipe_in_bytes_total"].GetMetric() {
		in += m.GetCounter().GetValue()
	}
	if enc := float64(frameBytes) / 2; out <= 0.9*enc || out > enc || in != float64(raw)/2 {
		t.Errorf("by recipe: %v bytes in, %v out; the encoded chunks hold %v raw bytes in %v frame bytes", in, out, raw/2, enc)
	}
	if ps := fams["tensorpress_hub_peer_sent_bytes_total"].GetMetric(); len(ps) != 1 || ps[0].GetCounter().GetValue() != float64(frameBytes) {
		t.Errorf("by peer: %v, want one peer with %v bytes", ps, frameBytes)
	}
	if ps := fams["tensorpress_hub_peer_chunks_total"].GetMetric(); len(ps) != 1 || ps[0].GetCounter().GetValue() != float64(chunks) {
		t.Errorf("by peer: %v, want one peer with %v chunks", ps, chunks)
	}
	if value("tensorpress_hub_encode_seconds_total") <= 0 {
		t.Error("no encode time")
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestAccountsBounded: past MaxAccounts names, counts go under Other.
func TestAccountsBounded(t *testing.T) {
	var a accounts
	for i := range MaxAccounts + 10 {
		a.add(fmt.Sprint("10.0.0.", i), 1, 100)
	}
	m := a.snapshot()
	if len(m) != MaxAccounts+1 || m[Other] != (Account{10, 1000}) {
		t.Fatalf("%d names, other %+v", len(m), m[Other])
	}
}
