// Command mostynb is a gRPC peer whose "zstd" is
// github.com/mostynb/go-grpc-compression's, for the interop tests of
// package rpc (it runs in a process of its own: a process has one
// compressor per name).
//
//	mostynb server            listen on loopback, print "ADDR host:port", echo until stdin closes
//	mostynb client ADDR N...  echo messages of N bytes each through ADDR, print "OK N"
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	_ "github.com/mostynb/go-grpc-compression/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/internal/grpctest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mostynb:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: mostynb server | client ADDR N...")
	}
	switch args[0] {
	case "server":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s := grpc.NewServer(grpctest.ServerOptions()...)
		go s.Serve(ln)
		fmt.Printf("ADDR %s\n", ln.Addr())
		io.Copy(io.Discard, os.Stdin) // until the test closes stdin
		s.Stop()
		return nil
	case "client":
		if len(args) < 3 {
			return fmt.Errorf("usage: mostynb client ADDR N...")
		}
		conn, err := grpc.NewClient(args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		for _, a := range args[2:] {
			n, err := strconv.Atoi(a)
			if err != nil {
				return err
			}
			msg := grpctest.Message(n)
			var back []byte
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err = conn.Invoke(ctx, grpctest.EchoMethod, &msg, &back, grpctest.CallOptions("zstd")...)
			cancel()
			if err != nil {
				return fmt.Errorf("%d bytes: %w", n, err)
			}
			if !bytes.Equal(back, msg) {
				return fmt.Errorf("%d bytes: the echo differs", n)
			}
			fmt.Printf("OK %d\n", n)
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", args[0])
}
