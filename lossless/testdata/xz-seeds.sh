#!/bin/sh
# Makes the xz seed streams for FuzzXzDecode (fuzz_zstd_test.go) with the
# xz tool (XZ Utils 5.4.1 made the committed ones). The input is 6141
# bytes of text; xz-streams.xz holds it twice.
set -e
cd "$(dirname "$0")"
python3 -c "
import sys
sys.stdout.write(''.join('weights %d grads %d\n' % (i, i*i % 97) for i in range(300)))" > xz-seed.txt
xz -c -T1 --block-size=1000 --check=sha256 < xz-seed.txt > xz-blocks.xz
(xz -c -T1 -0 --check=crc32 < xz-seed.txt; printf '\0\0\0\0'; xz -c -T1 -1 < xz-seed.txt) > xz-streams.xz
rm xz-seed.txt
