// Command relayproc is a relay hub for natsfan's memory test: it serves
// the versions of a NATS bucket over gRPC on loopback, spooling them into
// a directory, and prints its address. It runs until its stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	"github.com/tensorpress/tensorpress/budget"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/hub/natsfan"
	_ "github.com/tensorpress/tensorpress/lossless"
)

func main() {
	url := flag.String("nats", "", "NATS URL")
	spool := flag.String("spool", "", "spool directory")
	budgetBytes := flag.Int64("budget", 64<<20, "relay budget in bytes")
	flag.Parse()
	if err := run(*url, *spool, *budgetBytes); err != nil {
		fmt.Fprintln(os.Stderr, "relayproc:", err)
		os.Exit(1)
	}
}

func run(url, spool string, budgetBytes int64) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	st, err := natsfan.OpenStore(octx, js, natsfan.Config{})
	cancel()
	if err != nil {
		return err
	}
	h, err := hub.New(hub.WithRetention(2), hub.WithCacheBytes(16<<20))
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	r := natsfan.NewRelay(nc, st, h, 2, codec.Limits{}, slog.New(slog.NewTextHandler(os.Stderr, nil)),
		natsfan.WithSpoolDir(spool), natsfan.WithBudget(budget.New(budgetBytes)))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	hubpb.RegisterHubServer(s, hub.NewServer(h))
	go s.Serve(ln)
	fmt.Println(ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	s.Stop()
	return nil
}
