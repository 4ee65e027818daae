"""Mutated and random frames through decode, decode_all and Receiver.add: only TensorpressError escapes.

The loop (python/bench/safety_run.py fuzz) runs in a subprocess, so that a crash of the
interpreter fails the test instead of killing pytest. ``TP_FUZZ_N`` sets the number of
frames (3000 here by default, a few seconds; ``make bench-python`` runs 100,000).
The 1 TiB claim refused with little memory is test_codec.py's
test_claims_one_tib_refused_with_little_memory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(os.path.dirname(HERE), "bench", "safety_run.py")
sys.path.insert(0, os.path.dirname(RUNNER))

import safety_run  # noqa: E402

import tensorpress as tp  # noqa: E402


def run(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, RUNNER, *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)


def test_crc32c_known_values() -> None:
    # RFC 3720 B.4 test vectors.
    assert safety_run.crc32c(b"") == 0
    assert safety_run.crc32c(b"123456789") == 0xE3069283
    assert safety_run.crc32c(bytes(32)) == 0x8A9136AA
    assert safety_run.crc32c(b"\xff" * 32) == 0x62A8AB43


def test_frames_reseal_to_themselves(testvectors: str) -> None:
    """The splitter finds every frame of the goldens and sealing them again gives the same bytes."""
    golden = os.path.join(testvectors, "golden")
    n = 0
    for f in sorted(os.listdir(golden)):
        if not f.endswith(".tpf"):
            continue
        with open(os.path.join(golden, f), "rb") as fh:
            b = fh.read()
        frames = safety_run.split_frames(b)
        assert frames, f
        assert b"".join(x.seal() for x in frames) == b, f
        n += 1
    assert n > 30


def test_resealed_mutation_gets_past_the_checksums() -> None:
    import numpy as np
    f = tp.encode(np.arange(64, dtype=np.float32), name="w", recipe="*:zstd(1)")
    frames = safety_run.split_frames(f)
    assert frames and len(frames) == 1
    fr = frames[0]
    payload = bytearray(fr.payload)
    payload[len(payload) // 2] ^= 0x40
    broken = safety_run.Frame(fr.lead, fr.header, bytes(payload))
    raw = bytearray(f)
    raw[len(raw) - 8] ^= 0x40
    with pytest.raises(tp.ChecksumError):
        tp.decode(bytes(raw))
    try:
        tp.decode(broken.seal())
    except tp.ChecksumError:  # pragma: no cover - the point of resealing
        pytest.fail("a resealed frame failed its checksum")
    except tp.TensorpressError:
        pass


def test_fuzz_only_tensorpress_errors_escape() -> None:
    n = os.environ.get("TP_FUZZ_N", "3000")
    r = run("fuzz", "--n", n, env={"TP_FUZZ_N": n})
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert f"fuzz n={n}" in r.stdout


def test_cached_recipe_does_not_keep_the_callers_text() -> None:
    """The library once parsed recipe text in the caller's memory and cached the result: after
    that memory was reused, "int8(64) | q:huff0" matched no segment q and later frames grew."""
    import numpy as np
    x = np.random.default_rng(5).normal(0, 0.02, 1 << 14).astype(np.float32)
    recipe = "int8(64) | q:huff0 | scale:zstd(1)"
    first = tp.encode(x, recipe=recipe)
    for i in range(6):
        junk = [("#" * len(recipe)).encode() for _ in range(64)]  # reuse freed memory
        assert tp.encode(x, recipe="".join(recipe)) == first, i
        del junk
    with tp.Sender("topk(0.5)") as s:
        sizes = []
        for i in range(4):
            sizes.append(len(s.compress("w", x, spec="topk(0.5) | val:fp16")))
            s.commit()
            junk = [("#" * 40).encode() for _ in range(64)]
            del junk
        assert max(sizes) <= min(sizes) * 1.05, sizes
