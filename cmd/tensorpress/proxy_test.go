package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/internal/grpctest"
)

// TestProxyPeerDown: with nothing listening where the local proxy
// forwards, a call ends at once with Unavailable saying why, and the
// proxy logs it as a warning; passing connections through (the remote
// side on this host), the call ends with Unavailable and the proxy logs
// a warning too.
func TestProxyPeerDown(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		testProxyPeerDown(t, "connection refused", `level=WARN msg="call failed" method=/app.Service/Call`, "--bandwidth", "10Mbit")
	})
	t.Run("passthrough", func(t *testing.T) {
		testProxyPeerDown(t, "", `level=WARN msg="connection not forwarded: the next hop is down"`)
	})
}

func testProxyPeerDown(t *testing.T, why, logged string, extra ...string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	proxyContext = func() context.Context { return ctx }
	local := startProxy(t, "local", dead, extra...)
	defer func() {
		cancel()
		local.wait(t)
	}()
	conn, err := grpc.NewClient(local.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	var reply []byte
	req := []byte("hello")
	err = conn.Invoke(cctx, "/app.Service/Call", &req, &reply, grpc.ForceCodec(grpctest.RawCodec{}))
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), why) {
		t.Fatalf("call: %v, want Unavailable: %s", err, why)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(local.errb.String(), logged); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning logged:\n%s", local.errb.String())
		}
	}
}
