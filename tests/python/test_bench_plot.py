"""mtpspec.bench sweeps and mtpspec.plot figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import mtpspec
from mtpspec import bench, plot

HELD_OUT = np.random.default_rng(0).integers(2, 256, size=100)


@pytest.fixture(scope="module")
def acceptance(model: mtpspec.Model) -> list:
    return bench.acceptance_sweep(model, HELD_OUT, contexts=[8, 32, 64], ks=[1, 3], max_new_tokens=24,
                                  variants={"post": {"mtp_hidden": "post"}, "pre": {"mtp_hidden": "pre"}},
                                  stop_at_eos=False, progress=False)


@pytest.fixture(scope="module")
def tradeoff(model: mtpspec.Model) -> list:
    return bench.tradeoff_sweep(model, HELD_OUT, contexts=[16, 64], rows=[1, 2, 4], repeats=2, progress=False)


def test_acceptance_sweep_records(model: mtpspec.Model, acceptance: list) -> None:
    assert len(acceptance) == 3 * 2 * 2
    first = acceptance[0]
    assert (first["context"], first["k"], first["variant"]) == (8, 1, "post")
    for r in acceptance:
        assert r["prompt_tokens"] == r["context"] and r["generated_tokens"] == 24
        assert len(r["per_position_acceptance"]) == r["k"]
        assert sum(r["accepted_histogram"]) == r["num_drafts"]
    # The records are the same runs generate() does.
    again = model.generate(HELD_OUT[:32], 24, k=3, mtp_hidden="pre", stop_at_eos=False).stats.to_dict()
    match = [r for r in acceptance if (r["context"], r["k"], r["variant"]) == (32, 3, "pre")][0]
    assert match["num_accepted_tokens"] == again["num_accepted_tokens"]
    with pytest.raises(ValueError, match="context length 500"):
        bench.acceptance_sweep(model, HELD_OUT, contexts=[500], progress=False)


def test_tradeoff_sweep_records(tradeoff: list) -> None:
    assert [(r["context"], r["rows"]) for r in tradeoff] == [(16, 1), (16, 2), (16, 4), (64, 1), (64, 2), (64, 4)]
    for r in tradeoff:
        assert r["k"] == r["rows"] - 1 and r["seconds"] > 0 and len(r["seconds_all"]) == 2
        if r["rows"] == 1:
            assert r["ratio"] == 1.0
        assert r["ratio"] > 0


def test_progress_bar(model: mtpspec.Model, capsys: pytest.CaptureFixture) -> None:
    bench.tradeoff_sweep(model, HELD_OUT, contexts=[8], rows=[1, 2], repeats=1, progress=True)
    assert "verify cost" in capsys.readouterr().err


def test_plots(acceptance: list, tradeoff: list, model: mtpspec.Model, tmp_path: Path) -> None:
    stats = model.generate(HELD_OUT[:20], 30, k=3, stop_at_eos=False).stats
    figures = {
        "acceptance": plot.acceptance_vs_context(acceptance),
        "per_position": plot.per_position(stats),
        "per_position_pair": plot.per_position([("a", stats), ("b", acceptance[-1])], conditional=True),
        "per_position_context": plot.per_position_vs_context(acceptance, k=3),
        "ratio": plot.ratio_vs_context(tradeoff),
        "heatmap": plot.heatmap(acceptance, variant="pre"),
    }
    for name, fig in figures.items():
        assert isinstance(fig, Figure), name
        out = tmp_path / f"{name}.png"
        fig.savefig(out)
        assert out.stat().st_size > 1000, name
    with pytest.raises(ValueError, match="no records"):
        plot.heatmap([])
