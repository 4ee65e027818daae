#!/bin/sh
# The GPU benchmarks, the Go kernels and torch in the same run on the same
# GPU. The GPU host needs no Go: build the test binary on a machine with
# Go, beside this script, then run the script there:
#
#	CGO_ENABLED=0 go test -c -o gpu/bench/gpu.test ./gpu
#	CGO_ENABLED=0 go build -o gpu/bench/codec-bench ./cmd/codec-bench   # optional: its gpu view
#	CGO_ENABLED=0 go test -c -o gpu/bench/lossless.test ./lossless      # optional: the streams at 1-16 workers
#	sh gpu/bench/run.sh            # on the GPU host, python3 with torch
#
# First the kernels against the CPU code on fresh random inputs (they must
# agree before any timing counts), then the Go benchmarks (medians of CUDA
# events over -test.benchtime iterations), then torch's.
set -eu
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
./gpu.test -test.run 'GPU' -test.v -test.count 1
./gpu.test -test.run '^$' -test.bench 'GPU|HostFrame' -test.benchtime 20x -test.timeout 30m
python3 torch_bench.py --runs 20
if [ -x ./codec-bench ]; then ./codec-bench gpu --runs 20; fi
if [ -x ./lossless.test ]; then
	./lossless.test -test.run '^$' -test.bench Stream -test.benchtime 20x -stream.workers 1,2,4,8,16
fi
