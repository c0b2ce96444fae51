"""Indexer RoPE style probe (behavioural: run HF's indexer module, compare against both styles).

GLM must be interleaved and DeepSeek-V3.2 half-split (docs/models.md, "The DSA lightning indexer"); the script refuses to write
fixtures otherwise. For the model types without an indexer, `probe_mla_rope_interleave` checks instead that the
main MLA follows `rope_interleave`."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

import transformers
from transformers import DeepseekV32Config

from configs import Family, dsv32_b_config, glm_a_config
from spec_reference import SpecReference, rotate_pairs


def indexer_scores_spec(
    indexer: torch.nn.Module,
    x: torch.Tensor,
    c_q: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    style: str,
    d_rope: int,
) -> torch.Tensor:
    """docs/models.md, "The DSA lightning indexer", steps 1-4 (no mask). x [T, H], c_q [T, r_q], cos/sin [T, d_r/2]. Returns [T, T] (query, key)."""
    n_heads, head_dim = indexer.n_heads, indexer.head_dim
    dt = x.dtype
    wq_b = indexer.wq_b.weight.to(dt)  # [N_I*d_I, r_q]
    wk = indexer.wk.weight.to(dt)  # [d_I, H]
    wp = indexer.weights_proj.weight.to(dt)  # [N_I, H]
    q = (c_q @ wq_b.T).view(-1, n_heads, head_dim)  # [T, N_I, d_I]
    q = torch.cat([rotate_pairs(q[..., :d_rope], cos[:, None], sin[:, None], style), q[..., d_rope:]], -1)
    k = F.layer_norm(x @ wk.T, (head_dim,), indexer.k_norm.weight.to(dt), indexer.k_norm.bias.to(dt), 1e-6)  # [T, d_I]
    k = torch.cat([rotate_pairs(k[..., :d_rope], cos, sin, style), k[..., d_rope:]], -1)
    w = (x @ wp.T) * n_heads**-0.5  # [T, N_I]
    per_head = F.relu(torch.einsum("thd,sd->ths", q, k) * head_dim**-0.5)  # [T, N_I, T]
    return torch.einsum("th,ths->ts", w, per_head)  # [T, T]


@torch.no_grad()
def probe_indexer_rope_style(family: Family, config, seed: int = 7) -> str:
    """Run HF's indexer on random inputs with top-k = all keys and no mask; return the style whose
    scores are consistent with the ranking HF produced. Fails if neither or both match."""
    gen = torch.Generator().manual_seed(seed)
    cfg = copy.deepcopy(config)
    indexer = family.indexer_cls(cfg, layer_idx=0).double().eval()
    for p in indexer.parameters():
        p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    seq = 16
    indexer.index_topk = seq  # full ranking
    x = torch.randn(1, seq, config.hidden_size, generator=gen, dtype=torch.float64)  # [1, S, H]
    c_q = torch.randn(1, seq, config.q_lora_rank, generator=gen, dtype=torch.float64)  # [1, S, r_q]
    positions = (torch.arange(seq) * 3 + 1).unsqueeze(0)  # [1, S], spread so rotations matter
    rotary = family.rotary_cls(cfg)
    cos, sin = rotary(x, positions)  # [1, S, d_r] each, cat(freqs, freqs) layout
    mask = torch.zeros(1, seq, seq, dtype=torch.float64)  # nothing masked
    ranking = indexer(x, c_q, (cos, sin), mask, positions, past_key_values=None)[0].long()  # [S, S]
    half = config.qk_rope_head_dim // 2
    matches = []
    for style in ("interleaved", "half-split"):
        scores = indexer_scores_spec(
            indexer, x[0], c_q[0], cos[0, :, :half], sin[0, :, :half], style, config.qk_rope_head_dim
        )  # [S, S]
        ordered = scores.gather(-1, ranking)  # [S, S], must be non-increasing if this style is HF's
        if bool((ordered[:, 1:] <= ordered[:, :-1] + 1e-9).all()):
            matches.append(style)
    if len(matches) != 1:
        raise AssertionError(f"indexer RoPE probe for {family.model_type} is ambiguous: {matches}")
    return matches[0]


def assert_indexer_rope_styles() -> dict[str, dict]:
    """GLM must be interleaved, DeepSeek-V3.2 half-split (docs/models.md, "The DSA lightning indexer"). Also record whether the GLM
    indexer honours `indexer_rope_interleave` (probe with the flag flipped to false)."""
    result = {}
    for make_config in (glm_a_config, dsv32_b_config):
        config = make_config()
        family = Family(config.model_type)
        style = probe_indexer_rope_style(family, config)
        if style != family.expected_indexer_rope:
            raise AssertionError(
                f"transformers {transformers.__version__}: {family.model_type} indexer uses {style} RoPE, "
                f"expected {family.expected_indexer_rope} (docs/models.md, 'The DSA lightning indexer'). Refusing to write fixtures."
            )
        entry = {"indexer_rope_style": style}
        if family.model_type == "glm_moe_dsa":
            flipped = copy.deepcopy(config)
            flipped.indexer_rope_interleave = False
            entry["style_with_indexer_rope_interleave_false"] = probe_indexer_rope_style(family, flipped)
            entry["reads_indexer_rope_interleave"] = entry["style_with_indexer_rope_interleave_false"] != style
        result[family.model_type] = entry
        print(f"[probe] {family.model_type}: indexer RoPE = {style} (asserted) {entry}")
    result["deepseek_v32"]["legacy_rope_scaling_equivalent"] = legacy_rope_spelling_matches()
    return result


def legacy_rope_spelling_matches() -> bool:
    """DeepSeek's released config spells YaRN as top-level `rope_theta` + `rope_scaling: {type: yarn}`; check HF
    turns that into the same frequencies / cos-sin factor as the v5 `rope_parameters` spelling used here."""
    modern = dsv32_b_config()
    fields = modern.to_dict()
    rope = dict(fields.pop("rope_parameters"))
    theta = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type")
    for key in ("transformers_version", "model_type"):
        fields.pop(key, None)
    legacy = DeepseekV32Config(**fields, rope_theta=int(theta), rope_scaling=rope)  # int theta: JSON-integer case
    family = Family("deepseek_v32")
    a, b = family.rotary_cls(modern), family.rotary_cls(legacy)
    same = torch.equal(a.inv_freq, b.inv_freq) and a.attention_scaling == b.attention_scaling
    if not same:
        raise AssertionError("legacy rope_scaling spelling gives different YaRN frequencies")
    return same


@torch.no_grad()
def probe_mla_rope_interleave(family: Family, model, ckpt: dict, ids: torch.Tensor, prefill_logits: torch.Tensor) -> dict:
    """Model types without an indexer (DeepseekV3, Glm4MoeLite) read `rope_interleave` for the main MLA
    (modeling_deepseek_v3.py / modeling_glm4_moe_lite.py, `if self.config.rope_interleave`), unlike the DSA
    classes. Rebuild the loaded model with the flag flipped to false and check that HF then follows the
    half-split (rotate_half) pairing of the float64 spec, while the fixture (flag true) is interleaved."""
    flipped_config = copy.deepcopy(model.config)
    flipped_config.rope_interleave = False
    flipped = family.model_cls(flipped_config).eval()
    flipped.load_state_dict(model.state_dict(), strict=True)
    logits_false = flipped(input_ids=ids[None]).logits[0].float()  # [T, V]
    spec_half = SpecReference(flipped_config, ckpt, None, "half-split").trunk(ids)[0]
    rel = lambda a, b: float((a.double() - b.double()).abs().max() / b.double().abs().max())  # noqa: E731
    result = {
        "main_mla_rope_style_with_rope_interleave_true": family.mla_rope_style(model.config),
        "flag_false_vs_flag_true_prefill_rel": rel(logits_false, prefill_logits),
        "flag_false_vs_spec_half_split_rel": rel(logits_false, spec_half),
    }
    result["reads_rope_interleave"] = result["flag_false_vs_flag_true_prefill_rel"] > 1e-2
    if not result["reads_rope_interleave"] or result["flag_false_vs_spec_half_split_rel"] > 1e-5:
        raise AssertionError(f"{family.model_type}: rope_interleave=false is not half-split MLA RoPE in HF: {result}")
    return result
