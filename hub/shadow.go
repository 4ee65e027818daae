package hub

import (
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
)

// Lossy deltas and their error (error feedback on the downlink).
//
// A client that fetches version k as lossy deltas against the version j
// it holds adds the decoded delta to its copy of j, which came through a
// lossy recipe too. Were the delta taken from V_j, the version itself,
// each version's rounding would stay in the client's copy and the next
// ones would add theirs: a random walk away from the model, round after
// round. So the hub keeps, per version and lossy tensor, the copy a
// client holds that fetched the versions one after the other,
//
//	S_k = S_j + D(Q(V_k − S_j))   (j the version kept before k; S = V for the first)
//
// where Q is the tensor's lossy recipe and D its decoding, and takes lossy
// deltas against S_j, not V_j: what one version's delta leaves out, the
// next one sends (the server's error feedback of DoubleSqueeze and of the
// bidirectional compressors in federated learning). A client that follows
// the versions holds S_k exactly, within one rounding of V_k whatever the
// number of versions; one that skipped versions, or holds V_j itself,
// holds S_k plus a difference that stays what it was (its copy's distance
// from the hub's), instead of growing.
//
// The shadow is made as the version is published, chunk by chunk as
// fetches code it (the same items, recipe and arithmetic as the client's),
// so that it is the client's copy bit for bit. It is held in memory
// beside the version: tensors read from files (PublishSafetensors,
// PublishNpy) have none, and their lossy deltas are taken from the
// version as before. A hub started again has no shadow of the version
// it starts from (the chain starts again there).

// lossyBase returns elements [off, off+count) of t, one of v's tensors,
// as lossy deltas against v take them: from v's shadow of t where it has
// one, else from t (read).
func (v *version) lossyBase(t *codec.Tensor, off, count int, s *scratch) ([]byte, error) {
	if sh := v.shadow[t.Name]; sh != nil {
		esz := t.DType.Size()
		return sh[off*esz : (off+count)*esz], nil
	}
	return v.read(t, off, count, s)
}

// before returns the newest version kept older than v, or nil.
func (h *Hub) before(v uint64) *version {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var prev *version
	for _, id := range h.order {
		if id < v {
			prev = h.versions[id]
		}
	}
	return prev
}

// makeShadow sets ver's shadow against prev (nil: none; ver's tensors
// are their own): for each tensor held in memory that the policy sends
// through a lossy recipe, and that prev has with the same dtype and
// shape, the client's copy after a lossy delta from prev's copy. A tensor
// whose shadow cannot be made (its recipe fails on the delta) is logged
// and has none.
func (h *Hub) makeShadow(ver, prev *version) {
	if prev == nil {
		return
	}
	var dec codec.Decoder
	for _, t := range ver.tensors {
		if t.Data == nil || !t.DType.IsFloat() {
			continue
		}
		bt := prev.byName[t.Name]
		if bt == nil {
			continue
		}
		err := func() error {
			var s scratch
			defer s.release()
			lr, err := h.lossyRecipe(ver, t, &s)
			if err != nil || lr == nil {
				return err
			}
			sh := make([]byte, len(t.Data))
			for _, it := range h.plan([]*codec.Tensor{t}) {
				off, count := it.offset, it.count
				if count == 0 {
					count = int(t.NumElements())
				}
				d, kind, err := deltaOf(ver, t, prev, off, count, true, 0, &s)
				if err != nil {
					return err
				}
				if kind != subDelta {
					return nil // another dtype or shape: no shadow
				}
				frame, err := h.enc.AppendTensor(nil, d, lr)
				if err != nil {
					return err
				}
				f, _, err := dec.DecodeFrame(frame)
				if err != nil {
					return err
				}
				if len(f.Tensors) != 1 || len(f.Tensors[0].Data) != len(d.Data) {
					return fmt.Errorf("hub: tensor %q: a lossy delta decodes to %d tensors", t.Name, len(f.Tensors))
				}
				base, err := prev.lossyBase(bt, off, count, &s)
				if err != nil {
					return err
				}
				got := f.Tensors[0].Data
				add(got, base, t.DType)
				copy(sh[off*t.DType.Size():], got)
			}
			if ver.shadow == nil {
				ver.shadow = map[string][]byte{}
			}
			ver.shadow[t.Name] = sh
			return nil
		}()
		if err != nil {
			// The version is served all the same: this tensor's lossy
			// deltas are taken from prev itself, as without shadows
			// (a fetch that codes them meets the same error).
			h.log.Warn("no shadow of a tensor: its lossy deltas are taken from the version before", "version", ver.id, "tensor", t.Name, "err", err)
		}
	}
}
