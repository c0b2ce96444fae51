"""The decode-bandwidth part of the real-dimension report (real_scale_report.py): one row's step on
the cut model against the read bandwidth measured in the same run, and what bounds it. The text is
templates/real-scale-bandwidth.md.j2."""
from __future__ import annotations

from statistics import median


def moe_stream(layers_json: dict, costs, n: int, bw: float) -> dict | None:
    """How fast the MoE's FP8 expert weights stream in a one-row step of the cut model (measured):
    the experts a row reads, their bytes, seconds and rate; None without an MoE layer measured."""
    kind = next((k for k in ("moe+shared", "moe+full") if costs.kind_cost(n, 1, k, scaled=False)), None)
    if kind is None or not layers_json.get("expert_bytes"):
        return None
    seconds = costs.kind_cost(n, 1, kind, scaled=False)["components"]["moe_mlp"]
    experts = costs.per_token + layers_json["config"].get("n_shared_experts", 1)
    nbytes = experts * layers_json["expert_bytes"]
    return {"n": n, "experts": experts, "bytes": nbytes, "seconds": seconds, "rate": nbytes / seconds,
            "ratio": nbytes / seconds / bw}


def paired_ratios(costs, n: int, cut_bytes: int) -> list[float]:
    """Each repetition's one-row forward of the cut model at context n, as weight bytes per second over
    the read bandwidth measured just before it; empty when the run did not pair them."""
    bws = costs.point(n).get("read_bandwidth_by_rep") or []
    paired = costs.row(n, 1).get("paired", [])
    if not bws or len(bws) != len(paired):
        return []
    return [cut_bytes / p["whole"] / bw for p, bw in zip(paired, bws)]


def bandwidth(layers_json: dict, costs, contexts: list[int], cache_macs) -> dict | None:
    """Decode bandwidth measured on the cut model: each repetition's whole forward of one row (its
    weight bytes per second) over the read bandwidth measured just before that repetition, per context
    and over all of them; then the same split by the memory's speed, the step split into its parts and
    the bounds the machine's ceilings set. cache_macs(n): the multiply-adds of one row's compute over
    the cache (the attention over the selected keys and the indexer's scores) through the cut model at
    context n. None when the run did not pair its repetitions with bandwidth measurements."""
    cut_bytes = sum(l["row_weight_bytes"] for l in layers_json["layers"]) + layers_json["head_bytes"]
    rows, ratios_all = [], []
    for n in contexts:
        ratios = paired_ratios(costs, n, cut_bytes)
        if not ratios:
            continue
        bws = costs.point(n)["read_bandwidth_by_rep"]
        rates = [cut_bytes / p["whole"] for p in costs.row(n, 1)["paired"]]
        ratios_all += ratios
        rows.append({"n": n, "rate": median(rates), "bw_low": min(bws), "bw_high": max(bws), "ratio": median(ratios),
                     "low": min(ratios), "high": max(ratios)})
    if not rows:
        return None
    return {"cut_bytes": cut_bytes, "rows": rows, "overall": median(ratios_all), "count": len(ratios_all),
            "by_speed": memory_speed(costs, contexts, cut_bytes), "split": step_split(costs, contexts, cut_bytes),
            "ceilings": ceilings(layers_json, costs, contexts, cut_bytes, cache_macs)}


def read_bandwidths(costs, contexts: list[int]) -> list[float]:
    """Every repetition's read bandwidth, at all contexts."""
    return [b for n in contexts for b in (costs.point(n).get("read_bandwidth_by_rep") or [])]


def speed_middle(bws: list[float]) -> float:
    """The read bandwidth that splits a run's repetitions into the memory's slower and faster speed:
    the middle of the run's range (this machine's memory alternates between two speeds)."""
    return (min(bws) + max(bws)) / 2


def memory_speed(costs, contexts: list[int], cut_bytes: int) -> dict | None:
    """The paired ratios split by the memory's speed in their repetition: below and at or above
    speed_middle; per context each group's (count, median bandwidth, median ratio), and pooled."""
    bws = read_bandwidths(costs, contexts)
    if not bws:
        return None
    middle = speed_middle(bws)
    rows, pooled = [], {False: [], True: []}
    for n in contexts:
        ratios = paired_ratios(costs, n, cut_bytes)
        if not ratios:
            continue
        by_speed = {False: [], True: []}
        for ratio, bw in zip(ratios, costs.point(n)["read_bandwidth_by_rep"]):
            by_speed[bw >= middle].append((ratio, bw))
            pooled[bw >= middle].append(ratio)
        rows.append((n, [(len(g), median(b for _, b in g), median(r for r, _ in g)) if g else None
                         for g in (by_speed[False], by_speed[True])]))
    return {"middle": middle, "rows": rows,
            "pooled": [(fast, median(pooled[fast]), len(pooled[fast])) for fast in (False, True) if pooled[fast]]}


