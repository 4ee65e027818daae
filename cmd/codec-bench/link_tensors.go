package main

import (
	"errors"
	"io"
	"strings"
	"time"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// tensorBytes is the size of the whole workload tensors, in turn, that
// cover n bytes: the tensor workload sends whole tensors only.
func (wl *workload) tensorBytes(n int64) int64 {
	var s int64
	for i := 0; s < n; i++ {
		s += int64(len(wl.chunks[i%len(wl.chunks)]))
	}
	return s
}

// sendTensors writes whole workload tensors (n bytes: see tensorBytes, or
// fewer when stop, checked before each tensor, reports true) to conn as
// tensor frames and returns their bytes: a codec.Writer with the Tuner, or with ch's
// recipe, codes the tensors the profile keeps dense; updates (tagged
// role=update) whose rule lists gradient compressors go through the
// rule's first compressor with error feedback (one gradient.Sender per
// transfer, its memory per tensor name, so each copy of an update is the
// next round's), their frames written in turn with the Writer's. With
// --update-within and the autotuner, each update's density is the
// Tuner's choice among the rule's densities (Tuner.Density).
func (b *linkBench) sendTensors(conn io.Writer, ch linkChain, tu *autotune.Tuner, n int64, stop func() bool) (int64, error) {
	pol := codec.Policy(codec.FixedPolicy{Recipe: ch.recipe})
	if tu != nil {
		pol = tu
	}
	w, err := codec.NewWriter(conn, codec.WithPolicy(pol), codec.WithChunkSize(b.prof.ChunkSize))
	if err != nil {
		return 0, err
	}
	senders := map[*gradient.Spec]*gradient.Sender{}
	var buf []byte
	var sent int64
	for i := 0; sent < n && !stop(); i++ {
		k := i % len(b.work.chunks)
		t := &codec.Tensor{Name: b.work.names[k], DType: codec.F32, Shape: b.work.shapes[k], Data: b.work.chunks[k]}
		sent += int64(len(t.Data))
		if buf, err = b.sendTensor(w, t, tu, senders, buf); err != nil {
			w.Close()
			return sent, err
		}
	}
	return sent, w.Close()
}

// receiveTensors reads frames until the end of the stream and returns the
// decoded tensor bytes (sparse updates count at their dense size), not
// hashed, and when the first frame with tensor bytes was decoded.
func receiveTensors(r io.Reader) (received, error) {
	var got received
	rd, err := codec.NewReader(r)
	if err != nil {
		return got, err
	}
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		for _, t := range f.Tensors {
			if got.n == 0 && len(t.Data) > 0 {
				got.first = time.Now()
			}
			got.n += int64(len(t.Data))
		}
	}
}

// sendTensor writes t: through the Writer, or, when its rule lists
// gradient compressors, as the frame of the rule's first one (at the
// Tuner's density with --update-within). buf is scratch for that frame;
// the grown buffer is returned.
func (b *linkBench) sendTensor(w *codec.Writer, t *codec.Tensor, tu *autotune.Tuner, senders map[*gradient.Spec]*gradient.Sender, buf []byte) ([]byte, error) {
	if strings.HasSuffix(t.Name, ".update") {
		t.Tags.Extra = []codec.Tag{{Key: "role", Value: "update"}}
	}
	r := b.prof.Match(t.Name, t.DType, int64(len(t.Data)), t.Tags)
	t.Tags.Lossless = r.RequireLossless
	if len(r.Gradients) == 0 {
		return buf, w.WriteTensor(t)
	}
	spec := r.Gradients[0]
	s := senders[spec]
	if s == nil {
		var err error
		if s, err = spec.NewSender(); err != nil {
			return buf, err
		}
		senders[spec] = s
	}
	elements := int64(len(t.Data) / 4)
	density := 0.0
	if tu != nil && b.updateWithin > 0 {
		if d, ok := tu.Density(t.Name, t.DType, elements, t.Tags, b.updateWithin); ok {
			if c, ok := gradient.AtDensity(spec.Compressor, float32(d)); ok {
				s.SetCompressor(c)
				density = d
			}
		}
	}
	buf, err := s.Append(buf[:0], t)
	if err != nil {
		return buf, err
	}
	if err := w.WriteEncoded(buf); err != nil {
		s.Abort()
		return buf, err
	}
	s.Commit()
	if density > 0 {
		tu.ObserveDensity(density, elements, len(buf))
	}
	return buf, nil
}
