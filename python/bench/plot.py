"""A small SVG line-plot writer (numpy only) and the FedAvg figure:
test accuracy against round, and against the cumulative bytes sent up (log
scale), one line per (row, split), averaged over the seeds."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple
from xml.sax.saxutils import escape

import numpy as np

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf")

Series = Tuple[str, Sequence[float], Sequence[float]]  # label, x, y


def _ticks(lo: float, hi: float, log: bool) -> List[float]:
    if log:
        return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    raw = max(hi - lo, 1e-12) / 5  # about five ticks, at a 1-2-5 step
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return list(np.arange(math.floor(lo / step) * step, hi + step / 2, step))


def _fmt(v: float, log: bool) -> str:
    if log:
        for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if v >= k:
                return f"{v / k:g} {unit}"
        return f"{v:g} B"
    return f"{v:g}"


def panel(series: List[Series], x0: float, y0: float, w: float, h: float, title: str, xlabel: str,
          ylabel: str, logx: bool = False) -> List[str]:
    """SVG elements of one plot of ``series`` in the box (x0, y0, w, h)."""
    xs = np.concatenate([np.asarray(s[1], float) for s in series])
    ys = np.concatenate([np.asarray(s[2], float) for s in series])
    if logx:
        xs = xs[xs > 0]
    xlo, xhi, ylo, yhi = float(xs.min()), float(xs.max()), float(ys.min()), float(ys.max())
    if xhi <= xlo:
        xhi = xlo * 10 if logx else xlo + 1
    if yhi <= ylo:
        yhi = ylo + 0.01
    pad = 0.05 * (yhi - ylo)
    ylo, yhi = ylo - pad, yhi + pad
    fx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    px = lambda v: x0 + (fx(v) - fx(xlo)) / (fx(xhi) - fx(xlo)) * w  # noqa: E731
    py = lambda v: y0 + h - (v - ylo) / (yhi - ylo) * h  # noqa: E731
    out = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#333"/>',
           f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="14">{escape(title)}</text>',
           f'<text x="{x0 + w / 2}" y="{y0 + h + 36}" text-anchor="middle">{escape(xlabel)}</text>',
           f'<text x="{x0 - 44}" y="{y0 + h / 2}" text-anchor="middle" '
           f'transform="rotate(-90 {x0 - 44} {y0 + h / 2})">{escape(ylabel)}</text>']
    for t in _ticks(xlo, xhi, logx):
        if xlo <= t <= xhi:
            out.append(f'<line x1="{px(t):.1f}" y1="{y0}" x2="{px(t):.1f}" y2="{y0 + h}" stroke="#eee"/>'
                       f'<text x="{px(t):.1f}" y="{y0 + h + 16}" text-anchor="middle">{_fmt(t, logx)}</text>')
    for t in _ticks(ylo, yhi, False):
        if ylo <= t <= yhi:
            out.append(f'<line x1="{x0}" y1="{py(t):.1f}" x2="{x0 + w}" y2="{py(t):.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for i, (label, x, y) in enumerate(series):
        pts = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x, y) if not logx or a > 0)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[i % len(COLORS)]}" stroke-width="1.5"/>')
    return out


def write_svg(path: str, panels: List[List[str]], legend: List[str], width: int, height: int) -> None:
    """Write the panels' elements and a legend (one entry per series colour) as an SVG file."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for p in panels:
        parts.extend(p)
    for i, label in enumerate(legend):
        y = height - 18 * (len(legend) - i) - 4
        c = COLORS[i % len(COLORS)]
        parts.append(f'<line x1="70" y1="{y - 4}" x2="95" y2="{y - 4}" stroke="{c}" stroke-width="2"/>'
                     f'<text x="100" y="{y}">{escape(label)}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def fedavg_series(records: List[Dict[str, Any]]) -> Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per 'row (split)': rounds, mean cumulative bytes up and mean accuracy over the seeds."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(f"{r['row']} ({r['split']})", []).append(r)
    out = {}
    for label, rs in groups.items():
        pts = [[p for p in r["history"] if "accuracy" in p and not np.isnan(p["accuracy"])] for r in rs]
        n = min(len(p) for p in pts)
        rounds = np.array([p["round"] for p in pts[0][:n]], float)
        up = np.mean([[p["up_bytes"] for p in ps[:n]] for ps in pts], axis=0)
        acc = np.mean([[100 * p["accuracy"] for p in ps[:n]] for ps in pts], axis=0)
        out[label] = (rounds, up, acc)
    return out


def write_fedavg_svg(path: str, records: List[Dict[str, Any]]) -> None:
    """The FedAvg figure of ``records`` (fedavg.py's JSON lines) as SVG."""
    s = fedavg_series(records)
    if not s:
        raise ValueError("plot: no records")
    labels = list(s)
    legend_h = 18 * len(labels) + 20
    w, h = 980, 420 + legend_h
    left = panel([(k, s[k][0], s[k][2]) for k in labels], 70, 40, 380, 320, "Test accuracy by round",
                 "round", "accuracy %")
    right = panel([(k, s[k][1], s[k][2]) for k in labels], 570, 40, 380, 320, "Test accuracy by bytes sent up",
                  "cumulative upload bytes (all clients, log)", "accuracy %", logx=True)
    write_svg(path, [left, right], labels, w, h)
