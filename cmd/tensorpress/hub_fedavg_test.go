package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
)

// TestHubFedAvg: 'tensorpress hub --fedavg 2' aggregates: two clients
// upload their updates of version 1; the hub serves version 2, the first
// plus their weighted mean, and writes it to its directory.
func TestHubFedAvg(t *testing.T) {
	models := hubModels(t)
	addr, stop := startHub(t, "--dir", models, "--fedavg", "2", "--fedavg-rounds", "1", "--server-lr", "1")
	defer stop()
	c := hubClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m1 := model(1)
	for i, add := range []float32{1, 3} {
		up := make([]*codec.Tensor, len(m1))
		for j, x := range m1 {
			v := make([]float32, x.NumElements())
			for k := range v {
				v[k] = add
			}
			up[j] = codec.FromFloat32(x.Name, v, x.Shape...)
		}
		req := hub.UploadRequest{Round: 1, Weight: float32(i + 1), Peer: fmt.Sprint("client", i)}
		if err := hub.Upload(ctx, c, gradient.NewOutbox(nil), req, up); err != nil {
			t.Fatal(err)
		}
	}
	for {
		rep, err := c.Versions(ctx, &hubpb.VersionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(rep.Versions, func(v *hubpb.VersionInfo) bool { return v.Version == 2 }) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]*codec.Tensor{}
	if _, err := hub.Fetch(ctx, c, hub.Request{Version: 2}, func(x *codec.Tensor) error { got[x.Name] = x; return nil }); err != nil {
		t.Fatal(err)
	}
	const mean = (1*1 + 2*3) / 3.0
	for _, x := range m1 {
		w, _ := codec.View[float32](x)
		v, _ := codec.View[float32](got[x.Name])
		for k := range w {
			if d := v[k] - (w[k] + mean); d > 1e-5 || d < -1e-5 {
				t.Fatalf("%s[%d] = %v, want %v", x.Name, k, v[k], w[k]+mean)
			}
		}
	}
	disk, err := hub.ReadVersion(models, 2)
	if err != nil || len(disk) != len(m1) {
		t.Fatalf("version 2 on disk: %d tensors, %v", len(disk), err)
	}
}

func TestHubFedAvgUsage(t *testing.T) {
	for _, args := range [][]string{
		{"hub", "--dir", "x", "--fedavg-rounds", "3"},
		{"hub", "--dir", "x", "--fedavg", "-1"},
		{"hub", "--fedavg", "2"},
		{"hub", "--dir", "x", "--fedavg", "2", "--server-lr", "0"},
	} {
		if code := run(args, new(syncBuffer), new(syncBuffer)); code != 2 {
			t.Errorf("tensorpress %q: exit %d, want 2", args, code)
		}
	}
}

// TestHubMaxSlowDecoded: an update of 1.2 MB through floatcm is refused
// (ResourceExhausted) by a hub with the default --max-slow-decoded, 1 MiB,
// and counted by one started with 2MiB.
func TestHubMaxSlowDecoded(t *testing.T) {
	models := hubModels(t)
	x := model(1)[0] // 300,000 float32
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	frame, err := enc.AppendTensor(nil, x, codec.MustParseRecipe("floatcm"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want codes.Code
	}{
		{nil, codes.ResourceExhausted},
		{[]string{"--max-slow-decoded", "2MiB"}, codes.OK},
	} {
		addr, stop := startHub(t, append([]string{"--dir", models}, c.args...)...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := hubClient(t, addr).Upload(ctx)
		if err == nil {
			if err = st.Send(&hubpb.UploadMessage{Round: 1, Frame: frame}); err == nil {
				_, err = st.Recv()
			}
		}
		cancel()
		stop()
		if status.Code(err) != c.want {
			t.Errorf("%v: %v, want %v", c.args, err, c.want)
		}
	}
}
