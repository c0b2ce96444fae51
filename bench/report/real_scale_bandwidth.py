"""The decode-bandwidth part of the real-dimension report (real_scale_report.py): one row's step on
the cut model against the read bandwidth measured in the same run, and what bounds it."""
from __future__ import annotations

from statistics import median


def moe_stream_line(layers_json: dict, costs, n: int, bw: float) -> str:
    """How fast the MoE's FP8 expert weights stream in a one-row step of the cut model (measured)."""
    kind = next((k for k in ("moe+shared", "moe+full") if costs.kind_cost(n, 1, k, scaled=False)), None)
    if kind is None or not layers_json.get("expert_bytes"):
        return "- (no MoE layer measured)"
    seconds = costs.kind_cost(n, 1, kind, scaled=False)["components"]["moe_mlp"]
    experts = costs.per_token + layers_json["config"].get("n_shared_experts", 1)
    rate = experts * layers_json["expert_bytes"] / seconds
    return (f"- Measured, one row through an MoE layer of the cut model at N = {n}: its {experts} experts' FP8 "
            f"weights ({experts * layers_json['expert_bytes'] / 1e6:.0f} MB) take {seconds * 1e3:.1f} ms, "
            f"{rate / 1e9:.1f} GB/s or {rate / bw:.2f} of the read bandwidth (each FP8 weight is widened to f32 "
            "in registers and multiplied in f32).")


def paired_ratios(costs, n: int, cut_bytes: int) -> list[float]:
    """Each repetition's one-row forward of the cut model at context n, as weight bytes per second over
    the read bandwidth measured just before it; empty when the run did not pair them."""
    bws = costs.point(n).get("read_bandwidth_by_rep") or []
    paired = costs.row(n, 1).get("paired", [])
    if not bws or len(bws) != len(paired):
        return []
    return [cut_bytes / p["whole"] / bw for p, bw in zip(paired, bws)]


def bandwidth_lines(layers_json: dict, costs, contexts: list[int], cache_macs) -> list[str]:
    """Decode bandwidth measured on the cut model: each repetition's whole forward of one row (its
    weight bytes per second) over the read bandwidth measured just before that repetition.
    cache_macs(n): the multiply-adds of one row's compute over the cache (the attention over the
    selected keys and the indexer's scores) through the cut model at context n."""
    cut_bytes = sum(l["row_weight_bytes"] for l in layers_json["layers"]) + layers_json["head_bytes"]
    rows, ratios_all = [], []
    for n in contexts:
        ratios = paired_ratios(costs, n, cut_bytes)
        if not ratios:
            continue
        bws = costs.point(n)["read_bandwidth_by_rep"]
        rates = [cut_bytes / p["whole"] for p in costs.row(n, 1)["paired"]]
        ratios_all += ratios
        rows.append(f"| {n} | {cut_bytes / 1e9:.2f} | {median(rates) / 1e9:.1f} | {min(bws) / 1e9:.1f}-{max(bws) / 1e9:.1f} | "
                    f"{median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} |")
    if not rows:
        return []
    overall = median(ratios_all)
    verdict = "MET" if overall >= 0.75 else "NOT MET"
    return ["### Decode bandwidth at the real dimensions in FP8 (measured on the cut model, same run)", "",
            "Each repetition measures the read bandwidth (StreamSum over 512 MiB) and then decodes one row through "
            "the whole cut model (its FP8 layers and the bf16 head); the ratio is that forward's weight bytes per "
            "second over the bandwidth measured next to it, so a minute in which the machine's memory runs faster or "
            "slower moves both sides. Attention over the selected keys is compute and is part of the step.", "",
            "| N | GB per step | GB/s (median) | read bandwidth, GB/s | ÷ read bandwidth (median) | range |",
            "|---|---|---|---|---|---|"] + rows + [
            "", f"**Goal (decode weight bytes per second at least 0.75 of the read bandwidth): {verdict}** — "
            f"median {overall:.2f} over {len(ratios_all)} paired repetitions at all contexts.", ""] + \
        memory_speed_lines(costs, contexts, cut_bytes) + \
        step_split_lines(layers_json, costs, contexts, cut_bytes) + \
        ceiling_lines(layers_json, costs, contexts, cut_bytes, cache_macs)


def read_bandwidths(costs, contexts: list[int]) -> list[float]:
    """Every repetition's read bandwidth, at all contexts."""
    return [b for n in contexts for b in (costs.point(n).get("read_bandwidth_by_rep") or [])]


def speed_middle(bws: list[float]) -> float:
    """The read bandwidth that splits a run's repetitions into the memory's slower and faster speed:
    the middle of the run's range (this machine's memory alternates between two speeds)."""
    return (min(bws) + max(bws)) / 2


