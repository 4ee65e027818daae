"""Downlink: the server publishes each round's global model to a real
``tensorpress hub`` process and every client fetches it from there.

- :class:`HubProcess` runs (once the first version is written) ``tensorpress hub --dir D --listen 127.0.0.1:0
  --watch 200ms --metrics 127.0.0.1:0`` and reads the addresses from its
  ``listening addr=`` and ``metrics addr=`` log lines.
- :meth:`HubProcess.publish` writes version v as one ``.npy`` file per tensor
  into ``D/.v.tmp``, renames it to ``D/v`` (the hub's rule for a complete
  version), waits for the hub's ``published version=v`` line and returns the
  SHA-256 of every tensor's bytes.
- :class:`CliFetcher` is a client: ``tensorpress fetch`` as a subprocess,
  with ``--base`` (the client's previous version) for deltas. The CLI takes
  a base only as a .safetensors file an earlier fetch wrote, so versions are
  fetched as .safetensors and read back with :func:`read_safetensors`. The
  bytes received are the growth of the hub's ``tensorpress_hub_sent_bytes_total``
  over the fetch (fetches run one at a time).
- :class:`TpHubFetcher` is the seam for the package's hub client
  (``tp.Hub(addr).fetch(version=v, base=...)``), for when it exists.

Every fetched tensor is checked bit for bit against the published arrays
(SHA-256 of the bytes), beside the CLI's own check against the hub's digests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_tensorpress(out_dir: str) -> str:
    """Build the ``tensorpress`` command from this repository into ``out_dir``; return its path."""
    path = os.path.join(out_dir, "tensorpress")
    r = subprocess.run(["go", "build", "-o", path, "./cmd/tensorpress"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"go build ./cmd/tensorpress failed: {r.stderr.strip()[-2000:]}")
    return path


def digest(a: np.ndarray) -> str:
    """SHA-256 (hex) of the array's bytes in C order."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "U8": np.uint8,
              "I16": np.int16, "I32": np.int32, "I64": np.int64}


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a .safetensors file (8-byte little-endian header length, JSON header, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    hl = int.from_bytes(blob[:8], "little")
    if hl > len(blob) - 8:
        raise ValueError(f"{path}: header length {hl} beyond the file")
    head = json.loads(blob[8:8 + hl])
    data = memoryview(blob)[8 + hl:]
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        dt = _ST_DTYPES.get(e["dtype"])
        if dt is None:
            raise ValueError(f"{path}: tensor {name!r} has dtype {e['dtype']}, not handled here")
        lo, hi = e["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=dt).reshape(e["shape"]).copy()
    return out


class HubProcess:
    """A ``tensorpress hub`` serving ``directory``; use as a context manager."""

    def __init__(self, binary: str, directory: str, *, retention: int = 4, start_timeout: float = 30.0) -> None:
        self.binary, self.dir, self.retention, self.start_timeout = binary, directory, retention, start_timeout
        os.makedirs(directory, exist_ok=True)
        self.proc: Optional[subprocess.Popen] = None
        self.addr = self.metrics_addr = ""
        self.lines: List[str] = []
        self._cv = threading.Condition()
        self._reader: Optional[threading.Thread] = None

    def _start(self) -> None:
        """Start the process (the hub refuses a directory without a version, so after the first)."""
        self.proc = subprocess.Popen(
            [self.binary, "hub", "--dir", self.dir, "--listen", "127.0.0.1:0", "--watch", "200ms",
             "--metrics", "127.0.0.1:0", "--retention", str(self.retention), "--log-level", "info"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.addr = self._wait_for(r"msg=listening addr=(\S+)", self.start_timeout)
        self.metrics_addr = self._wait_for(r"msg=metrics addr=(\S+)", self.start_timeout)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def _wait_for(self, pattern: str, timeout: float) -> str:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cv:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m.group(1) if rx.groups else m.group(0)
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or self.proc is None or self.proc.poll() is not None:
                    tail = "\n".join(self.lines[-10:])
                    code = None if self.proc is None else self.proc.poll()
                    raise RuntimeError(f"tensorpress hub: no line matching {pattern!r} "
                                       f"(exit status {code}); log tail:\n{tail}")
                self._cv.wait(min(left, 0.2))

    def publish(self, version: int, params: Dict[str, np.ndarray], timeout: float = 30.0) -> Dict[str, str]:
        """Write ``params`` as version ``version``, wait until the hub serves it; return their digests."""
        tmp = os.path.join(self.dir, f".{version}.tmp")
        final = os.path.join(self.dir, str(version))
        if os.path.exists(final):
            raise FileExistsError(f"version {version} already exists in {self.dir}")
        os.makedirs(tmp)
        digests = {}
        for name, a in params.items():
            np.save(os.path.join(tmp, name + ".npy"), np.ascontiguousarray(a), allow_pickle=False)
            digests[name] = digest(a)
        os.rename(tmp, final)
        if self.proc is None:
            self._start()
        self._wait_for(rf"msg=published version={version}\b", timeout)
        return digests

    def sent_bytes(self) -> int:
        """The hub's ``tensorpress_hub_sent_bytes_total`` (all labels summed)."""
        with urllib.request.urlopen(f"http://{self.metrics_addr}/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("tensorpress_hub_sent_bytes_total"):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def close(self) -> None:
        """Stop the hub (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(5)

    def __enter__(self) -> "HubProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class Fetched:
    """One client's fetch of one version."""

    arrays: Dict[str, np.ndarray]
    bytes_received: int
    deltas: int = 0
    seconds: float = 0.0
    notes: List[str] = field(default_factory=list)


def check_digests(arrays: Dict[str, np.ndarray], digests: Dict[str, str], what: str) -> None:
    """Raise unless ``arrays`` holds exactly the tensors of ``digests``, each bit for bit."""
    if set(arrays) != set(digests):
        raise ValueError(f"{what}: fetched tensors {sorted(arrays)}, published {sorted(digests)}")
    for name, want in digests.items():
        if digest(arrays[name]) != want:
            raise ValueError(f"{what}: tensor {name!r} differs from the published array (SHA-256)")


class CliFetcher:
    """A client fetching with the ``tensorpress fetch`` CLI into its own directory."""

    def __init__(self, binary: str, hub: HubProcess, directory: str) -> None:
        self.binary, self.hub, self.dir = binary, hub, directory
        os.makedirs(directory, exist_ok=True)
        self.base: Optional[str] = None

    def fetch(self, version: int) -> Fetched:
        """Version ``version`` (deltas against the previous fetch), and the bytes the hub sent for it."""
        out = os.path.join(self.dir, f"v{version}.safetensors")
        cmd = [self.binary, "fetch", "--hub", self.hub.addr, "--out", out, "--version", str(version),
               "--progress", "0", "--stall", "60s", "--lossless"]
        if self.base:
            cmd += ["--base", self.base]
        t0 = time.perf_counter()
        before = self.hub.sent_bytes()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"tensorpress fetch version {version} failed ({r.returncode}): {r.stderr.strip()}")
        sent = self.hub.sent_bytes() - before
        arrays = read_safetensors(out)
        m = re.search(r"\((\d+) as deltas", r.stdout)
        if self.base and self.base != out:
            os.remove(self.base)
        self.base = out
        notes = [ln for ln in r.stderr.splitlines() if ln.strip()]
        return Fetched(arrays, sent, int(m.group(1)) if m else 0, time.perf_counter() - t0, notes)

    def close(self) -> None:
        """Remove the client's files."""
        shutil.rmtree(self.dir, ignore_errors=True)


class TpHubFetcher:
    """A client over the package's hub client: ``tp.Hub(addr).fetch(version=v, base=previous)``.

    The client dials on the first fetch (the hub process starts with the first version). The
    package checks each tensor against the hub's digests; lossy tensors are refused
    (``require_lossless``), and so is a fetch that had to refetch a tensor whole.
    """

    def __init__(self, hub: HubProcess) -> None:
        import tensorpress as tp  # lazily: only this fetcher needs the package
        self.tp, self.hub = tp, hub
        self.client: Optional[Any] = None
        self.base: Optional[Any] = None

    def fetch(self, version: int) -> Fetched:
        """Version ``version``, deltas against the previous one fetched."""
        t0 = time.perf_counter()
        if self.client is None:
            self.client = self.tp.Hub(self.hub.addr)
        before = self.hub.sent_bytes()
        res = self.client.fetch(version=version, base=self.base)
        sent = self.hub.sent_bytes() - before
        if res.lossy or res.refetched:
            raise ValueError(f"hub fetch of version {version}: lossy {res.lossy}, refetched {res.refetched}")
        got = int(res.bytes_received)
        self.base = res
        return Fetched(dict(res), sent, res.deltas, time.perf_counter() - t0,
                       [] if got == sent else [f"client counted {got} wire bytes, hub metrics {sent}"])

    def close(self) -> None:
        """Close the client."""
        if self.client is not None:
            self.client.close()
