"""Sweeps for notebooks: acceptance over (context length × k × variant) and the cost of a verify
relative to a plain decode step over context length. Both return lists of flat dicts (one per
measurement), ready for ``pandas.DataFrame(records)`` and for :mod:`mtpspec.plot`."""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from mtpspec._model import Model
from mtpspec._text import TokenIds, _ids

Record = Dict[str, Any]


def _progress(total: int, desc: str, enabled: Optional[bool]) -> Any:
    """A tqdm bar when tqdm is installed and the sweep is long (or progress=True); else None."""
    if enabled is False or (enabled is None and total < 8):
        return None
    try:
        with warnings.catch_warnings():  # tqdm.auto warns when a notebook lacks ipywidgets, then falls back
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc)


def _check_contexts(contexts: Iterable[int], available: int) -> List[int]:
    out = [int(n) for n in contexts]
    for n in out:
        if n < 1 or n > available:
            raise ValueError(f"context length {n} is outside [1, {available}] (the held-out ids given)")
    return out


def acceptance_sweep(
    model: Model,
    ids: TokenIds,
    contexts: Sequence[int],
    ks: Sequence[int] = (1, 2, 3, 4),
    variants: Optional[Mapping[str, Mapping[str, Any]]] = None,
    max_new_tokens: int = 32,
    progress: Optional[bool] = None,
    **generate_options: Any,
) -> List[Record]:
    """Runs ``model.generate(ids[:N], max_new_tokens, k=k, **options, **variant)`` for every context
    length N, draft count k and named variant (e.g. ``{"post": {"mtp_hidden": "post"}, "pre":
    {"mtp_hidden": "pre"}}``; default one variant, "default").

    Each record has ``context``, ``k``, ``variant``, ``stop_reason`` and every field of
    :meth:`mtpspec.Stats.to_dict` (mean_acceptance_length, per_position_acceptance, ...).
    """
    held_out = _ids(ids)
    lengths = _check_contexts(contexts, len(held_out))
    named = dict(variants) if variants else {"default": {}}
    grid = list(itertools.product(lengths, [int(k) for k in ks], named.items()))
    bar = _progress(len(grid), "acceptance", progress)
    records: List[Record] = []
    try:
        for n, k, (name, variant) in grid:
            options = {**generate_options, **variant}
            result = model.generate(held_out[:n], max_new_tokens, k=k, **options)
            records.append({"context": n, "k": k, "variant": name, "stop_reason": result.stop_reason,
                            **result.stats.to_dict()})
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    return records


def tradeoff_sweep(
    model: Model,
    ids: TokenIds,
    contexts: Sequence[int],
    rows: Sequence[int] = (1, 2, 3, 4, 5),
    repeats: int = 5,
    warmup: int = 1,
    progress: Optional[bool] = None,
) -> List[Record]:
    """Times a forward of L rows (L = 1: a plain step; L = k + 1: the verify of k drafts) after a
    context of N positions (``ids[:N]``, prefilled once and not timed), for every N and L.

    Each record has ``context``, ``rows``, ``k`` (= rows − 1), ``seconds`` (median of the repeats),
    ``seconds_min``, ``seconds_all`` and, when rows includes 1, ``ratio`` = seconds / seconds of the
    plain step at the same context (the r_k of the speed-up model).
    """
    held_out = _ids(ids)
    lengths = _check_contexts(contexts, len(held_out))
    sizes = [int(r) for r in rows]
    bar = _progress(len(lengths) * len(sizes), "verify cost", progress)
    records: List[Record] = []
    try:
        for n in lengths:
            block: List[Record] = []
            for size in sizes:
                seconds = model.time_forward(held_out[:n], size, repeats=repeats, warmup=warmup)
                block.append({"context": n, "rows": size, "k": size - 1, "seconds": float(np.median(seconds)),
                              "seconds_min": float(seconds.min()), "seconds_all": seconds.tolist()})
                if bar is not None:
                    bar.update()
            plain = [r["seconds"] for r in block if r["rows"] == 1]
            for r in block:
                r["ratio"] = r["seconds"] / plain[0] if plain else float("nan")
            records.extend(block)
    finally:
        if bar is not None:
            bar.close()
    return records


__all__ = ["acceptance_sweep", "tradeoff_sweep"]
