#!/usr/bin/env python3
"""The index-keys section of docs/results/numerics.md (bench/report/numerics_report.py): the DSA
indexer with its keys in bf16 or fp8 against f32.

Reads, from numerics_report.py's --results (build/results), for each variant V in bf16 and fp8 that is there:
  index_keys_V_trained.json, index_keys_V_glm_a.json, index_keys_V_dsv32_b.json
      numerics_bench --variant V-index-keys (accuracy, selection overlap, MTP acceptance)
  index_keys_<cut>_f32.json and index_keys_<cut>_V.json for the cuts glm7 and dsv4
      real_scale_bench --max-rows 1 --index-keys f32|V (the indexer's time, the projection)
  index_keys_<cut>_side_by_side.json
      real_scale_bench --decode-side-by-side f32,bf16,fp8 (whole decode steps, alternating)

The text is templates/numerics-index-keys.md.j2.
"""

from __future__ import annotations

from statistics import median

from real_scale_report import LayerCosts, full_schedule
from results_page import render, side_by_side, spread

VARIANTS = ["bf16", "fp8"]
CUTS = [("glm7", "GLM-5.2"), ("dsv4", "DeepSeek-V3.2")]
ACCURACY = [("trained", "bundled trained model (models/glm-tiny-mtp), held-out text"),
            ("glm_a", "golden glm_a (random weights), random ids"),
            ("dsv32_b", "golden dsv32_b (random weights), random ids")]

def cut_bytes(run: dict) -> int:
    return sum(l["row_weight_bytes"] for l in run["layers"]) + run["head_bytes"]


def indexer_ms(costs: LayerCosts, n: int) -> float:
    return 1e3 * sum(l["components"].get("indexer", 0.0) + l["components"].get("topk", 0.0)
                     for l in costs.row(n, 1)["layers"])


def whole_ms(costs: LayerCosts, n: int) -> float:
    return 1e3 * median(p["whole"] for p in costs.row(n, 1)["paired"])


class CutRuns:
    """The f32 run of one cut and the runs with reduced-precision keys."""

    def __init__(self, runs: dict[str, dict]):
        self.runs = runs
        self.costs = {keys: LayerCosts(run) for keys, run in runs.items()}
        self.f32 = self.costs["f32"]
        self.variants = [v for v in VARIANTS if v in runs]
        self.contexts = [n for n in self.f32.contexts if all(n in c.contexts for c in self.costs.values())]
        self.kinds = full_schedule(self.f32.cfg)
        self.full_layers = sum(k.endswith("+full") for k in self.kinds)
        self.cut_full = sum(l["kind"].endswith("+full") for l in runs["f32"]["layers"])
        self.step_bytes = cut_bytes(runs["f32"])

    def saved_ms(self, keys: str, n: int) -> float:
        """Indexer + top-k milliseconds the keys save over the cut's layers with an indexer."""
        return indexer_ms(self.f32, n) - indexer_ms(self.costs[keys], n)

    def composed_ratios(self, keys: str, n: int) -> list[float]:
        """Each f32 repetition's step less the saving, as weight bytes per second over the read
        bandwidth measured just before it (keys "f32": the measured ratios)."""
        saved = 0.0 if keys == "f32" else self.saved_ms(keys, n) / 1e3
        bws = self.f32.point(n).get("read_bandwidth_by_rep") or []
        paired = self.f32.row(n, 1).get("paired", [])
        return [self.step_bytes / (p["whole"] - saved) / bw for p, bw in zip(paired, bws)]

    def projected_ms(self, keys: str, n: int) -> float:
        full = 1e3 * self.f32.project(n, 1, self.kinds)["seconds"]
        if keys == "f32":
            return full
        return full - self.saved_ms(keys, n) / self.cut_full * self.full_layers


