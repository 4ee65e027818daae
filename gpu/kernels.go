package gpu

import _ "embed"

// The kernels' PTX, made from kernels/kernels.cu by clang-14 (Debian's
// clang-14; no CUDA toolkit or headers): portable PTX 6.0 for sm_70, which
// the driver compiles for the GPU it runs on (Volta and later, Hopper
// included). -ffp-contract=off keeps float32 products and sums apart, as
// the Go references compute them.
//
//go:generate clang-14 --cuda-device-only --cuda-gpu-arch=sm_70 -nocudalib -nocudainc -O3 -ffp-contract=off -S -x cuda kernels/kernels.cu -o kernels.ptx
//go:embed kernels.ptx
var kernelsPTX []byte