def memory_speed_lines(costs, contexts: list[int], cut_bytes: int) -> list[str]:
    """The paired ratios split by the memory's speed in their repetition: below and at or above
    speed_middle."""
    bws = read_bandwidths(costs, contexts)
    if not bws:
        return []
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
        cells = []
        for fast in (False, True):
            group = by_speed[fast]
            cells += ([str(len(group)), f"{median(b for _, b in group) / 1e9:.1f}", f"{median(r for r, _ in group):.2f}"]
                      if group else ["0", "-", "-"])
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    summary = "; ".join(f"{'at or above' if fast else 'below'} {middle / 1e9:.0f} GB/s: median {median(pooled[fast]):.2f} "
                        f"over {len(pooled[fast])} repetitions" for fast in (False, True) if pooled[fast])
    return ["The same repetitions split by the memory's speed in each: below the middle of the run's range of read "
            f"bandwidths ({middle / 1e9:.0f} GB/s) and at or above it. The machine's memory alternates between the two "
            "for minutes at a time; at the faster speed a step's compute between weight reads (the attention over the "
            "selected keys, the indexer, each FP8 weight widened and multiplied in f32) takes a larger share of it.", "",
            "| N | repetitions, slower | their read bandwidth, GB/s | ÷ read bandwidth | repetitions, faster | "
            "their read bandwidth, GB/s | ÷ read bandwidth |", "|---|---|---|---|---|---|---|"] + rows + [
            "", f"By the memory's speed, all contexts: {summary}.", ""]


# The parts of a step that stream weights, and those that compute over the cache.
STREAMING_PARTS = ("attn_proj", "moe_mlp")
COMPUTE_PARTS = ("attention", "indexer", "topk", "norms")


def step_split_lines(layers_json: dict, costs, contexts: list[int], cut_bytes: int) -> list[str]:
    """Where one row's step on the cut model goes: the weight-streaming parts (the projections, the
    MLP and experts, the head) against the parts that compute over the cache, with the ratio the
    streaming parts reach alone."""
    rows = []
    for n in contexts:
        point, row = costs.point(n), costs.row(n, 1)
        bws = point.get("read_bandwidth_by_rep")
        if not bws:
            continue
        bw = median(bws)
        streaming = sum(l["components"].get(c, 0.0) for l in row["layers"] for c in STREAMING_PARTS) + row["head_seconds"]
        compute = sum(l["components"].get(c, 0.0) for l in row["layers"] for c in COMPUTE_PARTS)
        attention = sum(l["components"].get("attention", 0.0) for l in row["layers"])
        indexer = sum(l["components"].get("indexer", 0.0) + l["components"].get("topk", 0.0) for l in row["layers"])
        total = streaming + compute
        rows.append(f"| {n} | {1e3 * streaming:.1f} | {cut_bytes / streaming / 1e9:.1f} | {cut_bytes / streaming / bw:.2f} | "
                    f"{1e3 * attention:.1f} | {1e3 * indexer:.1f} | {compute / total:.2f} | {cut_bytes / total / bw:.2f} |")
    if not rows:
        return []
    return ["What bounds it: one row's step on the cut model split into the parts that stream weights (the "
            "attention projections, the MLP and experts, the head) and the parts that compute over the cache "
            "(the attention over the selected keys, the indexer's scores and top-k, the norms), medians of the "
            "repetitions, against the median read bandwidth of the run. The weight bytes are nearly all read by "
            "the streaming parts (the indexer's own matrices, under 1% of them, are counted with the indexer).", "",
            "| N | streaming parts (ms) | their GB/s | ÷ read bandwidth | attention (ms) | indexer + top-k (ms) | "
            "compute share of the step | whole step ÷ read bandwidth |", "|---|---|---|---|---|---|---|---|"] + rows + [""]


