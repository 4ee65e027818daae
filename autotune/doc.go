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
//     (a share of the encoding time, 3% by default, 5% at most);
//   - a cost model of the pipelined writer: throughput = min(cores × encode
//     speed, bandwidth × ratio, decode speed);
//   - a selector with hysteresis (a 10% predicted gain, 3 frames between
//     switches by default).
//
// Every switch can be explained (WithExplain, and a slog debug line) with
// the estimates behind it. Candidates are lossless unless the caller gives
// lossy ones; the Writer refuses lossy recipes on tensors tagged lossless
// whatever a policy returns.
package autotune
