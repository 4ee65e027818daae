package main

import (
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// flipStage is a broken filter: its decoder flips a bit of the first byte.
var flipStage = &codec.Stage{
	ID: 250, Name: "cbtestflip", Kind: codec.Filter, Doc: "test only: a decoder that is wrong",
	New:  func([]codec.Arg) (codec.Op, error) { return flipOp{}, nil },
	Load: func([]byte) (codec.Op, error) { return flipOp{}, nil },
}

type flipOp struct{}

func (flipOp) Stage() *codec.Stage                               { return flipStage }
func (flipOp) String() string                                    { return "cbtestflip" }
func (flipOp) AppendParams(dst []byte) []byte                    { return dst }
func (flipOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) { return []codec.SegInfo{in}, nil }
func (flipOp) Encode(_ *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	return []codec.Segment{in}, nil
}
func (flipOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	n := len(dst)
	dst = append(dst, parts[0].Data...)
	if len(dst) > n {
		dst[n] ^= 1
	}
	return dst, nil
}

func TestMismatchFails(t *testing.T) {
	if err := codec.RegisterNew(flipStage); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { codec.Unregister(flipStage.ID) })
	in, _ := weightsFile(t, 1000)
	code, _, errs := cli(t, "run", "--input", in, "--dtype", "f32", "--chains", "*:raw; cbtestflip | shuffle4 | plane3:huff0",
		"--min-time", "1ms", "--reps", "1", "--no-external")
	if code != 1 || !strings.Contains(errs, "MISMATCH") || !strings.Contains(errs, "input byte 0") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}