def ceiling_lines(layers_json: dict, costs, contexts: list[int], cut_bytes: int, cache_macs) -> list[str]:
    """The most the decode ratio could reach on this machine, from the ceilings measured in the same
    run (bench/compute_ceilings.h): the weights streamed at the read bandwidth, or at the one-row FP8
    GEMV's compute ceiling where that is slower, plus the compute over the cache at the row kernels'
    multiply-add rate, or at the cores' multiply-add peak."""
    ceilings = [layers_json[k] for k in ("compute_ceilings_start", "compute_ceilings_end") if k in layers_json]
    if not ceilings:
        return []
    gemv = max(c["fp8_gemv_weights_per_second"] for c in ceilings)
    kernels = max(c["f32_row_kernel_macs_per_second"] for c in ceilings)
    peak = max(c["fma_macs_per_second"] for c in ceilings)
    # The FP8 weights (one byte each) stream no faster than the read bandwidth or the FP8 GEMV's
    # ceiling, whichever is slower; the bf16 head at the read bandwidth (its GEMV widens by a shift,
    # with a ceiling well above it).
    head = layers_json["head_bytes"]
    fp8 = cut_bytes - head
    rows, fast_rows = [], []
    all_bws = read_bandwidths(costs, contexts) or [1.0]
    middle = speed_middle(all_bws)

    def bound_with_kernels(bw: float, macs: float) -> tuple[float, float]:
        """The step's streaming time and the ratio these kernels allow at read bandwidth bw."""
        streaming = max(fp8 / bw, fp8 / gemv) + head / bw
        return streaming, (cut_bytes / bw) / (streaming + macs / kernels)

    for n in contexts:
        bws = costs.point(n).get("read_bandwidth_by_rep")
        if not bws:
            continue
        bw = median(bws)
        at_bandwidth = cut_bytes / bw
        macs = cache_macs(n)
        streaming, with_kernels = bound_with_kernels(bw, macs)
        at_peak = at_bandwidth / (at_bandwidth + macs / peak) if peak > 0 else float("nan")
        measured = paired_ratios(costs, n, cut_bytes)
        measured_text = f"{median(measured):.2f}" if measured else "—"
        rows.append(f"| {n} | {1e3 * at_bandwidth:.1f} | {1e3 * streaming:.1f} | {macs / 1e9:.2f} | "
                    f"{1e3 * macs / kernels:.1f} | {1e3 * macs / peak:.1f} | {with_kernels:.2f} | {at_peak:.2f} | "
                    f"{measured_text} |")
        fast = [(r, b) for r, b in zip(measured, bws) if b >= middle]
        if fast:
            fast_bw = median(b for _, b in fast)
            fast_streaming, fast_bound = bound_with_kernels(fast_bw, macs)
            fast_rows.append(f"| {n} | {len(fast)} | {fast_bw / 1e9:.1f} | {1e3 * fp8 / fast_bw:.1f} | "
                             f"{1e3 * fp8 / gemv:.1f} | {1e3 * fast_streaming:.1f} | {fast_bound:.2f} | "
                             f"{median(r for r, _ in fast):.2f} |")
    if not rows:
        return []
    c0 = ceilings[0]
    return ["What the ratio could reach on this machine: the same run measured, with every thread on data "
            "of its own in its caches (`bench/compute_ceilings.h`, at the run's start and end, the better of "
            f"the two), the one-row FP8 GEMV's ceiling ({gemv / 1e9:.1f} G weights/s on {c0['threads']} threads, "
            f"{gemv / median(all_bws):.2f} of the run's median read bandwidth), "
            f"the row kernels' multiply-add rate ({kernels / 1e9:.0f} G/s: the score kernel of the attention and "
            f"of the indexer) and the cores' f32 multiply-add peak ({peak / 1e9:.0f} G/s, 512-bit multiply-adds "
            "on registers alone). A layer's compute over the cache (the attention over the selected keys and "
            "the indexer's scores) needs its projections' output and feeds the next projections, so it and "
            "the weight streaming run one after the other; overlapping them would need the weights read ahead "
            "into the last-level cache, which holds a few percent of a layer's weights. With these kernels a "
            "step therefore takes no less than its FP8 weights at the read bandwidth or at the GEMV's ceiling, "
            "whichever is slower, and its bf16 head at the read bandwidth, plus its compute over the cache "
            "(multiply-adds counted from the release's shapes) at the row kernels' rate; done in f32 by any "
            "code, no less than all its weights at the read bandwidth plus that compute at the cores' peak. "
            "Softmax, top-k and norms, and the attention's products with kv_b_proj, are left out, so each bound "
            "is an upper bound.", "",
            "| N | weights at the read bandwidth (ms) | weights, with the FP8 GEMV's ceiling (ms) | compute over the cache "
            "(G multiply-adds) | at the row kernels' rate (ms) | at the peak (ms) | bound, these kernels | "
            "bound, f32 at the peak | measured |", "|---|---|---|---|---|---|---|---|---|"] + rows + [
            ""] + \
        fast_speed_lines(fast_rows, gemv, middle) + [
            "Where the bound is the compute over the cache, bf16 or fp8 indexer keys (`--index-keys bf16|fp8`) "
            "do the indexer's share in bf16 pair products at 32 multiply-adds per instruction; what that saves on "
            "these cuts, and what it changes in the selection, is in [numerics.md](numerics.md).", ""]


def fast_speed_lines(fast_rows: list[str], gemv: float, middle: float) -> list[str]:
    """The same bound for the repetitions in which the memory ran at its faster speed: there the FP8
    weights can arrive faster than the one-row GEMV widens and multiplies them."""
    if not fast_rows:
        return []
    return [f"The same bound, these kernels, for the repetitions in which the memory ran at its faster speed (read "
            f"bandwidth at or above {middle / 1e9:.0f} GB/s), at their median read bandwidth. There the FP8 weights "
            f"arrive faster than the one-row GEMV's ceiling ({gemv / 1e9:.1f} G weights/s) takes them, so the "
            "GEMV's compute, not the memory, sets the streaming time.", "",
            "| N | repetitions | their read bandwidth, GB/s | FP8 weights at that bandwidth (ms) | at the GEMV's ceiling "
            "(ms) | streaming, with the head (ms) | bound, these kernels | measured |",
            "|---|---|---|---|---|---|---|---|"] + fast_rows + [""]
