"""RSS back near its start after many mixed calls, and no library object left behind.

The run (python/bench/safety_run.py memory) is a subprocess of its own, so that this
suite's arrays do not move its RSS: after a warm-up that touches every path, ``TP_MEM_M``
mixed calls (3000 here by default; ``make bench-python`` runs 100,000) of encode, decode,
Sender compress/commit/abort/state and Receiver add, sizes 1 KiB to 4 MiB; then
``gc.collect()``, ``tp.release_memory()`` and ``malloc_trim(0)``. RSS must be within 8 MiB
of the start and ``tp.live_handles()`` back to its count.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import tensorpress as tp

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(os.path.dirname(HERE), "bench", "safety_run.py")


def test_rss_returns_and_no_handle_leaks() -> None:
    m = os.environ.get("TP_MEM_M", "3000")
    r = subprocess.run([sys.executable, RUNNER, "memory", "--m", m], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert f"memory m={m}" in r.stdout


def test_live_handles_counts_objects() -> None:
    start = tp.live_handles()
    s, rc = tp.Sender("topk(0.1)"), tp.Receiver()
    assert tp.live_handles() == start + 2
    s.close()
    rc.close()
    assert tp.live_handles() == start


def test_release_memory_returns() -> None:
    tp.decode(tp.encode(np.zeros(1 << 16, np.float32)))
    tp.release_memory()
