"""Build and install the tensorpress Python package.

`pip install ./python` (from the repository) runs `go build -buildmode=c-shared`
on ../cmd/libtensorpress and puts libtensorpress.so into the package. It
needs Go (go.mod's version), cgo with a C compiler, and the Go modules in the
module cache (pip does not fetch them; with GOPROXY=off and an empty cache the
build fails with Go's own message). There is deliberately no pyproject.toml:
it would turn on build isolation, which downloads setuptools, and an offline
install would fail. On Debian, where the system pip is refused (PEP 668):

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install ./python
"""

from __future__ import annotations

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithGo(build_py):
    """build_py that also builds the shared library with go build."""

    def run(self) -> None:
        super().run()
        go = shutil.which("go")
        if go is None:
            raise SystemExit("tensorpress: `go` not found on PATH: install Go (see ../go.mod for the version)")
        if shutil.which(os.environ.get("CC", "gcc")) is None and shutil.which("cc") is None:
            raise SystemExit("tensorpress: no C compiler (gcc or $CC): cgo needs one to build libtensorpress.so")
        if not os.path.exists(os.path.join(ROOT, "cmd", "libtensorpress")):
            raise SystemExit(f"tensorpress: {ROOT} is not the tensorpress repository (no cmd/libtensorpress)")
        out = os.path.join(os.path.abspath(self.build_lib), "tensorpress", "libtensorpress.so")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        env = dict(os.environ, CGO_ENABLED="1")
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./cmd/libtensorpress"]
        self.announce("running " + " ".join(cmd), level=2)
        r = subprocess.run(cmd, cwd=ROOT, env=env)
        if r.returncode != 0:
            raise SystemExit("tensorpress: go build failed (above); offline, the Go modules must be in the "
                             "module cache (`go mod download` once while online)")
        header = out[:-3] + ".h"
        if os.path.exists(header):
            os.remove(header)


class BinaryDistribution(Distribution):
    """The package carries a native library: a platform wheel."""

    def has_ext_modules(self) -> bool:
        return True


def version() -> str:
    for p in (os.path.join(ROOT, "VERSION"),):
        if os.path.exists(p):
            with open(p) as f:
                return f.read().strip()
    try:
        v = subprocess.run(["git", "describe", "--tags", "--always"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "0.0.0"
    return v.lstrip("v") if v[:1] == "v" and v[1:2].isdigit() else "0.0.0+g" + v.replace("-", ".")


setup(version=version(), cmdclass={"build_py": BuildWithGo}, distclass=BinaryDistribution)
