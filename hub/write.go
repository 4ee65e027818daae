package hub

import (
	"context"
	"io"

	"github.com/tensorpress/tensorpress/budget"
)

// WriteVersion writes version v (0: the newest) to w as the frames of a
// whole, lossless fetch: each chunk as a fetch requiring lossless coding
// gets it, from the hub's cache or encoded once into it, in the order of
// the version's plan (small tensors batched, large ones chunk by chunk).
// A hub's origin hands these to natsfan.Publisher.PublishFrames, so that a
// version is encoded once for NATS and for its own clients. What encoding
// holds is charged to the hub's budget, waiting while it is spent (or
// until ctx ends).
func (h *Hub) WriteVersion(ctx context.Context, v uint64, w io.Writer) error {
	ver, err := h.get(v)
	if err != nil {
		return err
	}
	charge := func(n int64) (*budget.Charge, error) { return h.budget.Charge(ctx, n) }
	for _, it := range h.plan(ver.tensors) {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := h.frames(charge, ver, &it, nil, true, 0)
		if err != nil {
			return err
		}
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	return nil
}
