package gradient

import (
	"errors"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// FuzzDecode: arbitrary frames (seeded with frames of every selection and
// low-rank stage, their CRCs made right so that damage reaches the stage
// decoders) never make DecodeFrame or DecodeAdd panic, and the two agree.
func FuzzDecode(f *testing.F) {
	x := normal(240, 5, 1)
	for _, rs := range []string{
		"topk(0.1) | idx:delta,bitpack | val:shuffle | *:huff0", "topk(k=3)", "thresh(1) | idx:delta,varint",
		"dgc(0.05)", "randk(0.2,seed=3) | val:fp16", "powersgd(2)", "powersgd(3,seed=4) | p:fp16",
	} {
		enc, _ := codec.NewEncoder()
		fr, err := enc.AppendTensor(nil, codec.FromFloat32("g", x, 12, 20), codec.MustParseRecipe(rs))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, b := range [][]byte{in, reseal(slices.Clone(in))} {
			if err := decodeLoose(b); err == errDiffer {
				t.Fatal(err)
			}
		}
	})
}

// FuzzMemory: arbitrary memory images are refused with ErrMemory or
// restore to a Memory that saves back to the same bytes.
func FuzzMemory(f *testing.F) {
	for _, c := range []Compressor{NewDGC(0.1), &PowerSGD{Rank: 2, MinRate: 1}, TopK{Ratio: 0.1}} {
		s, _ := NewSender(c)
		s.Append(nil, codec.FromFloat32("w", normal(48, 1, 1), 6, 8))
		s.Commit()
		img, _ := s.Memory().MarshalBinary()
		f.Add(img)
	}
	f.Add([]byte("TPEF\x01\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		m := NewMemory()
		if err := m.UnmarshalBinary(in); err != nil {
			if !errors.Is(err, ErrMemory) {
				t.Fatalf("error %v does not wrap ErrMemory", err)
			}
			return
		}
		out, _ := m.MarshalBinary()
		m2 := NewMemory()
		if err := m2.UnmarshalBinary(out); err != nil {
			t.Fatalf("a restored memory does not restore again: %v", err)
		}
		if out2, _ := m2.MarshalBinary(); string(out2) != string(out) {
			t.Fatal("save/restore is not stable")
		}
		// A restored memory is usable whatever its private buffers hold:
		// every compressor runs on each (small) tensor of it.
		for _, c := range []Compressor{NewDGC(0.1), &PowerSGD{Rank: 2, MinRate: 0}, TopK{Ratio: 0.1}} {
			snd, _ := NewSender(c, WithMemory(m2))
			for _, name := range m2.Names() {
				shape := m2.Get(name).Shape()
				n := int64(1)
				for _, d := range shape {
					n *= d
				}
				if n > 1<<12 {
					continue
				}
				if _, err := snd.Append(nil, codec.FromFloat32(name, normal(int(n), 1, 1), shape...)); err != nil {
					t.Fatalf("%v on restored %q %v: %v", c, name, shape, err)
				}
			}
			snd.Commit()
		}
	})
}
