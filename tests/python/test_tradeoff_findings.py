"""bench/report/tradeoff_findings.py: the trade-off page's findings (the paired auto-vs-plain reading, the
k = 2 ceilings, the verify cost's compute floor) on made-up runs whose answer is known, as the page
words them (the macros of bench/report/templates/tradeoff-parts.md.j2)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def findings():
    sys.path.insert(0, str(ROOT / "bench" / "report"))
    spec = importlib.util.spec_from_file_location("tradeoff_findings", ROOT / "bench" / "report" / "tradeoff_findings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def words(findings):
    """The findings' wording: the macros of templates/tradeoff-parts.md.j2."""
    import results_page
    return results_page.ENVIRONMENT.get_template("tradeoff-parts.md.j2").module


def entries(plain, auto, aa):
    return [{"label": "plain", "run_tokens_per_second": plain}, {"label": "auto", "run_tokens_per_second": auto},
            {"label": "plain (A/A)", "run_tokens_per_second": aa}]


def test_ratios_are_against_the_mean_of_the_two_plain_runs(findings) -> None:
    plain = [100.0, 90.0, 110.0, 100.0, 95.0]
    aa = [102.0, 92.0, 104.0, 100.0, 97.0]
    auto = [99.0, 91.0, 100.0, 101.0, 96.0]
    out = findings.paired_auto_runs([{"context": 512, "e2e": entries(plain, auto, aa)}], None)
    assert len(out) == 1
    n, ratios, controls = out[0]
    assert n == 512
    assert ratios == pytest.approx([a / ((p + c) / 2) for p, a, c in zip(plain, auto, aa)])
    assert controls == pytest.approx([c / p for p, c in zip(plain, aa)])


def test_trained_model_runs_join_and_older_json_falls_back(findings) -> None:
    five = [100.0] * 5
    trained = {"context": 480, "e2e_merged": entries(five, five, five)}
    out = findings.paired_auto_runs([{"context": 512, "e2e": entries(five, five, five)}], trained)
    assert [n for n, _, _ in out] == [512, "trained 480"]
    # Fewer than 5 runs, unequal lengths or no lists (JSON written before the field existed): [].
    assert findings.paired_auto_runs([{"context": 512, "e2e": entries(five[:4], five[:4], five[:4])}], None) == []
    assert findings.paired_auto_runs([{"context": 512, "e2e": entries(five, five[:4], five)}], None) == []
    old = [{"label": "plain"}, {"label": "auto"}, {"label": "plain (A/A)"}]
    assert findings.paired_auto_runs([{"context": 512, "e2e": old}], None) == []


def test_a_run_whose_bandwidth_moved_is_flagged(findings, words) -> None:
    assert findings.bandwidth_change(30e9, 29e9) is None
    assert findings.bandwidth_change(30e9, 32.9e9) is None
    assert words.bandwidth_warning(None) == ""
    assert "+74%" in words.bandwidth_warning(findings.bandwidth_change(16.7e9, 29.06e9))
    assert "-13%" in words.bandwidth_warning(findings.bandwidth_change(32.3e9, 28.2e9))


def test_the_trained_timing_note_states_the_run_length(words) -> None:
    note = words.timing_note({"new_tokens": 128, "e2e_reps": 24, "points": [{}]})
    assert "runs of 128 tokens" in note and "24 per window" in note
    # JSON written before the run length was recorded gets no note rather than a guess.
    assert words.timing_note({"points": [{}]}) == ""


def test_memory_line_reports_the_huge_page_share(findings, words) -> None:
    points = [{"memory_after_cost_rounds": {"rss_mib": 1000.0, "anon_huge_mib": 250.0}}, {}]
    assert "1000 MiB resident, 250 MiB of it (25%)" in words.memory_line(findings.memory(points))
    assert findings.memory([{"context": 512}]) is None  # older JSON without the field
    assert findings.memory([{"memory_after_cost_rounds": {}}]) is None  # /proc unreadable


