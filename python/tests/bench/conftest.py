"""Test setup of the FedAvg bench: its modules on sys.path, and a tensorpress binary for the hub tests."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)


@pytest.fixture(scope="session")
def tensorpress_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """$TENSORPRESS_BIN, else ``tensorpress`` built from this repository (skip without Go)."""
    env = os.environ.get("TENSORPRESS_BIN")
    if env:
        return env
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH: cannot build the tensorpress hub")
    from fl_downlink import build_tensorpress
    return build_tensorpress(str(tmp_path_factory.mktemp("bin")))


@pytest.fixture(scope="session")
def fmnist():
    """Fashion-MNIST (skip when Debian's dataset-fashion-mnist is not installed)."""
    import fl_data
    if not os.path.isdir(fl_data.DEFAULT_DIR):
        pytest.skip("Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist")
    return fl_data.load_fashion_mnist()
