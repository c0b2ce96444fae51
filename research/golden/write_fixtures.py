"""Writing one config: checkpoint, config.json, fixture.safetensors and the summary that becomes golden.json."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import OrderedDict

import numpy as np
import torch
from safetensors.torch import save_file

from checkpoint import build_checkpoint, cast_checkpoint, read_safetensors
from checks import logits_summary, rel_err
from configs import DECODE_STEPS, MTP_CHAIN_STEPS, PROMPT_LEN, SEEDS, Family, indexer_types_of, mlp_layer_types_of
from hf_mtp import HF_MTP_DESCRIPTION, hf_has_use_mtp, hf_use_mtp_fixture, hf_use_mtp_unsupported
from hf_runs import load_back, self_check_trunk, trunk_fixture
from mtp_head import MtpHead, mtp_fixture
from rope_probe import probe_mla_rope_interleave
from spec_reference import spec_cross_check


def write_config_json(config, out_dir: str, dtype_name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            cfg = json.load(f)
    cfg["dtype"] = dtype_name
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def write_fixture(out_dir: str, tensors: dict[str, torch.Tensor]) -> None:
    clean = OrderedDict()
    for k in sorted(tensors):
        v = tensors[k]
        clean[k] = (v.to(torch.int64) if not v.is_floating_point() else v.to(torch.float32)).contiguous()
    save_file(clean, os.path.join(out_dir, "fixture.safetensors"), metadata={"format": "pt"})


def shapes_of(tensors: dict) -> dict:
    return {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} for k, v in sorted(tensors.items())}


def make_prompt(seed: int, vocab: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (PROMPT_LEN,), generator=gen, dtype=torch.int64)  # [T]


def no_indexer_notes(family: Family, ckpt: dict, L: int) -> dict:
    """golden.json notes for the model types without an indexer: what is skipped and what the MTP copies are."""
    p = f"model.layers.{L}."
    embed_equal = torch.equal(ckpt[p + "embed_tokens.weight"], ckpt["model.embed_tokens.weight"])
    head_equal = torch.equal(ckpt[p + "shared_head.head.weight"], ckpt["lm_head.weight"])
    assert (family.mtp_copies == "equal") == embed_equal == head_equal
    return {
        "indexer": "none: no indexer tensors, no topk_* fixture keys; the indexer RoPE probe and the top-k margins "
        "do not apply (skipped); the spec re-implementation runs dense MLA on every layer and in the MTP layer",
        "mtp_copies_equal_trunk": embed_equal,
        "mtp_copies_note": (
            "model.layers.4.embed_tokens / shared_head.head are bit-for-bit copies of model.embed_tokens / lm_head "
            "(as checked in DeepSeek-V3's release), so reading either gives the same MTP logits"
            if embed_equal
            else "model.layers.4.embed_tokens (= main + N(0, 0.5^2)) and shared_head.head (= lm_head + N(0, 0.05^2)) "
            "differ from the trunk's; the MTP reference uses the layer's own copies, as vLLM does for GLM-4.7-Flash"
        ),
    }


def generate_fp32(name: str, config, out_root: str, probes: dict) -> tuple[dict, dict]:
    family = Family(config.model_type)
    out_dir = os.path.join(out_root, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    ckpt, model_config = build_checkpoint(name, config, family)
    save_file(cast_checkpoint(ckpt, torch.float32), os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    write_config_json(model_config, out_dir, "float32")
    report: dict = {}
    model = load_back(out_dir, family, ckpt, torch.float32, report, "")
    ids = make_prompt(SEEDS[name]["prompt"], config.vocab_size)
    fixture = trunk_fixture(model, family, ids, decode_ids=None)
    self_check_trunk(model, fixture, report, "")
    file_ckpt = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    mtp = MtpHead(family, model.config, file_ckpt, torch.float32)
    fixture.update(mtp_fixture(mtp, fixture, report))
    extra: dict = {}
    if not family.has_indexer:
        # transformers' own MTP drafting (deepseek_v3 only: the other types have no num_mtp_layers)
        if not hf_has_use_mtp():
            extra["hf_use_mtp_description"] = "not available in this transformers (no MtpModel / MTPCandidateGenerator); skipped"
        elif family.model_type == "deepseek_v3":
            fixture.update(hf_use_mtp_fixture(model, mtp, fixture, report))
            extra["hf_use_mtp_description"] = HF_MTP_DESCRIPTION
        else:
            extra["hf_use_mtp_description"] = f"not run: {hf_use_mtp_unsupported(model)}"
    style = probes[config.model_type]["indexer_rope_style"] if family.has_indexer else None
    spec_cross_check(model.config, file_ckpt, style, fixture, report, with_mtp=True, mla_style=family.mla_rope_style(model.config))
    if not family.has_indexer:
        extra["main_mla_rope_probe"] = probe_mla_rope_interleave(family, model, file_ckpt, ids, fixture["prefill_logits"])
        extra.update(no_indexer_notes(family, file_ckpt, config.num_hidden_layers))
    write_fixture(out_dir, fixture)
    summary = {
        "name": name,
        "model_type": config.model_type,
        "checkpoint_dtype": "float32",
        "compute": "fp32, attn_implementation=eager, experts_implementation=eager, CPU, torch.no_grad, model.eval",
        "seeds": SEEDS[name],
        "T": PROMPT_LEN,
        "K": getattr(config, "index_topk", None),
        "decode_steps": DECODE_STEPS,
        "decode_ids_policy": "greedy: decode_ids[0] = argmax(prefill_logits[-1]), decode_ids[j] = argmax(decode_logits[j-1])",
        "mtp_chain_steps": MTP_CHAIN_STEPS,
        "indexer_types": indexer_types_of(model.config),
        "mlp_layer_types": mlp_layer_types_of(model.config),
        "mtp_layer_index": config.num_hidden_layers,
        "mtp_uses_embed_head_copies": mtp.uses_copies,
        "mtp_conventions": "u = eh_proj([enorm(Emb(x_{t+1})) ; hnorm(h_t)]), RoPE position t, own cache and own indexer; "
        "mtp_prefill_logits use model.norm output, mtp_prefill_logits_prenorm the last layer output before it",
        "logits": logits_summary(fixture),
        "self_checks": report,
        "tensors": shapes_of(fixture),
    }
    if not family.has_indexer:
        summary["K"] = "none (no indexer: every layer attends to every causal key)"
        summary["mtp_conventions"] = (
            "u = eh_proj([enorm(Emb(x_{t+1})) ; hnorm(h_t)]), RoPE position t, own cache, dense MLA over every causal "
            "pair (no indexer); Emb / head = the MTP layer's own embed_tokens / shared_head.head; "
            "mtp_prefill_logits use model.norm output, mtp_prefill_logits_prenorm the last layer output before it"
        )
        summary.update(extra)
    return summary, {"ckpt": ckpt, "config": model_config, "fixture": fixture}


def generate_bf16(name: str, source_name: str, source: dict, config, out_root: str, probes: dict) -> dict:
    """glm_a weights rounded to bf16: fp32 compute on the upcast weights + bf16 compute."""
    family = Family(config.model_type)
    out_dir = os.path.join(out_root, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    bf16_ckpt = cast_checkpoint(source["ckpt"], torch.bfloat16)
    save_file(bf16_ckpt, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    upcast = OrderedDict((k, v.float()) for k, v in bf16_ckpt.items())  # exactly representable in fp32
    write_config_json(source["config"], out_dir, "bfloat16")
    report: dict = {}
    model32 = load_back(out_dir, family, upcast, torch.float32, report, "fp32_")
    ids = source["fixture"]["input_ids"]
    fixture = trunk_fixture(model32, family, ids, decode_ids=None)
    self_check_trunk(model32, fixture, report, "fp32_")
    mtp = MtpHead(family, model32.config, upcast, torch.float32)
    fixture.update(mtp_fixture(mtp, fixture, report))
    spec_cross_check(model32.config, upcast, probes[config.model_type]["indexer_rope_style"], fixture, report, with_mtp=True)
    del model32

    model16 = load_back(out_dir, family, upcast, torch.bfloat16, report, "bf16_")
    bf16_run = trunk_fixture(model16, family, ids, decode_ids=fixture["decode_ids"])  # same tokens as the fp32 run
    fixture["prefill_logits_bf16compute"] = bf16_run["prefill_logits"]  # [T, V] (bf16 values, stored fp32)
    fixture["decode_logits_bf16compute"] = bf16_run["decode_logits"]  # [n, V]
    report["bf16compute_vs_fp32compute_prefill"] = {"rel": rel_err(bf16_run["prefill_logits"], fixture["prefill_logits"])}
    report["bf16compute_vs_fp32compute_decode"] = {"rel": rel_err(bf16_run["decode_logits"], fixture["decode_logits"])}
    row_err = (bf16_run["prefill_logits"] - fixture["prefill_logits"]).abs().amax(-1) / fixture["prefill_logits"].abs().amax(-1)
    report["bf16compute_prefill_row_rel_err_median"] = float(row_err.median())  # per row: max|diff| / max|fp32 row|
    report["bf16compute_prefill_rows_within_5pct"] = int((row_err < 0.05).sum())
    report["bf16compute_prefill_argmax_agreement"] = float(
        (bf16_run["prefill_logits"].argmax(-1) == fixture["prefill_logits"].argmax(-1)).float().mean()
    )
    overlaps = []
    for l in range(config.num_hidden_layers):
        for t in range(ids.shape[0]):
            a = {int(j) for j in fixture[f"topk_layer{l}"][t] if j <= t}
            b = {int(j) for j in bf16_run[f"topk_layer{l}"][t] if j <= t}
            overlaps.append(len(a & b) / max(len(a), 1))
    report["bf16compute_topk_set_overlap"] = float(np.mean(overlaps))
    rounding = max(rel_err(upcast[k], source["ckpt"][k]) for k in upcast if not k.endswith("e_score_correction_bias"))
    report["max_weight_rounding_rel"] = rounding
    write_fixture(out_dir, fixture)
    return {
        "name": name,
        "model_type": config.model_type,
        "same_model_as": source_name,
        "checkpoint_dtype": "bfloat16 (e_score_correction_bias kept float32)",
        "compute": "prefill_logits/decode_logits/mtp_*: fp32 eager on the bf16 weights upcast to fp32; "
        "*_bf16compute: from_pretrained(dtype=bfloat16), eager attention and experts, stored as fp32",
        "seeds": SEEDS[source_name],
        "T": PROMPT_LEN,
        "K": config.index_topk,
        "decode_steps": DECODE_STEPS,
        "decode_ids_policy": "greedy under fp32 compute; the bf16-compute run is fed the same decode_ids",
        "mtp_chain_steps": MTP_CHAIN_STEPS,
        "indexer_types": indexer_types_of(config),
        "mtp_layer_index": config.num_hidden_layers,
        "logits": logits_summary(fixture),
        "self_checks": report,
        "tensors": shapes_of(fixture),
    }
