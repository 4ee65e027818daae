"""Test setup: the shared library must exist before tensorpress is imported.

When python/tensorpress/libtensorpress.so is missing (and $TENSORPRESS_LIB is
not set), it is built here as `make python` does; without Go or a C compiler
the whole suite is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
ROOT = os.path.dirname(PYDIR)
LIB = os.path.join(PYDIR, "tensorpress", "libtensorpress.so")

if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

_skip = ""
if not os.environ.get("TENSORPRESS_LIB") and not os.path.exists(LIB):
    go = shutil.which("go")
    if go is None or shutil.which("gcc") is None and shutil.which("cc") is None:
        _skip = "libtensorpress.so is not built and go or a C compiler is missing: run `make python`"
    else:
        r = subprocess.run([go, "build", "-buildmode=c-shared", "-trimpath", "-o", LIB, "./cmd/libtensorpress"],
                           cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            _skip = f"building libtensorpress.so failed: {r.stderr.strip()[-2000:]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if _skip:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=_skip))


TESTVECTORS = os.path.join(ROOT, "testvectors")


@pytest.fixture
def testvectors() -> str:
    """The repository's testvectors directory."""
    return TESTVECTORS
