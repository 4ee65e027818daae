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
// proxy logs it as a warning.
func TestProxyPeerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	hubContext = func() context.Context { return ctx }
	local := startProxy(t, "local", dead)
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
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "connection refused") {
		t.Fatalf("call: %v, want Unavailable: connection refused", err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(local.errb.String(), `level=WARN msg="call failed" method=/app.Service/Call`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning logged:\n%s", local.errb.String())
		}
	}
}
