"""The 784-128-64-10 ReLU perceptron of ``codec-bench fl``, in numpy float32.

Parameters are named and shaped like PyTorch's ``nn.Linear`` (``fc1.weight``
[128, 784], ``fc1.bias`` [128], ..., 109386 in all) and computed as
``fc3(relu(fc2(relu(fc1(x)))))``. Initialisation is PyTorch's default for
nn.Linear in distribution (every weight and bias of a layer with ``fan_in``
inputs from U(-1/sqrt(fan_in), 1/sqrt(fan_in))), drawn from numpy's PCG64, so
the values are not PyTorch's nor the Go simulator's. Training is mean softmax
cross-entropy and PyTorch's SGD with momentum (``v = m*v + g; w -= lr*v``,
the buffer starting at zero for every client in every round).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from fl_data import IMAGE_SIZE, NUM_CLASSES, STREAM_INIT, Dataset, rng

WIDTHS = (IMAGE_SIZE, 128, 64, NUM_CLASSES)
NAMES = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias")
SHAPES: Dict[str, Tuple[int, ...]] = {}
for _l in range(3):
    SHAPES[f"fc{_l + 1}.weight"] = (WIDTHS[_l + 1], WIDTHS[_l])
    SHAPES[f"fc{_l + 1}.bias"] = (WIDTHS[_l + 1],)
NUM_PARAMS = sum(int(np.prod(s)) for s in SHAPES.values())  # 109386

Params = Dict[str, np.ndarray]


def init_params(seed: int) -> Params:
    """Weights drawn as PyTorch's default nn.Linear initialisation does (in distribution), from ``seed``."""
    r = rng(seed, STREAM_INIT)
    p: Params = {}
    for name in NAMES:
        layer = int(name[2]) - 1
        bound = 1.0 / np.sqrt(WIDTHS[layer])
        p[name] = ((2.0 * r.random(SHAPES[name]) - 1.0) * bound).astype(np.float32)
    return p


def check_params(p: Params, what: str = "model") -> None:
    """Raise ValueError unless ``p`` holds exactly the model's float32 tensors, shaped right."""
    if set(p) != set(NAMES):
        raise ValueError(f"{what}: tensors {sorted(p)}, want {list(NAMES)}")
    for name in NAMES:
        a = p[name]
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != SHAPES[name]:
            got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(f"{what}: {name} is {got}, want float32 {SHAPES[name]}")


def copy_params(p: Params) -> Params:
    """A deep copy, C-contiguous."""
    return {k: np.array(v, dtype=np.float32, order="C", copy=True) for k, v in p.items()}


def forward(p: Params, x: np.ndarray) -> List[np.ndarray]:
    """The layer outputs for the rows ``x``: two ReLU activations, then the logits."""
    outs = []
    a = x
    for l in range(3):
        z = a @ np.ascontiguousarray(p[f"fc{l + 1}.weight"].T)  # 1.6x faster than a strided B in reference BLAS
        z += p[f"fc{l + 1}.bias"]
        if l < 2:
            np.maximum(z, 0, out=z)
        outs.append(z)
        a = z
    return outs


def gradient(p: Params, x: np.ndarray, y: np.ndarray) -> Tuple[float, Params]:
    """The mean cross-entropy of the batch and its gradient with respect to every parameter."""
    rows = x.shape[0]
    h1, h2, logits = forward(p, x)
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1))
    loss = float(np.mean(lse - z[np.arange(rows), y]))
    d = np.exp(z - lse[:, None])
    d[np.arange(rows), y] -= 1.0
    d = (d / rows).astype(np.float32)
    g: Params = {}
    ins = (x, h1, h2)
    for l in (2, 1, 0):
        g[f"fc{l + 1}.weight"] = d.T @ ins[l]
        g[f"fc{l + 1}.bias"] = d.sum(axis=0, dtype=np.float32)
        if l > 0:
            d = d @ p[f"fc{l + 1}.weight"]
            d[ins[l] <= 0] = 0  # ReLU output 0: no gradient, as in PyTorch
    return loss, g


def sgd_step(p: Params, g: Params, v: Params, lr: float, momentum: float) -> None:
    """PyTorch's SGD with momentum in place: ``v = m*v + g; w -= lr*v`` (``w -= lr*g`` when m is 0)."""
    lr32, m32 = np.float32(lr), np.float32(momentum)
    for name in NAMES:
        if momentum:
            v[name] *= m32
            v[name] += g[name]
            step = v[name]
        else:
            step = g[name]
        p[name] -= lr32 * step


def train_local(p: Params, data: Dataset, order: np.ndarray, batch: int, lr: float,
                momentum: float) -> Tuple[float, int]:
    """One pass of minibatch SGD over ``data`` rows in ``order`` (the last batch may be short), in place.

    Returns the sum of the batch losses weighted by batch size, and the number of samples seen.
    """
    if batch <= 0:
        raise ValueError(f"batch must be positive, got {batch}")
    v = {k: np.zeros_like(a) for k, a in p.items()}
    total = 0.0
    for lo in range(0, order.size, batch):
        idx = order[lo:lo + batch]
        loss, g = gradient(p, data.x[idx], data.y[idx])
        total += loss * idx.size
        sgd_step(p, g, v, lr, momentum)
    return total, int(order.size)


def accuracy(p: Params, data: Dataset, batch: int = 1000) -> float:
    """The fraction of ``data`` whose largest logit is at the label (ties to the lower class)."""
    if data.n == 0:
        raise ValueError("accuracy: empty dataset")
    correct = 0
    for lo in range(0, data.n, batch):
        logits = forward(p, data.x[lo:lo + batch])[2]
        correct += int(np.count_nonzero(logits.argmax(axis=1) == data.y[lo:lo + batch]))
    return correct / data.n