# The parts of a step that stream weights, and those that compute over the cache.
STREAMING_PARTS = ("attn_proj", "moe_mlp")
COMPUTE_PARTS = ("attention", "indexer", "topk", "norms")


def step_split(costs, contexts: list[int], cut_bytes: int) -> list[dict]:
    """Where one row's step on the cut model goes: the weight-streaming parts (the projections, the
    MLP and experts, the head) against the parts that compute over the cache, per context with the
    run's median read bandwidth there."""
    rows = []
    for n in contexts:
        point, row = costs.point(n), costs.row(n, 1)
        bws = point.get("read_bandwidth_by_rep")
        if not bws:
            continue
        parts = lambda names: sum(l["components"].get(c, 0.0) for l in row["layers"] for c in names)  # noqa: E731
        rows.append({"n": n, "bw": median(bws), "streaming": parts(STREAMING_PARTS) + row["head_seconds"],
                     "compute": parts(COMPUTE_PARTS), "attention": parts(("attention",)),
                     "indexer": parts(("indexer", "topk"))})
    return rows


def ceilings(layers_json: dict, costs, contexts: list[int], cut_bytes: int, cache_macs) -> dict | None:
    """The most the decode ratio could reach on this machine, from the ceilings measured in the same
    run (bench/compute_ceilings.h): the weights streamed at the read bandwidth, or at the one-row FP8
    GEMV's compute ceiling where that is slower, plus the compute over the cache at the row kernels'
    multiply-add rate, or at the cores' multiply-add peak; per context, and for the repetitions in
    which the memory ran at its faster speed (there the FP8 weights can arrive faster than the
    one-row GEMV widens and multiplies them)."""
    measured_ceilings = [layers_json[k] for k in ("compute_ceilings_start", "compute_ceilings_end") if k in layers_json]
    if not measured_ceilings:
        return None
    gemv = max(c["fp8_gemv_weights_per_second"] for c in measured_ceilings)
    kernels = max(c["f32_row_kernel_macs_per_second"] for c in measured_ceilings)
    peak = max(c["fma_macs_per_second"] for c in measured_ceilings)
    # The FP8 weights (one byte each) stream no faster than the read bandwidth or the FP8 GEMV's
    # ceiling, whichever is slower; the bf16 head at the read bandwidth (its GEMV widens by a shift,
    # with a ceiling well above it).
    head = layers_json["head_bytes"]
    fp8 = cut_bytes - head
    all_bws = read_bandwidths(costs, contexts) or [1.0]
    middle = speed_middle(all_bws)

    def bound_with_kernels(bw: float, macs: float) -> tuple[float, float]:
        """The step's streaming time and the ratio these kernels allow at read bandwidth bw."""
        streaming = max(fp8 / bw, fp8 / gemv) + head / bw
        return streaming, (cut_bytes / bw) / (streaming + macs / kernels)

    rows, fast_rows = [], []
    for n in contexts:
        bws = costs.point(n).get("read_bandwidth_by_rep")
        if not bws:
            continue
        at_bandwidth = cut_bytes / median(bws)
        macs = cache_macs(n)
        streaming, with_kernels = bound_with_kernels(median(bws), macs)
        measured = paired_ratios(costs, n, cut_bytes)
        rows.append({"n": n, "at_bandwidth": at_bandwidth, "streaming": streaming, "macs": macs, "bound": with_kernels,
                     "at_peak": at_bandwidth / (at_bandwidth + macs / peak) if peak > 0 else float("nan"),
                     "measured": median(measured) if measured else None})
        fast = [(r, b) for r, b in zip(measured, bws) if b >= middle]
        if fast:
            fast_bw = median(b for _, b in fast)
            fast_streaming, fast_bound = bound_with_kernels(fast_bw, macs)
            fast_rows.append({"n": n, "count": len(fast), "bw": fast_bw, "streaming": fast_streaming,
                              "bound": fast_bound, "measured": median(r for r, _ in fast)})
    if not rows:
        return None
    return {"gemv": gemv, "kernels": kernels, "peak": peak, "fp8": fp8, "threads": measured_ceilings[0]["threads"],
            "median_bw": median(all_bws), "middle": middle, "rows": rows, "fast_rows": fast_rows}