def test_the_carried_controller_is_read_from_its_own_runs(findings, words) -> None:
    plain = [100.0] * 5
    aa = [100.0, 98.0, 102.0, 100.0, 100.0]
    fresh = [97.0] * 5
    carried = [100.0, 99.5, 101.5, 100.5, 100.2]
    e2e = entries(plain, fresh, aa) + [{"label": findings.AUTO_CARRIED, "run_tokens_per_second": carried}]
    fresh = words.paired_reading(findings.paired_summary(findings.paired_auto_runs([{"context": 512, "e2e": e2e}], None)))
    carried_runs = findings.paired_auto_runs([{"context": 512, "e2e": e2e}], None, findings.AUTO_CARRIED)
    assert carried_runs[0][1] == pytest.approx([c / ((p + a) / 2) for p, c, a in zip(plain, carried, aa)])
    text = words.paired_reading(findings.paired_summary(carried_runs))
    # The median A/A deviation is 0; fresh's median is 0.97, carried's 1.005, each read from its own runs.
    assert "N=512: 0.970x (A/A noise 0.0%, 5 runs, range 0.960-0.980)" in fresh
    assert "N=512: 1.005x (A/A noise 0.0%, 5 runs" in text
    # JSON without carried runs: nothing to read.
    assert findings.paired_auto_runs([{"context": 512, "e2e": entries(plain, fresh, aa)}], None, findings.AUTO_CARRIED) == []


def test_speedup_ceiling_is_the_acceptance_over_a_free_verify_plus_the_drafts(findings) -> None:
    # The trained model as one run measured it: E[L] = 1.88 at k = 2 with a draft step of 0.378 plain steps.
    assert findings.speedup_ceiling(1.88, 2, 0.378) == pytest.approx(1.88 / 1.756)
    assert findings.speedup_ceiling(1.88, 2, 0.378) < 1.2
    assert findings.speedup_ceiling(3.0, 2, 0.0) == 3.0  # free drafts: the acceptance length itself


def test_k2_on_the_bench_model_reads_the_contexts_nearest_eight_k_at_the_bytes_bound(findings, words) -> None:
    def point(n, r_bound, speedup):
        return {"context": n, "index_topk": 512, "t1_path": "gather",
                "predicted": [{"k": 2, "c": 0.2, "draft_cost": 0.5, "expected_length": 2.0}],
                "paths": {"gather": [{"rows": 3, "r_bound": r_bound}], "mask": [], "dense": []},
                "e2e": [{"label": "k=2", "speedup": speedup}]}
    points = [point(512, 1.4, 0.9), point(2048, 1.5, 0.8), point(8192, 1.0, 0.7), point(32768, 1.6, 0.6)]
    line = words.bench_model_k2(findings.bench_model_k2(points, 512))
    # 2048 and 8192 are equally far (a factor of 2) from 8 x 512 = 4096; 512 (= K) is not sparse.
    assert "N=2048: k=2 measured 0.80x" in line and "2.00 / (1.50 + 0.50) = 1.00x" in line
    assert "N=8192: k=2 measured 0.70x" in line and "2.00 / (1.00 + 0.50) = 1.33x" in line
    assert "N=512" not in line and "N=32768" not in line
    assert "gives at most" not in line  # 1.33x at N=8192
    line = words.bench_model_k2(findings.bench_model_k2([point(2048, 1.5, 0.8)], 512))
    assert "gives at most 1.00x" in line
    assert findings.bench_model_k2([point(512, 1.4, 0.9)], 512) is None


def test_compute_floor_counts_points_whose_attention_and_indexer_work_exceeds_the_slack(findings, words) -> None:
    config = {"num_attention_heads": 2, "index_topk": 10, "num_hidden_layers": 1, "kv_lora_rank": 4,
              "qk_rope_head_dim": 2, "index_n_heads": 1, "index_head_dim": 5, "indexer_types": ["full"]}
    # Per row: attention 2·10·(2·4 + 2) = 200 MACs, indexer N·5; at 1000 MAC/s.
    data = {"bench_model": {"config": config}, "mac_rate": {"macs_per_second": 1000.0}}

    def point(n, t1):
        rows = [{"rows": L, "r_bound": 1.0 + 0.1 * (L - 1)} for L in range(2, 9)]
        return {"context": n, "index_topk": 10, "t1_seconds": t1, "paths": {"gather": rows}}
    # N=20: 0.3 s per row. Slack 0.1·(1 + 0.1k)·30 = 3 + 0.3k; k·0.3 exceeds it from k = 12 on: none of 1-7.
    # N=200: 1.2 s per row against slack 0.1·(1 + 0.1k)·10 = 1 + 0.1k: every k fails.
    line = words.compute_floor(findings.compute_floor(data, [point(20, 30.0), point(200, 10.0)]))
    assert "N=20: 300.00 ms, N=200: 1200.00 ms per row" in line
    assert "at 7 of 14 points" in line
    assert "N=200 k=1" in line and "N=200 k=7" in line and "N=20 k=" not in line
    assert findings.compute_floor({}, [point(20, 30.0)]) is None
