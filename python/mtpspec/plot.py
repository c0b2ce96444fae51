"""matplotlib figures for the records of :mod:`mtpspec.bench` and for :class:`mtpspec.Stats`.

Every helper builds a new ``matplotlib.figure.Figure`` (no pyplot state, so nothing accumulates
across calls) and returns it; notebooks display a returned figure, scripts call ``fig.savefig``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from matplotlib.figure import Figure

from mtpspec._results import Stats

Record = Mapping[str, Any]


def _groups(records: Sequence[Record], keys: Sequence[str]) -> Dict[Tuple[Any, ...], List[Record]]:
    groups: Dict[Tuple[Any, ...], List[Record]] = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return groups


def _label(keys: Sequence[str], values: Tuple[Any, ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, values) if v is not None)


def acceptance_vs_context(
    records: Sequence[Record], metric: str = "mean_acceptance_length", by: Sequence[str] = ("k", "variant")
) -> Figure:
    """One line per (k, variant) of ``metric`` against context length (acceptance_sweep records)."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for key, rows in sorted(_groups(records, by).items(), key=lambda kv: str(kv[0])):
        rows = sorted(rows, key=lambda r: r["context"])
        ax.plot([r["context"] for r in rows], [r[metric] for r in rows], marker="o", label=_label(by, key))
    ax.set_xlabel("context length N")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def per_position(
    stats: Union[Stats, Record, Sequence[Tuple[str, Union[Stats, Record]]]],
    conditional: bool = False,
) -> Figure:
    """Bars of per-position acceptance (unconditional accepted_i / num_drafts, or conditional
    accepted_i / reached_i) for one Stats/record or several ``(label, stats)`` pairs side by side."""
    items: List[Tuple[str, Union[Stats, Record]]]
    if isinstance(stats, (Stats, Mapping)):
        items = [("", stats)]
    else:
        items = list(stats)
    field = "conditional_acceptance" if conditional else "per_position_acceptance"
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    width = 0.8 / max(len(items), 1)
    for i, (label, s) in enumerate(items):
        values = np.asarray(getattr(s, field) if isinstance(s, Stats) else s[field], dtype=float)
        x = np.arange(1, len(values) + 1) + (i - (len(items) - 1) / 2) * width
        ax.bar(x, values, width=width, label=label or None)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(accept i | reached i)" if conditional else "accepted_i / num_drafts")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    if any(label for label, _ in items):
        ax.legend(fontsize="small")
    return fig


def per_position_vs_context(records: Sequence[Record], k: Optional[int] = None, conditional: bool = False,
                            variant: Optional[str] = None) -> Figure:
    """Per-position acceptance against context length: one line per draft position, for the
    records of one k (default: the largest) and one variant (default: the first)."""
    if not records:
        raise ValueError("no records to plot")
    k = max(r["k"] for r in records) if k is None else k
    variant = records[0].get("variant") if variant is None else variant
    rows = sorted((r for r in records if r["k"] == k and r.get("variant") == variant), key=lambda r: r["context"])
    if not rows:
        raise ValueError(f"no records with k={k}, variant={variant!r}")
    field = "conditional_acceptance" if conditional else "per_position_acceptance"
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    positions = max(len(r[field]) for r in rows)
    for i in range(positions):
        ax.plot([r["context"] for r in rows], [r[field][i] if i < len(r[field]) else np.nan for r in rows],
                marker="o", label=f"position {i + 1}")
    ax.set_xlabel("context length N")
    ax.set_ylabel("conditional acceptance" if conditional else "per-position acceptance")
    ax.set_title(f"k={k}" + (f", {variant}" if variant else ""))
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def ratio_vs_context(records: Sequence[Record]) -> Figure:
    """r_k = T(verify of k+1 rows) / T(plain step) against context length (tradeoff_sweep records)."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for (k,), rows in sorted(_groups(records, ["k"]).items()):
        if k == 0:
            continue
        rows = sorted(rows, key=lambda r: r["context"])
        ax.plot([r["context"] for r in rows], [r["ratio"] for r in rows], marker="o", label=f"r_{k}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("context length N")
    ax.set_ylabel("verify / plain step time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def heatmap(records: Sequence[Record], value: str = "mean_acceptance_length", x: str = "context", y: str = "k",
            variant: Optional[str] = None, fmt: str = "{:.2f}") -> Figure:
    """A y × x grid (default k × context length) of ``value``, for one variant (default: the first)."""
    if not records:
        raise ValueError("no records to plot")
    if variant is None:
        variant = records[0].get("variant")
    rows = [r for r in records if r.get("variant") == variant]
    xs = sorted({r[x] for r in rows})
    ys = sorted({r[y] for r in rows})
    grid = np.full((len(ys), len(xs)), np.nan)
    for r in rows:
        grid[ys.index(r[y]), xs.index(r[x])] = r[value]
    fig = Figure(figsize=(1.0 + 0.9 * len(xs), 1.0 + 0.6 * len(ys)))
    ax = fig.add_subplot()
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(value.replace("_", " ") + (f" ({variant})" if variant else ""))
    finite = grid[np.isfinite(grid)]
    middle = float(finite.mean()) if finite.size else 0.0
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize="small",
                    color="white" if v < middle else "black")
    fig.colorbar(image, ax=ax)
    return fig


__all__ = ["acceptance_vs_context", "heatmap", "per_position", "per_position_vs_context", "ratio_vs_context"]
