package transport_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/transport"
)

// Wrap both ends of a connection; the autotuner picks each frame's recipe
// from the link and the data.
func ExampleWrap() {
	a, b := net.Pipe()
	p, err := profile.Builtin("lossless-fast")
	if err != nil {
		log.Fatal(err)
	}
	tuner, err := autotune.New(autotune.WithProfile(p))
	if err != nil {
		log.Fatal(err)
	}
	c, err := transport.Wrap(a, transport.WithPolicy(tuner))
	if err != nil {
		log.Fatal(err)
	}
	peer, err := transport.Wrap(b)
	if err != nil {
		log.Fatal(err)
	}
	payload := bytes.Repeat([]byte("weights and gradients "), 10000)
	go func() {
		c.Write(payload)
		c.CloseWrite()
	}()
	got, err := io.ReadAll(peer)
	fmt.Println(len(got), bytes.Equal(got, payload), err)
	c.Close()
	peer.Close()
	// Output: 220000 true <nil>
}
