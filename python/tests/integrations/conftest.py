"""Test setup for the framework adapters.

The frameworks do not install here, so their stand-ins (``standins/``) are
registered in ``sys.modules`` under the real module names before any adapter
is imported; ``tensorpress.integrations.*`` then run their production imports
unchanged. Tests that need the compiled library take the ``tp`` fixture (or an
adapter fixture), which skips with the reason when ``tensorpress`` cannot load
``libtensorpress.so`` (build it with ``make python``).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_PYROOT = os.path.dirname(os.path.dirname(_HERE))
for p in (_PYROOT, _HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from standins import flwr_standin, nvflare_standin, openfl_standin  # noqa: E402

for _mod in (flwr_standin, nvflare_standin, openfl_standin):
    for _n in _mod.MODULE_NAMES:
        existing = sys.modules.get(_n)
        if existing is not None and existing is not _mod:
            raise RuntimeError(f"{_n} is already imported from {existing!r}; the stand-ins "
                               "must not shadow an installed framework")
        sys.modules[_n] = _mod


def _load_reason() -> str | None:
    try:
        import numpy as np

        import tensorpress as tp

        tp.decode(tp.encode(np.zeros(4, np.float32)))
    except Exception as e:  # noqa: BLE001 - any failure means: skip with the reason
        return f"tensorpress cannot load its library ({type(e).__name__}: {e}); run `make python`"
    return None


_REASON = _load_reason()


@pytest.fixture
def tp():  # type: ignore[no-untyped-def]
    """The ``tensorpress`` package, or skip when its library does not load."""
    if _REASON:
        pytest.skip(_REASON)
    return importlib.import_module("tensorpress")


@pytest.fixture
def flower(tp):  # type: ignore[no-untyped-def]
    """``tensorpress.integrations.flower``."""
    return importlib.import_module("tensorpress.integrations.flower")


@pytest.fixture
def nvflare(tp):  # type: ignore[no-untyped-def]
    """``tensorpress.integrations.nvflare``."""
    return importlib.import_module("tensorpress.integrations.nvflare")


@pytest.fixture
def openfl(tp):  # type: ignore[no-untyped-def]
    """``tensorpress.integrations.openfl``."""
    return importlib.import_module("tensorpress.integrations.openfl")
