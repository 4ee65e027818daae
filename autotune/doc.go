// Package autotune chooses the recipe of each frame from the measured link
// and the measured codec speeds on the data actually flowing.
//
// A Tuner is a codec.Policy: pass it to codec.WithPolicy or
// transport.WithPolicy. It combines
//   - a link estimator (Link): the rate frames leave at while the writer is
//     held back by the link, the receiver's feedback, TCP_INFO on Linux TCP
//     connections, and a configured hint;
//   - a profiler (Profiler): per recipe and class of data (Sniff: dtype,
//     element width found in opaque bytes, sparsity), running estimates of
//     ratio and encode and decode speed, from the frames sent and from
//     samples coded with the other candidates, within an exploration budget
//     (a share of the encoding time, 0.5% by default, 5% at most);
//   - a cost model of the pipelined writer: throughput = min(cores × encode
//     speed, bandwidth × ratio, decode speed);
//   - a selector with hysteresis (a 10% predicted gain, 3 frames between
//     switches by default).
//
// With a profile (WithProfile), each frame's candidates are those of the
// rule its tensor matches: lossy ones only on float tensors not tagged
// lossless, and only once their relative RMS error, measured on samples
// of the live data, is within the rule's error budget (auto adds fp16,
// bf16, int8 and nf4 recipes of the widths in the rule's bits). Density
// chooses the density of each gradient update among the rule's densities:
// the largest whose frame arrives within the time the caller allows.
//
// Every switch can be explained (WithExplain, and a slog debug line) with
// the estimates behind it. Without a profile, candidates are lossless
// unless the caller gives lossy ones (WithErrorBudget bounds them); the
// Writer refuses lossy recipes on tensors tagged lossless whatever a
// policy returns.
package autotune
