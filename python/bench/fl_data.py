"""Fashion-MNIST from Debian's dataset-fashion-mnist package, and its split
among federated clients (IID or Dirichlet over the labels).

The loader and the splits follow ``codec-bench fl`` (package
cmd/codec-bench/internal/fl): pixels are ``byte / 255`` as float32, a
training limit keeps the first samples, IID deals a random permutation into
near-equal shards, Dirichlet(alpha) cuts each class's shuffled samples at the
cumulative shares of a Gamma(alpha) draw per client, and an empty client gets
one sample of the largest. The random numbers differ (numpy's PCG64 seeded by
a SeedSequence here, Go's PCG with splitmix64 there), so the splits are the
same in kind, not in value.

Every random stream is a function of (seed, stream, index) only, never of
what a row does: rows on the same seed train on the same split, from the same
initial weights, in the same minibatch order (paired comparisons).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
IMAGE_SIZE = 28 * 28
NUM_CLASSES = 10

_MAGIC_IMAGES = 0x00000803
_MAGIC_LABELS = 0x00000801
_MAX_IDX_BYTES = 1 << 30

# Stream identifiers of the generators derived from a seed (as in the Go simulator).
STREAM_SPLIT = 1
STREAM_INIT = 2
STREAM_SHUFFLE = 3


def rng(seed: int, stream: int, index: int = 0) -> np.random.Generator:
    """The PCG64 generator of one use (``stream``, ``index``) of ``seed``."""
    if seed < 0 or stream < 0 or index < 0:
        raise ValueError(f"rng: seed {seed}, stream {stream} and index {index} must not be negative")
    return np.random.Generator(np.random.PCG64([seed, stream, index]))


@dataclass
class Dataset:
    """Labelled images: ``x`` is float32 [n, 784] in [0, 1], ``y`` uint8 [n] in 0..9."""

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.x.shape[1] != IMAGE_SIZE or self.x.dtype != np.float32:
            raise ValueError(f"dataset: x is {self.x.dtype} {self.x.shape}, want float32 [n, {IMAGE_SIZE}]")
        if self.y.shape != (self.x.shape[0],) or self.y.dtype != np.uint8:
            raise ValueError(f"dataset: y is {self.y.dtype} {self.y.shape}, want uint8 [{self.x.shape[0]}]")
        if self.y.size and int(self.y.max()) >= NUM_CLASSES:
            raise ValueError(f"dataset: label {int(self.y.max())} is not in 0..{NUM_CLASSES - 1}")

    @property
    def n(self) -> int:
        """The number of samples."""
        return int(self.y.shape[0])

    def head(self, n: int) -> "Dataset":
        """The first ``n`` samples (all when ``n`` is 0), sharing memory."""
        if n < 0 or n > self.n:
            raise ValueError(f"dataset: limit {n} outside [0, {self.n}]")
        return self if n == 0 else Dataset(self.x[:n], self.y[:n])


def _read_idx(path: str, magic: int, dims: int) -> Tuple[Tuple[int, ...], bytes]:
    with gzip.open(path, "rb") as f:
        head = f.read(4 + 4 * dims)
        if len(head) < 4 + 4 * dims:
            raise ValueError(f"{path}: truncated IDX header")
        got = int.from_bytes(head[:4], "big")
        if got != magic:
            raise ValueError(f"{path}: IDX magic {got:#010x}, want {magic:#010x}")
        shape = tuple(int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
        size = int(np.prod(shape, dtype=np.int64))
        if size > _MAX_IDX_BYTES:
            raise ValueError(f"{path}: IDX header claims {size} bytes, more than {_MAX_IDX_BYTES}")
        data = f.read(size + 1)
    if len(data) != size:
        raise ValueError(f"{path}: IDX payload is {len(data)} bytes, header says {size}")
    return shape, data


def _load_pair(d: str, images: str, labels: str) -> Dataset:
    shape, px = _read_idx(os.path.join(d, images), _MAGIC_IMAGES, 3)
    if shape[1:] != (28, 28):
        raise ValueError(f"{images}: images of {shape[1:]}, want (28, 28)")
    (n,), lb = _read_idx(os.path.join(d, labels), _MAGIC_LABELS, 1)
    if n != shape[0]:
        raise ValueError(f"{images} holds {shape[0]} images but {labels} {n} labels")
    x = np.frombuffer(px, dtype=np.uint8).reshape(n, IMAGE_SIZE).astype(np.float32) / np.float32(255)
    return Dataset(x, np.frombuffer(lb, dtype=np.uint8).copy())


def load_fashion_mnist(d: str = DEFAULT_DIR) -> Tuple[Dataset, Dataset]:
    """The training (60000) and test (10000) sets from the gzip'd IDX files in ``d``."""
    if not os.path.isdir(d):
        raise FileNotFoundError(f"Fashion-MNIST directory {d} not found: apt-get install dataset-fashion-mnist")
    train = _load_pair(d, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    test = _load_pair(d, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    return train, test


def split_iid(n: int, clients: int, r: np.random.Generator) -> List[np.ndarray]:
    """A random permutation of ``n`` samples dealt into near-equal shards (the first n % clients one larger)."""
    perm = r.permutation(n)
    out, lo = [], 0
    for c in range(clients):
        hi = lo + n // clients + (1 if c < n % clients else 0)
        out.append(perm[lo:hi])
        lo = hi
    return out


def split_dirichlet(y: np.ndarray, clients: int, alpha: float, r: np.random.Generator) -> List[np.ndarray]:
    """Each class's samples shared among clients by a symmetric Dirichlet(``alpha``) draw."""
    parts: List[List[np.ndarray]] = [[] for _ in range(clients)]
    for cls in range(NUM_CLASSES):
        idx = np.flatnonzero(y == cls)
        if idx.size == 0:
            continue
        r.shuffle(idx)
        p = r.gamma(alpha, 1.0, clients)
        total = float(p.sum())
        if not (total > 0) or not np.isfinite(total):  # every draw underflowed (tiny alpha)
            p = np.zeros(clients)
            p[r.integers(clients)] = total = 1.0
        lo, cum = 0, 0.0
        for c in range(clients):
            cum += float(p[c])
            hi = idx.size if c == clients - 1 else int(cum / total * idx.size)
            hi = min(max(hi, lo), idx.size)
            parts[c].append(idx[lo:hi])
            lo = hi
    shards = [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]
    for c in range(clients):  # an empty client takes one sample of the (first) largest
        if shards[c].size == 0:
            big = int(np.argmax([s.size for s in shards]))
            shards[c], shards[big] = shards[big][-1:], shards[big][:-1]
    return shards


def shards(train: Dataset, clients: int, split: str, seed: int, alpha: float = 0.5) -> List[np.ndarray]:
    """Each client's sample indices into ``train``, sorted; every client gets at least one."""
    if clients <= 0:
        raise ValueError(f"clients must be positive, got {clients}")
    if train.n < clients:
        raise ValueError(f"{train.n} training samples cannot give each of {clients} clients one")
    r = rng(seed, STREAM_SPLIT)
    if split == "iid":
        s = split_iid(train.n, clients, r)
    elif split == "dirichlet":
        if not (alpha > 0) or not np.isfinite(alpha):
            raise ValueError(f"the Dirichlet split needs a positive, finite alpha, got {alpha}")
        s = split_dirichlet(train.y, clients, alpha, r)
    else:
        raise ValueError(f"split {split!r}: want 'iid' or 'dirichlet'")
    return [np.sort(x).astype(np.int64) for x in s]
