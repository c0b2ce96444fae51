"""Comparisons, robustness margins and the tolerances every self-check must meet."""

from __future__ import annotations

import torch


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a-b| / max |b|."""
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def topk_margin(scores: torch.Tensor, k: int) -> float:
    """Smallest relative gap between the k-th and (k+1)-th causal index score over rows that have > k causal keys."""
    gaps = []
    for row in scores:
        finite = row[torch.isfinite(row)]
        if finite.numel() > k:
            top = finite.topk(k + 1).values
            gaps.append(float((top[k - 1] - top[k]) / top[: k + 1].abs().max().clamp_min(1e-30)))
    return min(gaps) if gaps else float("inf")


def top2_gap(rows: torch.Tensor) -> float:
    """Smallest (best - second best) logit over rows [R, V]."""
    top2 = rows.topk(2, -1).values
    return float((top2[:, 0] - top2[:, 1]).min())


def logits_summary(fixture: dict) -> dict:
    logits = fixture["prefill_logits"]
    # Rows whose argmax picked a recorded token (greedy decode ids, MTP chain tokens).
    greedy_rows = torch.cat([logits[-1:], fixture["decode_logits"][:-1]])
    chain_rows = torch.cat([fixture["mtp_chain_normed_logits"], fixture["mtp_chain_raw_logits"]])
    return {
        "prefill_logits_std": float(logits.std()),
        "prefill_logits_absmax": float(logits.abs().max()),
        "min_top2_gap_prefill_rows": top2_gap(logits),
        "min_top2_gap_greedy_decode_rows": top2_gap(greedy_rows),
        "min_top2_gap_mtp_chain_rows": top2_gap(chain_rows),
    }


# --------------------------------------------------------------------------------------------
# Tolerances
# --------------------------------------------------------------------------------------------


TOLERANCES = {  # what the self-checks must meet (relative to max |reference|)
    "two_chunk_prefill": 1e-5,
    "decode_vs_longer_prefill": 1e-4,
    "token_by_token_vs_prefill": 1e-4,
    "mtp_batched_vs_token_by_token": 1e-5,
    "spec_ref": 1e-5,
}


def enforce(summary: dict) -> list[str]:
    failures = []
    for key, value in summary["self_checks"].items():
        if not isinstance(value, dict) or "rel" not in value:
            continue
        for prefix, tol in TOLERANCES.items():
            if key.replace("fp32_", "").startswith(prefix) and value["rel"] > tol:
                failures.append(f"{summary['name']}: {key} rel {value['rel']:.3e} > {tol:.0e}")
    margin = min(
        summary["self_checks"].get("spec_ref_min_relative_topk_margin", 1.0),
        summary["self_checks"].get("spec_ref_mtp_topk_margin", 1.0),
    )
    if margin < 1e-4:
        failures.append(f"{summary['name']}: top-k margin {margin:.2e} too small for fp32 set comparisons")
    router_keys = [k for k in summary["self_checks"] if k.startswith("spec_ref_min_router_margin")]
    for key in router_keys:
        router = summary["self_checks"][key]
        if router < 1e-4:
            failures.append(f"{summary['name']}: router selection margin {key} = {router:.2e} too small")
    hf_mtp = summary["self_checks"].get("hf_use_mtp")
    if hf_mtp is not None:  # transformers' generate(use_mtp=True) against the MTP layer assembled here
        for key, tol in (("mtp_head_on_hf_hidden_vs_hf_draft_logits", 1e-5), ("mtp_head_vs_hf_draft_logits", 1e-4)):
            if hf_mtp[key]["rel"] > tol:
                failures.append(f"{summary['name']}: hf_use_mtp {key} rel {hf_mtp[key]['rel']:.3e} > {tol:.0e}")
        if hf_mtp["min_top2_gap_draft_rows"] < 1e-3:
            failures.append(f"{summary['name']}: hf_use_mtp draft top1-top2 gap {hf_mtp['min_top2_gap_draft_rows']:.2e} too small")
    for key in ("min_top2_gap_greedy_decode_rows", "min_top2_gap_mtp_chain_rows"):
        if summary["logits"][key] < 1e-3:
            failures.append(f"{summary['name']}: {key} = {summary['logits'][key]:.2e}, greedy tokens not robust")
    return failures
