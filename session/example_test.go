package session_test

import (
	"fmt"
	"log"
	"math"
	"net"
	"time"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/session"
	"github.com/tensorpress/tensorpress/transport"
)

// A tensor session: weights stay lossless, an update goes through TopK
// with error feedback, committed when the peer acknowledges it.
func ExampleSession_WriteTensor() {
	a, b := net.Pipe()
	p, err := profile.Builtin("fl-gradients")
	if err != nil {
		log.Fatal(err)
	}
	tuner, err := autotune.New(autotune.WithProfile(p))
	if err != nil {
		log.Fatal(err)
	}
	peers := gradient.NewPeers() // one per process: residuals per peer ID
	c, err := session.Wrap(a, session.WithConn(transport.WithPolicy(tuner)), session.WithProfile(p),
		session.WithPeers(peers), session.WithUpdateDeadline(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	peer, err := transport.Wrap(b, transport.WithPeerID("aggregator"))
	if err != nil {
		log.Fatal(err)
	}
	w := make([]float32, 256*256)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)))
	}
	weights := codec.FromFloat32("layer0.weight", w, 256, 256)
	update := codec.FromFloat32("layer0.weight.update", w, 256, 256)
	go func() {
		c.WriteTensor(weights)
		c.WriteTensor(update)
		c.Close() // waits for the peer's acknowledgement of the end
	}()
	for {
		t, err := peer.ReadTensor()
		if err != nil {
			fmt.Println(err)
			break
		}
		v, _ := codec.View[float32](t)
		kept := 0
		for _, x := range v {
			if x != 0 {
				kept++
			}
		}
		fmt.Println(t.Name, t.Tags.Lossless, kept <= len(v)/20)
	}
	peer.Close()
	st := peers.Memory("aggregator").Get("layer0.weight.update")
	fmt.Println("committed updates:", st.Step())
	// Output:
	// layer0.weight true false
	// layer0.weight.update false true
	// EOF
	// committed updates: 1
}
