package main

import (
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

// tuneSpec is a chain of run that is the autotuner's: "autotune@RATE" (the
// default candidates) or "autotune:PROFILE@RATE" (a built-in profile's or a
// file's), on a link pinned at RATE (such as 12.5MB/s or 100Mbit). Each pass
// over the input is a stream of its own with a new Tuner, so that the
// figures include what the Tuner spends learning: its bootstrap and
// exploration samples count in the encode time.
type tuneSpec struct {
	prof *profile.Profile // nil: the default candidates
	rate float64          // bytes/s
}

// parseTuneChain parses spec when it names the autotuner (ok false
// otherwise).
func parseTuneChain(spec string) (c *chain, ok bool, err error) {
	spec = strings.TrimSpace(spec)
	if !strings.HasPrefix(spec, "autotune") {
		return nil, false, nil
	}
	name, rate, found := strings.Cut(strings.TrimPrefix(spec, "autotune"), "@")
	if !found {
		return nil, true, usagef("--chains: %q: give the link's rate: autotune@12.5MB/s, autotune:lossless-fast@1Gbit", spec)
	}
	ts := &tuneSpec{}
	r, err := profile.ParseRate(rate)
	if err != nil || r <= 0 {
		return nil, true, usagef("--chains: %q: rate %q: %v", spec, rate, err)
	}
	ts.rate = float64(r)
	if name != "" {
		pname, ok := strings.CutPrefix(name, ":")
		if !ok || pname == "" {
			return nil, true, usagef("--chains: %q: want autotune@RATE or autotune:PROFILE@RATE", spec)
		}
		if ts.prof, err = loadProfile(pname); err != nil {
			return nil, true, usagef("--chains: %q: %v", spec, err)
		}
	}
	return &chain{text: spec, tune: ts}, true, nil
}

// tuner returns a new Tuner on a link pinned at the spec's rate, for one
// core (run measures on one).
func (ts *tuneSpec) tuner() (*autotune.Tuner, error) {
	l := autotune.NewLink(0)
	l.SetRate(ts.rate, "pinned")
	opts := []autotune.Option{autotune.WithLink(l), autotune.WithCores(1)}
	if ts.prof != nil {
		opts = append(opts, autotune.WithProfile(ts.prof))
	}
	return autotune.New(opts...)
}

// encodeTuned appends the frames of every chunk to dst, each coded with
// the recipe a new Tuner chooses, and tells the Tuner each frame's size
// and encode time. It returns the recipes chosen, frame by frame.
func (tr *trial) encodeTuned(enc *codec.Encoder, dst []byte) ([]byte, []string, error) {
	tu, err := tr.c.tune.tuner()
	if err != nil {
		return dst, nil, err
	}
	var chosen []string
	// frame codes one chunk with the recipe the Tuner chooses for fi.
	frame := func(fi codec.FrameInfo, code func(r *codec.Recipe) ([]byte, error)) error {
		r := tu.Choose(fi)
		n := len(dst)
		t0 := time.Now()
		var err error
		if dst, err = code(r); err != nil {
			return err
		}
		fi.Data = nil
		tu.Observe(codec.FrameStats{Info: fi, Recipe: r, RawBytes: fi.Len, FrameBytes: len(dst) - n, Encode: time.Since(t0)})
		chosen = append(chosen, r.String())
		return nil
	}
	for i := range tr.tensors {
		t := &tr.tensors[i]
		fi := codec.FrameInfo{Seq: uint64(i), Type: codec.FrameTensor, Name: t.Name, DType: t.DType, Shape: t.Shape,
			Offset: t.Offset, Len: len(t.Data), Data: t.Data, Tags: t.Tags, First: t.Offset == 0}
		if err := frame(fi, func(r *codec.Recipe) ([]byte, error) { return enc.AppendTensor(dst, t, r) }); err != nil {
			return dst, chosen, err
		}
	}
	for i, p := range tr.parts {
		fi := codec.FrameInfo{Seq: uint64(i), Type: codec.FrameBytes, DType: codec.Byte, Len: len(p), Data: p}
		if err := frame(fi, func(r *codec.Recipe) ([]byte, error) { return enc.AppendBytes(dst, p, r) }); err != nil {
			return dst, chosen, err
		}
	}
	return dst, chosen, nil
}
