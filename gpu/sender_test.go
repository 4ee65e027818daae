package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// testSender runs gradient.Sender and the device's Sender side by side on
// the same gradients, commits and aborts: their frames must be the same
// bytes, step after step.
func testSender(t *testing.T, d *Device) {
	nesterov := gradient.NewDGC(0.01)
	nesterov.Nesterov = true
	noMomentum := gradient.NewDGC(0.01)
	noMomentum.Momentum = 0
	for _, c := range []gradient.Compressor{gradient.TopK{Ratio: 0.01}, gradient.TopK{Ratio: 0.3}, gradient.NewDGC(0.01), nesterov, noMomentum} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			cpu, err := gradient.NewSender(c)
			if err != nil {
				t.Fatal(err)
			}
			dev, err := d.NewSender(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := dev.Close(); err != nil {
					t.Error(err)
				}
			}()
			rng := rand.New(rand.NewPCG(31, 31))
			shapes := map[string][]int64{"a.weight": {250, 200}, "b.weight": {1000}}
			for step, commit := range []bool{true, false, true, true, true} {
				for _, name := range []string{"a.weight", "b.weight"} {
					n := 1
					for _, d := range shapes[name] {
						n *= int(d)
					}
					g := codec.FromFloat32(name, f32s(finite(rng, n)), shapes[name]...)
					want, err := cpu.Append(nil, g)
					if err != nil {
						t.Fatal(err)
					}
					got, err := dev.Append(nil, g)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("step %d, %s: the frames differ (%d and %d bytes)", step, name, len(got), len(want))
					}
				}
				if commit {
					cpu.Commit()
					err = dev.Commit()
				} else {
					cpu.Abort()
					err = dev.Abort()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// What stays on the CPU is refused with a reason.
	clip := gradient.NewDGC(0.01)
	clip.Clip = 1
	for _, c := range []struct {
		c    gradient.Compressor
		tail *codec.Recipe
	}{{clip, nil}, {gradient.TopK{Ratio: 0.1}, codec.MustParseRecipe("val:fp16 | *:zstd(1)")}, {gradient.Threshold{T: 0.1}, nil}} {
		if _, err := d.NewSender(c.c, c.tail); !errors.Is(err, codec.ErrUnsupported) {
			t.Errorf("%v, tail %v: %v", c.c, c.tail, err)
		}
	}
}

func TestGPUSender(t *testing.T) { testSender(t, needDevice(t)) }

func TestFakeSender(t *testing.T) {
	f := installFake(t, 1)
	testSender(t, openFake(t, f))
	f.check(t, false)
}