def speed_context(name: str, cut: CutRuns, side_by_side_run: dict | None) -> dict:
    """The indexer's time with each key storage (measured in each run), and the step without the time
    reduced-precision keys save: the f32 run's measured steps less the saving (composed; the runs are
    minutes apart and the memory's speed moves between them, so their whole steps are not compared);
    and the side-by-side run of the cut's whole steps, when there is one."""
    rows = []
    ratios = {keys: [] for keys in ["f32"] + cut.variants}
    for n in cut.contexts:
        step = whole_ms(cut.f32, n)
        per = {keys: cut.composed_ratios(keys, n) for keys in ratios}
        for keys, values in per.items():
            ratios[keys] += values
        rows.append({"n": n, "step": step, "indexer": {k: indexer_ms(c, n) for k, c in cut.costs.items()},
                     "composed": {v: step - cut.saved_ms(v, n) for v in cut.variants},
                     "ratio": {keys: median(values) for keys, values in per.items()},
                     "projected": {keys: cut.projected_ms(keys, n) for keys in ratios}})
    bandwidth = []
    for keys, c in cut.costs.items():
        bws = [b for n in cut.contexts for b in c.point(n).get("read_bandwidth_by_rep", [])]
        if bws:
            bandwidth.append((keys, spread(bws)))
    storages = [s for s in ["f32"] + VARIANTS if side_by_side_run and s in side_by_side_run["contexts"][0]["storages"]]
    return {"name": name, "layers": len(cut.runs["f32"]["layers"]), "cut_full": cut.cut_full,
            "step_bytes": cut.step_bytes, "release_layers": len(cut.kinds), "full_layers": cut.full_layers,
            "variants": cut.variants, "rows": rows, "bandwidth": bandwidth,
            "ratios": [(keys, spread(values)) for keys, values in ratios.items() if values],
            "side_by_side": side_by_side(side_by_side_run, storages) if side_by_side_run else None}


def memory_rows(runs: list[tuple[str, dict]]) -> list[dict]:
    """Cache bytes per token of each full release with f32, bf16 and fp8 indexer keys."""
    rows = []
    for name, run in runs:
        cfg = run["config"]
        kinds = full_schedule(cfg)
        full = sum(k.endswith("+full") for k in kinds)
        base = len(kinds) * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 4
        d = cfg["index_head_dim"]
        rows.append({"name": name, "layers": len(kinds), "full": full, "f32": base + full * d * 4,
                     "bf16": base + full * d * 2, "fp8": base + full * (d + 4)})
    return rows


def summary(speed: dict[str, CutRuns], side_by_side_runs: dict[str, dict]) -> list[dict]:
    """Per key storage and cut: the indexer's measured speedups, the full step's projected ones and the
    cut's whole step measured side by side, per context."""
    out = []
    for v in VARIANTS:
        for name, cut in speed.items():
            if v not in cut.variants:
                continue
            measured = []
            if name in side_by_side_runs and v in side_by_side_runs[name]["contexts"][0]["storages"]:
                for point in side_by_side_runs[name]["contexts"]:
                    st = point["storages"]
                    measured.append((median(a / b for a, b in zip(st["f32"]["whole"], st[v]["whole"])), point["context"]))
            out.append({"storage": v, "name": name, "measured": measured,
                        "speedups": [indexer_ms(cut.f32, n) / indexer_ms(cut.costs[v], n) for n in cut.contexts],
                        "projected": [(cut.projected_ms("f32", n) / cut.projected_ms(v, n), n) for n in cut.contexts]})
    return out


def section(load) -> str:
    """The index-keys section of the numerics page, from the runs `load` finds (empty without any)."""
    accuracy = {(v, key): r for v in VARIANTS for key, _ in ACCURACY
                if (r := load(f"index_keys_{v}_{key}.json")) is not None}
    speed, side_by_side_runs = {}, {}
    for cut, name in CUTS:
        runs = {keys: r for keys in ["f32"] + VARIANTS if (r := load(f"index_keys_{cut}_{keys}.json")) is not None}
        if "f32" in runs and len(runs) > 1:
            speed[name] = CutRuns(runs)
        if (run := load(f"index_keys_{cut}_side_by_side.json")) is not None:
            side_by_side_runs[name] = run
    if not speed and not accuracy:
        return ""
    first = next(iter(speed.values())).runs["f32"] if speed else next(iter(accuracy.values()))
    return render("numerics-index-keys.md.j2", run=first["run"], variants=VARIANTS, models=ACCURACY,
                  accuracy=accuracy, summary=summary(speed, side_by_side_runs),
                  cuts=[speed_context(name, cut, side_by_side_runs.get(name)) for name, cut in speed.items()],
                  memory=memory_rows([(name, cut.runs["f32"]) for name, cut in speed.items()]))
