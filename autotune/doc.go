// Package autotune chooses the recipe of each frame from the measured link
// and the measured codec speeds on the data actually flowing.
//
// A Tuner is a codec.Policy: pass it to codec.WithPolicy or
// transport.WithPolicy. It combines
//   - a cutter (Cut, a codec.Cutter): byte streams are cut into frames
//     where the kind of data changes (float weights, mostly-zero
//     gradients, bytes), read off a strip of every 64 KiB, and frames of
//     typed elements start on an element;
//   - a link estimator (Link): the rate frames leave at while the writer is
//     held back by the link, the receiver's feedback, TCP_INFO on Linux TCP
//     connections, and a configured hint;
//   - a profiler (Profiler): per recipe and class of data (Sniff: dtype,
//     element width found in opaque bytes, sparsity), running estimates of
//     ratio and encode and decode speed, from the frames sent and from
//     samples coded with the other candidates, within an exploration budget
//     (a share of the frames' time, each frame's encoding or its time on
//     the link, the longer: 0.5% by default, 5% at most); a frame
//     sent that comes out more than 10% off its recipe's estimate marks the
//     data as changed, and the next frame samples every other candidate
//     again, their old ratios dropped;
//   - a cost model of the pipelined writer: throughput = min(cores × encode
//     speed / load, bandwidth × ratio, decode speed), where load is the
//     share of the time the encoders were busy lately while coding (at least 1/2): in
//     a stream that mixes kinds of data on a slow link they wait, and a
//     class that codes slowly but well may take that time;
//   - a selector with hysteresis (a 10% predicted gain, worn down to 2% as
//     a class keeps its recipe, so that a smaller gain that lasts is taken;
//     3 frames between switches by default).
//
// The default candidates (DefaultCandidates) cover float32 and the 2-byte
// floats: a recipe that starts with a fixed-width shuffle is weighed only
// on data of that element width.
//
// With a profile (WithProfile), each frame's candidates are those of the
// rule its tensor matches: lossy ones only on float tensors not tagged
// lossless, and only once their relative RMS error, measured on samples
// of the live data, is within the rule's error budget (auto adds fp16,
// bf16, int8 and nf4 recipes of the widths in the rule's bits). Density
// chooses the density of each gradient update among the rule's densities:
// the largest whose frame arrives within the time the caller allows, at
// the cost per element kept it measured for that density (a dense update,
// density 1, waits for a measurement of the link).
//
// Every switch can be explained (WithExplain, and a slog debug line) with
// the estimates behind it, once its frame was sent: the explanation names
// the recipe the frame went out with (and the one chosen, where the writer
// sent another). With transport, the Tuner learns the peer's stages from
// its hello (ObservePeer) and never chooses a recipe the peer cannot
// decode. Without a profile, candidates are lossless
// unless the caller gives lossy ones (WithErrorBudget bounds them); the
// Writer refuses lossy recipes on tensors tagged lossless whatever a
// policy returns.
//
// The package depends on codec and profile only (not on transport nor on
// the stage packages' code): it learns the peer's stages and feedback
// through codec.PeerObserver and codec.FeedbackObserver, and a
// quantizer's width from codec.Stage.Bits. Its default candidates name
// stages by recipe text; profile links them (package stages).
package autotune
