// Command receiver is a peer that imports only the transport package, as
// the README's example does: it accepts one connection on loopback, reads
// the stream to its end and answers with the SHA-256 of what it read.
// TestReceiverWithTransportOnly builds and runs it.
package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/tensorpress/tensorpress/transport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(1)
	}
}

func run() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println(ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	tc, err := transport.Wrap(c)
	if err != nil {
		return err
	}
	defer tc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, tc); err != nil {
		return err
	}
	if _, err := tc.Write(h.Sum(nil)); err != nil {
		return err
	}
	return tc.CloseWrite()
}
