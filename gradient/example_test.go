package gradient_test

import (
	"fmt"
	"log"
	"math"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	_ "github.com/tensorpress/tensorpress/lossy" // val:fp16
)

// A Sender per peer keeps each tensor's residual and commits it when the
// frames were delivered; a Receiver adds frames straight into an
// accumulator, so an aggregator sums sparse updates without densifying
// them. (The README shows this example.)
func ExampleReceiver() {
	const workers = 2
	sums := map[string][]float32{"fc1.weight": make([]float32, 128*784)}
	recv, err := gradient.NewReceiver()
	if err != nil {
		log.Fatal(err)
	}
	spec, err := gradient.Parse("dgc(0.001) | idx:delta,bitpack | val:fp16 | *:huff0")
	if err != nil {
		log.Fatal(err)
	}
	for w := range workers {
		grad := make([]float32, 128*784)
		for i := range grad {
			grad[i] = float32(math.Sin(float64(i*(w+1)))) / 100
		}
		snd, err := spec.NewSender() // one per peer, kept across rounds
		if err != nil {
			log.Fatal(err)
		}
		frame, err := snd.Append(nil, codec.FromFloat32("fc1.weight", grad, 128, 784))
		if err != nil {
			log.Fatal(err)
		}
		// send(frame), then, once it was delivered:
		snd.Commit() // or snd.Abort(): the whole gradient stays in the residual

		n, err := recv.Add(frame, 1.0/workers, func(name string, shape []int64) ([]float32, error) {
			if s, ok := sums[name]; ok {
				return s, nil
			}
			return nil, fmt.Errorf("no tensor %q", name)
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("worker %d: a frame of %d bytes for %d bytes of gradient\n", w, n, len(grad)*4)
	}
	nonzero := 0
	for _, v := range sums["fc1.weight"] {
		if v != 0 {
			nonzero++
		}
	}
	fmt.Printf("the sum has %d non-zero elements of %d\n", nonzero, len(sums["fc1.weight"]))
	// Output:
	// worker 0: a frame of 185 bytes for 401408 bytes of gradient
	// worker 1: a frame of 188 bytes for 401408 bytes of gradient
	// the sum has 202 non-zero elements of 100352
}
