"""tensorpress.Hub against a real `tensorpress hub` process, built here from
./cmd/tensorpress: fetches checked bit for bit against the .npy files,
deltas, a wrong base, errors, an upload seen in the hub's /metrics, and
mutual TLS with a token (certificates made with the openssl CLI)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from typing import Dict, Iterator, List

import numpy as np
import pytest

import tensorpress as tp

from conftest import ROOT

GO = shutil.which("go")
pytestmark = pytest.mark.skipif(GO is None, reason="go is not on PATH: the tests build and run `tensorpress hub`")


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tensorpress command, built for these tests."""
    out = str(tmp_path_factory.mktemp("bin") / "tensorpress")
    r = subprocess.run([GO, "build", "-o", out, "./cmd/tensorpress"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"go build ./cmd/tensorpress: {r.stderr[-2000:]}")
    return out


class HubProcess:
    """A `tensorpress hub` serving dir, its addresses read from its log."""

    def __init__(self, binary: str, dir: str, *args: str) -> None:
        self.dir = dir
        self.log: List[str] = []
        self.p = subprocess.Popen([binary, "hub", "--dir", dir, "--listen", "127.0.0.1:0", "--watch", "100ms",
                                   "--metrics", "127.0.0.1:0", *args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addr = self._await(r"msg=listening addr=(\S+)")
        self.metrics = self._await(r"msg=metrics addr=(\S+)")
        threading.Thread(target=self._drain, daemon=True).start()

    def _await(self, pattern: str) -> str:
        """The first group of pattern in the log: in the lines read so far, else in the next ones."""
        assert self.p.stderr is not None
        for line in self.log:
            m = re.search(pattern, line)
            if m:
                return m.group(1)
        for line in self.p.stderr:
            self.log.append(line)
            m = re.search(pattern, line)
            if m:
                return m.group(1)
        raise AssertionError(f"hub ended before logging {pattern!r}: {''.join(self.log)}")

    def _drain(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.log.append(line)

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on /metrics."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=30) as r:
            text = r.read().decode()
        return sum(float(m.group(1)) for m in re.finditer(r"^" + name + r"(?:\{[^}]*\})? (\S+)$", text, re.M))

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def publish(dir: str, version: int, tensors: Dict[str, np.ndarray]) -> None:
    """Write version as .npy files, under another name first, then rename it (as the hub asks)."""
    tmp = os.path.join(dir, f".{version}.tmp")
    os.makedirs(tmp)
    for name, a in tensors.items():
        np.save(os.path.join(tmp, name + ".npy"), a, allow_pickle=False)
    os.rename(tmp, os.path.join(dir, str(version)))


def wait_version(hub: tp.Hub, version: int) -> None:
    """Wait (60 s at most: the hub looks every 100 ms) until the hub serves version."""
    deadline = time.monotonic() + 60
    while version not in [v.version for v in hub.versions()]:
        assert time.monotonic() < deadline, f"the hub never served version {version}"
        time.sleep(0.05)


def model(seed: int) -> Dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    return {
        "fc1.weight": g.normal(0, 0.02, (512, 784)).astype(np.float32),  # several chunks
        "fc1.bias": g.normal(0, 0.02, 512).astype(np.float32),
        "emb.half": g.normal(0, 1, (64, 33)).astype(np.float16),
        "steps": np.arange(7, dtype=np.int64),
        "mask": g.random((3, 5)) > 0.5,
    }


def file_digests(dir: str) -> Dict[str, str]:
    """SHA-256 of each .npy file's data, read from the file."""
    out = {}
    for f in sorted(os.listdir(dir)):
        a = np.load(os.path.join(dir, f), allow_pickle=False)
        out[f[:-4]] = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
    return out


def check_bits(got: tp.Fetched, dir: str) -> None:
    want = file_digests(dir)
    assert sorted(got) == sorted(want)
    for name, d in want.items():
        a = got[name]
        assert hashlib.sha256(a.tobytes()).hexdigest() == d, name
        assert got.digests[name] == d, name
        assert a.dtype == np.load(os.path.join(dir, name + ".npy")).dtype, name


@pytest.fixture(scope="module")
def served(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """A hub serving versions 1 and 2 (2 is 1 changed a little, published while it runs)."""
    d = str(tmp_path_factory.mktemp("models"))
    m1 = model(1)
    publish(d, 1, m1)
    h = HubProcess(binary, d)
    try:
        m2 = {k: v.copy() for k, v in m1.items()}
        m2["fc1.weight"][::7] += np.float32(1e-3)
        m2["steps"] += 1
        publish(d, 2, m2)
        yield h
    finally:
        h.stop()


def test_fetch_bit_for_bit_and_deltas(served: HubProcess) -> None:
    with tp.Hub(served.addr, timeout=60) as hub:
        wait_version(hub, 2)
        sent0 = served.metric("tensorpress_hub_sent_bytes_total")
        v1 = hub.fetch(1)
        sent = served.metric("tensorpress_hub_sent_bytes_total") - sent0
        check_bits(v1, os.path.join(served.dir, "1"))
        # The hub counts its frames' bytes; the client the gRPC wire bytes: frames plus framing.
        assert sent <= v1.bytes_received <= sent * 1.01 + 4096
        assert (v1.version, v1.deltas, v1.full, v1.lossy) == (1, 0, 5, [])
        raw = sum(a.nbytes for a in v1.values())
        assert v1.bytes_received > 0
        # Lossless coding beats the raw bytes on this model (float32 normals: about 1.2x).
        assert v1.bytes_received < raw

        v2 = hub.fetch(2, base=v1)
        check_bits(v2, os.path.join(served.dir, "2"))
        assert v2.version == 2 and v2.deltas > 0 and v2.refetched == []
        assert v2.bytes_received < v1.bytes_received
        fast = hub.fetch(2, base=v1, fast_deltas=True)
        check_bits(fast, os.path.join(served.dir, "2"))
        assert fast.deltas == v2.deltas and fast.refetched == []
        # The base was read, never written.
        check_bits(v1, os.path.join(served.dir, "1"))
        newest = hub.fetch()
        assert newest.version == 2 and newest.full == 5


def test_wrong_base(served: HubProcess) -> None:
    with tp.Hub(served.addr, timeout=60) as hub:
        wait_version(hub, 2)
        v1 = hub.fetch(1)
        wrong = dict(v1)
        wrong["fc1.bias"] = v1["fc1.bias"] + np.float32(1)
        with pytest.raises(tp.BaseMismatchError, match="version 1") as e:
            hub.fetch(2, base=(1, wrong), refetch=False)
        assert e.value.base == 1 and e.value.names == ["fc1.bias"]
        # By default the tensors whose delta did not match come again whole.
        v2 = hub.fetch(2, base=(1, wrong))
        check_bits(v2, os.path.join(served.dir, "2"))
        assert v2.refetched == ["fc1.bias"] and v2.deltas >= 1
        # A base missing a tensor is the same case.
        partial = {k: a for k, a in v1.items() if k != "steps"}
        v2 = hub.fetch(2, base=(1, partial))
        check_bits(v2, os.path.join(served.dir, "2"))
        assert "steps" in v2.refetched


def test_errors(served: HubProcess) -> None:
    with tp.Hub(served.addr, timeout=60) as hub:
        wait_version(hub, 2)
        with pytest.raises(tp.NotFoundError, match="version 99"):
            hub.fetch(99)
        assert isinstance(hub.fetch(1, names=["steps"])["steps"], np.ndarray)
        with pytest.raises(tp.NotFoundError):
            hub.fetch(1, names=["no.such.tensor"])
        with pytest.raises(TypeError, match="names"):
            hub.fetch(1, names="steps")
        assert "127.0.0.1" in repr(hub)
    assert "closed" in repr(hub)
    with pytest.raises(ValueError, match="closed"):
        hub.versions()
    with pytest.raises(tp.ArgumentError, match="scheme grpc://"):
        tp.Hub("grpc://x:1")
    with pytest.raises(tp.ArgumentError, match="plain text"):
        tp.Hub("http://x:1", tls=tp.TLS(ca="ca.pem"))


def test_hub_down() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    start = tp.live_handles()
    with tp.Hub(addr, timeout=30) as hub:
        with pytest.raises(tp.HubError, match=re.escape(addr) + ": unreachable") as e:
            hub.versions()
        assert isinstance(e.value, ConnectionError)
        with pytest.raises(tp.HubError, match="connection refused"):
            hub.fetch()
    assert tp.live_handles() == start


def test_timeout() -> None:
    """A peer that accepts the connection and never answers: the call ends at the Hub's timeout."""
    with Silent() as addr, tp.Hub(addr, timeout=0.3) as hub:
        with pytest.raises(tp.TensorpressTimeoutError, match="no answer in time"):
            hub.versions()


class Silent:
    """A TCP listener that accepts connections and never answers; ``connected`` is set at the first."""

    def __enter__(self) -> str:
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(4)
        self.connected = threading.Event()
        self.conns: List[socket.socket] = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()
        return "127.0.0.1:%d" % self.s.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.s.accept()
            except OSError:
                return
            self.conns.append(c)
            self.connected.set()

    def __exit__(self, *exc: object) -> None:
        self.s.shutdown(socket.SHUT_RDWR)
        self.s.close()
        self.t.join()
        for c in self.conns:
            c.close()


def test_cancel_from_another_thread() -> None:
    with Silent() as addr, tp.Hub(addr) as hub:
        got: List[BaseException] = []
        t = threading.Thread(target=lambda: got.append(pytest.raises(tp.CanceledError, hub.versions).value))
        t.start()
        while t.is_alive():  # until the call has started and seen the cancel
            hub.cancel()
            t.join(0.05)
        assert len(got) == 1 and "canceled" in str(got[0])
        assert hub.cancel() == 0


def test_ctrl_c_cancels() -> None:
    """Ctrl-C in the main thread during a call raises KeyboardInterrupt, the call canceled."""
    import _thread
    import signal

    # A shell without job control starts background commands with SIGINT ignored, and
    # Python then installs no handler (interrupt_main() would do nothing): install it.
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        silent = Silent()
        with silent as addr, tp.Hub(addr) as hub:
            def interrupt() -> None:
                silent.connected.wait()  # the call is in flight
                _thread.interrupt_main()

            threading.Thread(target=interrupt, daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                hub.fetch()
            # The call ended (canceled) before KeyboardInterrupt was raised.
            assert not any(t.name == "tensorpress-hub" and t.is_alive() for t in threading.enumerate())
    finally:
        signal.signal(signal.SIGINT, saved)


def test_upload_through_sender(served: HubProcess) -> None:
    g = np.random.default_rng(3)
    grads = {"fc1.weight": g.normal(0, 1, (64, 32)).astype(np.float32), "fc1.bias": g.normal(0, 1, 32)}
    updates0 = served.metric("tensorpress_hub_updates_total")
    bytes0 = served.metric("tensorpress_hub_update_bytes_total")
    with tp.Hub(served.addr, timeout=60) as hub, tp.Sender("topk(0.1)") as s:
        r = hub.upload(grads, round=5, weight=2.0, peer="client-1", sender=s)
        assert r.updates == 2 and s.pending == 0
        state = s.state()  # committed: the residuals of what topk left out
        assert len(state) > 4 * 64 * 32
        frames = served.metric("tensorpress_hub_update_bytes_total") - bytes0
        assert served.metric("tensorpress_hub_updates_total") - updates0 == 2
        # topk(0.1) frames are far below the dense float32 bytes; the wire adds protobuf and gRPC framing.
        assert 0 < frames < 0.5 * sum(4 * a.size for a in grads.values())
        assert r.bytes_sent > frames
        # Dense, no sender: float32 whole.
        r = hub.upload({"x": np.ones(1000, np.float32)}, round=5)
        assert r.updates == 1 and r.bytes_sent > 4000
        with pytest.raises(tp.RecipeError):
            hub.upload(grads, "nope(", round=5)
        with pytest.raises(tp.ArgumentError, match="weight -1"):
            hub.upload(grads, round=5, weight=-1.0)
        with pytest.raises(tp.NonFiniteError):  # the update, refused by the Sender before it is sent
            hub.upload({"y": np.full(8, np.inf, np.float32)}, "topk(0.5)", round=5)
        s.compress("fc1.bias", grads["fc1.bias"])
        with pytest.raises(tp.StateError, match="pending"):
            hub.upload(grads, round=5, sender=s)
        with pytest.raises(TypeError, match="'ids'"):
            hub.upload({"ids": np.arange(3)}, round=5)


def test_upload_with_time(served: HubProcess) -> None:
    """within= lets the autotuner choose the density from the uplink the Hub's uploads measure."""
    w = {"w": np.random.default_rng(4).normal(0, 1, 1 << 20).astype(np.float32)}  # 4 MiB
    with tp.Hub(served.addr, timeout=60) as hub, tp.Sender("topk(0.01)") as s:
        # The link not measured yet: the largest sparse density, never the update whole.
        r = hub.upload(w, round=7, peer="a", sender=s, within=1.0)
        assert r.densities == {"w": 0.3} and r.uplink > 0, r
        # Loopback carries 4 MiB in far less than a minute, whatever the machine: the update whole.
        r = hub.upload(w, round=7, peer="b", sender=s, within=60.0)
        assert r.densities == {"w": 1.0} and r.bytes_sent > 4 << 20, r
        # A millisecond: sparse again, and the densities given are the ones chosen among.
        r = hub.upload(w, round=7, peer="c", sender=s, within=0.001, densities=[0.001, 0.5])
        assert r.densities == {"w": 0.001}, r
        assert r.bytes_sent < 64 << 10
        with pytest.raises(ValueError, match="within"):
            hub.upload(w, round=7, sender=s, within=-1)
        with pytest.raises(ValueError, match="densities"):
            hub.upload(w, round=7, sender=s, densities=[0.1])
        with pytest.raises(tp.ArgumentError, match="gradient compressor"):
            hub.upload(w, round=7, within=1.0)  # dense: no density to choose
        with pytest.raises(tp.ArgumentError, match="not in"):
            hub.upload(w, round=7, sender=s, within=1.0, densities=[2.0])


def openssl(*args: str, cwd: str) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def make_certs(d: str) -> None:
    """A CA, the hub's certificate (127.0.0.1), a client's, and a stranger's (another CA)."""
    for ca in ("ca", "other"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                "-subj", f"/CN={ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)
    for name, ca, ext in (("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
                          ("client", "ca", "extendedKeyUsage=clientAuth"),
                          ("stranger", "other", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
                "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl CLI makes the test certificates")
def test_mutual_tls_and_token(binary: str, tmp_path: "os.PathLike[str]") -> None:
    d = str(tmp_path)
    make_certs(d)
    p = lambda n: os.path.join(d, n)  # noqa: E731
    with open(p("token"), "w") as f:
        f.write("0123456789abcdef0123456789abcdef\n")
    with open(p("wrong"), "w") as f:
        f.write("fedcba9876543210fedcba9876543210\n")
    m = {"w": np.arange(1000, dtype=np.float32)}
    os.makedirs(p("models"))
    publish(p("models"), 1, m)
    h = HubProcess(binary, p("models"), "--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                   "--tls-ca", p("ca.pem"), "--token-file", p("token"))
    try:
        good = tp.TLS(ca=p("ca.pem"), cert=p("client.pem"), key=p("client.key"))
        with tp.Hub(h.addr, tls=good, token_file=p("token"), timeout=60) as hub:
            assert "tls" in repr(hub)
            wait_version(hub, 1)
            assert np.array_equal(hub.fetch(1)["w"], m["w"])
        with tp.Hub(h.addr, tls=good, token_file=p("wrong"), timeout=60) as hub:
            with pytest.raises(tp.AuthError, match="refused this client"):
                hub.versions()
        stranger = tp.TLS(ca=p("ca.pem"), cert=p("stranger.pem"), key=p("stranger.key"))
        for tls in (stranger, tp.TLS(ca=p("ca.pem"))):
            with tp.Hub(h.addr, tls=tls, token_file=p("token"), timeout=60) as hub:
                # Refused in the handshake, or, with TLS 1.3, by closing the connection after it.
                with pytest.raises((tp.AuthError, tp.HubError), match="certificate|closed|EOF|reset"):
                    hub.versions()
        with tp.Hub(h.addr, token_file=p("token"), timeout=60) as hub:
            with pytest.raises(tp.HubError, match="TLS"):
                hub.versions()
        with pytest.raises(tp.ArgumentError):
            tp.Hub(h.addr, tls=tp.TLS(ca=p("no-such-ca.pem")))
    finally:
        h.stop()


def test_alloc_failure_raises(served: HubProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception in the allocation callback cancels the fetch and is raised after it; the Hub still works."""
    from tensorpress import _dtypes

    with tp.Hub(served.addr, timeout=60) as hub:
        wait_version(hub, 2)
        with monkeypatch.context() as m:
            m.delitem(_dtypes.NUMPY, _dtypes.F32)
            with pytest.raises(tp.TensorpressError, match="unknown dtype 2"):
                hub.fetch(1)
        check_bits(hub.fetch(1), os.path.join(served.dir, "1"))


def test_fetch_into_files(served: HubProcess, tmp_path: "os.PathLike[str]") -> None:
    """out_dir: .npy files and a manifest, memory-mapped; the next fetch takes the directory as its base."""
    d = os.path.join(os.fspath(tmp_path), "model")
    with tp.Hub(served.addr, timeout=60) as hub:
        wait_version(hub, 2)
        v1 = hub.fetch(1, out_dir=d)
        check_bits(v1, os.path.join(served.dir, "1"))
        assert all(isinstance(a, np.memmap) for a in v1.values())
        assert sorted(os.listdir(d)) == sorted([tp.hub.MANIFEST] + [k + ".npy" for k in v1])
        on_disk = tp.load_dir(d)
        check_bits(on_disk, os.path.join(served.dir, "1"))
        assert on_disk.version == 1 and on_disk.digests == v1.digests

        # The directory is the base of the next fetch and receives it: deltas, files replaced.
        v2 = hub.fetch(2, base=d, out_dir=d)
        check_bits(v2, os.path.join(served.dir, "2"))
        assert v2.deltas > 0 and v2.refetched == []
        check_bits(tp.load_dir(d), os.path.join(served.dir, "2"))
        check_bits(on_disk, os.path.join(served.dir, "1"))  # maps of the version before still read it

        # A failed fetch leaves the directory as it was, without temporary files.
        before = sorted(os.listdir(d))
        with pytest.raises(tp.NotFoundError):
            hub.fetch(99, base=d, out_dir=d)
        assert sorted(os.listdir(d)) == before
        check_bits(tp.load_dir(d), os.path.join(served.dir, "2"))

        # A wrong base on disk: the tensor comes again whole, into its file.
        bad = os.path.join(os.fspath(tmp_path), "bad")
        hub.fetch(1, out_dir=bad)
        np.save(os.path.join(bad, "fc1.bias.npy"), np.zeros(512, np.float32))
        v2b = hub.fetch(2, base=bad, out_dir=bad)
        assert v2b.refetched == ["fc1.bias"]
        check_bits(tp.load_dir(bad), os.path.join(served.dir, "2"))

        with pytest.raises(ValueError, match="whole versions"):
            hub.fetch(2, names=["steps"], out_dir=d)

    with pytest.raises(FileNotFoundError, match="no fetched version"):
        tp.load_dir(os.fspath(tmp_path))


def test_file_names_stay_in_the_directory() -> None:
    from tensorpress.hub import _file_name
    for name in ["../../etc/passwd", "a/b", "..", ".", "", "x\x00y", "é"]:
        fn = _file_name(name)
        assert "/" not in fn and "\x00" not in fn and fn.endswith(".npy") and fn not in (".", "..")
