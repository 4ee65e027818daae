// Package fl simulates federated and distributed training of a small model
// so that gradient compressors can be judged by the accuracy they keep, the
// way GRACE and the Deep Gradient Compression paper evaluate them.
//
// The model is a 784-128-64-10 ReLU perceptron (MLP) trained on
// Fashion-MNIST (LoadFashionMNIST) in float32, with parameters named and
// shaped like PyTorch's nn.Linear ("fc1.weight" [128, 784], "fc1.bias"
// [128], ..., 109386 in all). Its gradients match PyTorch's on the
// reference weights of package testvectors to float32 rounding, and those
// weights reach the reference's test accuracy.
//
// Run trains with federated averaging (FedAvg) or synchronous SGD
// (SyncSGD). Every client update goes through an Uplink, the hook where a
// compressor encodes the update and the server decodes it; Exact is the
// lossless baseline. The Result reports the final and per-round test
// accuracy and the bytes sent upstream, per step and in total.
//
// Guarantees:
//
//   - Determinism: a run is a function of its Config, data and uplink.
//     Clients run one after another and every reduction has a fixed order,
//     so the same inputs give bit-identical results on one machine.
//   - Pairing: the split of the data among clients, the initial weights
//     and every client's minibatch order come from separate PCG streams
//     derived from Config.Seed, never from what the uplink does, so runs
//     with the same Seed and different uplinks compare compressors on the
//     same training problem.
//   - Bad input is an error, never a panic: invalid configs, malformed
//     IDX files, datasets with inconsistent sizes or labels, weight
//     tensors of the wrong name, type or shape, and uplink failures.
//
// A Run allocates its buffers up front; training steps allocate nothing
// beyond what gonum's parallel matrix multiply does internally.
package fl
