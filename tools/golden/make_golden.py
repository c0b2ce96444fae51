#!/usr/bin/env python3
"""Independent oracle: golden fixtures for mtpspec, produced with Hugging Face `transformers`.

What it does
------------
Builds three tiny random models of the `glm_moe_dsa` / `deepseek_v32` family, writes each one as an
HF-layout checkpoint (checkpoint tensor names, per-expert MoE tensors, plus an MTP layer at index
`num_hidden_layers`), reloads the checkpoint with `from_pretrained` and records what transformers
computes (prefill, cached decode, indexer top-k, MTP reference logits) into
`tests/golden/<name>/`:

    config.json           HF config, as `save_pretrained` writes it
    model.safetensors     checkpoint (fp32 for glm_a / dsv32_b, bf16 for glm_a_bf16)
    fixture.safetensors   reference tensors (see tools/golden/README.md for the full list)
    golden.json           versions, seeds, the asserted indexer RoPE style, self-check numbers

Configs: `glm_a` (glm_moe_dsa, fp32, IndexShare full/shared layers), `dsv32_b` (deepseek_v32, fp32,
YaRN, grouped routing, MTP layer with embed/head copies) and `glm_a_bf16` (the glm_a weights rounded
to bf16; logits from fp32 compute on the upcast weights and from bf16 compute).

How to run (from the repository root; CPU only, ~30 s on 2 cores, ~4 MB of output):

    python3 tools/golden/make_golden.py                 # writes tests/golden/{glm_a,dsv32_b,glm_a_bf16}
    python3 tools/golden/make_golden.py --out /tmp/g    # somewhere else
    python3 tools/golden/make_golden.py --only glm_a    # one config; repeatable. `--only glm_a_bf16` rebuilds
                                                        # glm_a's weights in a scratch directory (same seeds)
                                                        # and leaves tests/golden/glm_a untouched

The output is byte-identical from run to run. Exit status 1 (with the reasons on stderr) if any
self-check misses its tolerance; an AssertionError if the indexer RoPE probe or the load-back fails.

Requirements: transformers >= 5.23 (the conventions note in README.md was read from 5.23.0; the
script refuses older versions and warns on newer ones), torch, safetensors, numpy.
Everything is fp32 eager attention on CPU with fixed seeds, so reruns reproduce the files.

Besides recording HF's numbers the script checks them (and fails loudly if a check fails):
  * the indexer RoPE style each installed model class really uses (GLM must be interleaved,
    DeepSeek-V3.2 half-split), probed by running the indexer module on crafted inputs;
  * checkpoint round trip (per-expert names load back into HF with no missing keys);
  * prefill == two-chunk prefill through the HF cache; cached decode == longer prefill;
  * a from-scratch float64 re-implementation of model-spec.md (MLA, indexer, IndexShare, MoE
    router, YaRN, MTP) reproduces HF's logits and top-k sets;
  * MTP batched prefill == token-by-token MTP calls.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import sys
import tempfile
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import (
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    DynamicCache,
    GlmMoeDsaConfig,
    GlmMoeDsaForCausalLM,
)
from transformers.masking_utils import create_causal_mask

# --------------------------------------------------------------------------------------------
# Version pinning
# --------------------------------------------------------------------------------------------

MIN_TRANSFORMERS = (5, 23)
NOTE_READ_FROM = "5.23.0"  # the README conventions note quotes this version's source lines


def parse_version(text: str) -> tuple[int, ...]:
    numbers = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def check_versions() -> None:
    found = parse_version(transformers.__version__)
    if found[:2] < MIN_TRANSFORMERS:
        sys.exit(
            f"make_golden.py: transformers {transformers.__version__} is too old; need >= "
            f"{'.'.join(map(str, MIN_TRANSFORMERS))} (indexer RoPE / IndexShare fixes)."
        )
    if transformers.__version__ != NOTE_READ_FROM:
        print(
            f"WARNING: transformers {transformers.__version__} != {NOTE_READ_FROM}; the README conventions "
            "note may be stale. The asserts below still guard the indexer RoPE style.",
            file=sys.stderr,
        )


# --------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------

PROMPT_LEN = 40  # T
DECODE_STEPS = 4  # n
MTP_CHAIN_STEPS = 3  # k
FIRST_CHUNK_LENGTHS = (23, 5)  # two-chunk prefill self-checks: one split above K, one below

SEEDS = {
    "glm_a": {"weights": 1234, "mtp_weights": 1235, "prompt": 99},
    "dsv32_b": {"weights": 4321, "mtp_weights": 4322, "prompt": 77},
}


def glm_a_config() -> GlmMoeDsaConfig:
    return GlmMoeDsaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=16,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        index_n_heads=8,
        index_head_dim=16,
        index_topk=8,
        indexer_types=["full", "full", "shared", "full"],
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rope_interleave=True,
        indexer_rope_interleave=True,
        num_nextn_predict_layers=1,
        max_position_embeddings=128,
        attn_implementation="eager",
        experts_implementation="eager",
    )


def dsv32_b_config() -> DeepseekV32Config:
    # YaRN with d_r = 16, base 1e4, L0 = 64: correction range lo = 0, hi = 3, so the ramp is
    # [0, 1/3, 2/3, 1, 1, 1, 1, 1]: pairs 1 and 2 are partly interpolated, 3..7 fully.
    return DeepseekV32Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=16,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=16,
        v_head_dim=16,
        index_n_heads=8,
        index_head_dim=32,
        index_topk=8,
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        rms_norm_eps=1e-6,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        num_nextn_predict_layers=1,
        max_position_embeddings=256,
        attn_implementation="eager",
        experts_implementation="eager",
    )


class Family:
    """What differs between the two model types."""

    def __init__(self, model_type: str):
        self.model_type = model_type
        if model_type == "glm_moe_dsa":
            self.model_cls = GlmMoeDsaForCausalLM
            self.config_cls = GlmMoeDsaConfig
            self.expected_indexer_rope = "interleaved"  # model-spec §0.1
            self.mtp_has_copies = False  # GLM-5.2 layer 78: no embed_tokens / shared_head.head
        elif model_type == "deepseek_v32":
            self.model_cls = DeepseekV32ForCausalLM
            self.config_cls = DeepseekV32Config
            self.expected_indexer_rope = "half-split"
            self.mtp_has_copies = True  # DeepSeek layer 61 ships both copies
        else:
            raise ValueError(model_type)
        import importlib

        self.modeling = importlib.import_module(self.model_cls.__module__)
        prefix = "GlmMoeDsa" if model_type == "glm_moe_dsa" else "DeepseekV32"
        self.decoder_layer_cls = getattr(self.modeling, prefix + "DecoderLayer")
        self.rmsnorm_cls = getattr(self.modeling, prefix + "RMSNorm")
        self.rotary_cls = getattr(self.modeling, prefix + "RotaryEmbedding")
        self.indexer_cls = getattr(self.modeling, prefix + "Indexer")


def indexer_types_of(config) -> list[str]:
    # DeepSeek-V3.2 has no IndexShare: every layer runs its indexer.
    return list(getattr(config, "indexer_types", None) or ["full"] * config.num_hidden_layers)


# --------------------------------------------------------------------------------------------
# Random weights (non-degenerate: unit-scale activations, sharp attention, spread router)
# --------------------------------------------------------------------------------------------

GAIN_BY_SUFFIX = {
    "lm_head.weight": 3.0,
    "shared_head.head.weight": 3.0,
    "q_b_proj.weight": 1.6,
    "kv_b_proj.weight": 1.6,
    "indexer.wq_b.weight": 1.5,
    "indexer.wk.weight": 1.5,
    "mlp.gate.weight": 2.0,
}


def random_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Value for one state-dict entry, chosen by name. Returns fp32 of `shape`."""

    def normal(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    if name.endswith("e_score_correction_bias"):  # [E], used for selection only
        return normal(0.1)
    if name.endswith("k_norm.bias"):  # [d_I]
        return normal(0.3)
    if len(shape) == 1:  # every RMSNorm / LayerNorm weight: random non-unit gains
        return 0.6 + 0.8 * torch.rand(shape, generator=gen, dtype=torch.float32)
    if name.endswith("embed_tokens.weight"):  # [V, H]
        return normal(1.0)
    if name.endswith("experts.gate_up_proj"):  # fused runtime layout [E, 2I, H]
        return normal(1.0 / math.sqrt(shape[-1]))
    if name.endswith("experts.down_proj"):  # fused runtime layout [E, H, I]
        return normal(1.0 / math.sqrt(shape[-1]))
    if len(shape) == 2:  # nn.Linear weight [out, in]
        gain = next((g for suffix, g in GAIN_BY_SUFFIX.items() if name.endswith(suffix)), 1.0)
        return normal(gain / math.sqrt(shape[1]))
    raise ValueError(f"no init rule for {name} {shape}")


@torch.no_grad()
def randomize_module(module: torch.nn.Module, seed: int) -> None:
    """Overwrite every persistent parameter/buffer of `module`, in sorted-name order."""
    gen = torch.Generator().manual_seed(seed)
    state = module.state_dict()
    for name in sorted(state):
        tensor = state[name]
        tensor.copy_(random_tensor(name, tuple(tensor.shape), gen).to(tensor.dtype))


# --------------------------------------------------------------------------------------------
# Checkpoint naming: HF v5 fused experts <-> per-expert checkpoint names
# --------------------------------------------------------------------------------------------


def unfuse_layer_state(layer_state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Runtime decoder-layer state dict -> checkpoint names under `prefix` (per-expert MoE tensors)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in layer_state.items():
        if name == "mlp.experts.gate_up_proj":  # [E, 2I, H] = per expert [gate(I) ; up(I)] rows
            gate, up = tensor.chunk(2, dim=1)  # [E, I, H] each
            for e in range(tensor.shape[0]):
                out[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = gate[e].clone()  # [I, H]
                out[f"{prefix}mlp.experts.{e}.up_proj.weight"] = up[e].clone()  # [I, H]
        elif name == "mlp.experts.down_proj":  # [E, H, I]
            for e in range(tensor.shape[0]):
                out[f"{prefix}mlp.experts.{e}.down_proj.weight"] = tensor[e].clone()  # [H, I]
        else:
            out[prefix + name] = tensor.clone()
    return out


def fuse_layer_state(ckpt: dict[str, torch.Tensor], prefix: str, runtime_names: list[str]) -> dict[str, torch.Tensor]:
    """Checkpoint tensors under `prefix` -> the runtime names of an HF decoder layer."""
    out: dict[str, torch.Tensor] = {}
    expert_ids = [int(k[len(prefix) :].split(".")[2]) for k in ckpt if k.startswith(prefix + "mlp.experts.")]
    num_experts = 1 + max(expert_ids, default=-1)  # 0 on dense layers
    for name in runtime_names:
        if name == "mlp.experts.gate_up_proj":
            gate = torch.stack([ckpt[f"{prefix}mlp.experts.{e}.gate_proj.weight"] for e in range(num_experts)])  # [E,I,H]
            up = torch.stack([ckpt[f"{prefix}mlp.experts.{e}.up_proj.weight"] for e in range(num_experts)])  # [E,I,H]
            out[name] = torch.cat([gate, up], dim=1)  # [E, 2I, H]
        elif name == "mlp.experts.down_proj":
            out[name] = torch.stack([ckpt[f"{prefix}mlp.experts.{e}.down_proj.weight"] for e in range(num_experts)])
        else:
            out[name] = ckpt[prefix + name]
    return out


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    with safe_open(path, framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


# --------------------------------------------------------------------------------------------
# MTP layer: HF's own decoder-layer class + enorm / hnorm / eh_proj / shared_head (model-spec §7)
# --------------------------------------------------------------------------------------------


def single_layer_config(trunk_config, family: Family):
    """A 1-layer config of the same family whose only layer is a sparse MoE layer with its own indexer."""
    fields = trunk_config.to_dict()
    fields.update(
        num_hidden_layers=1,
        first_k_dense_replace=0,
        mlp_layer_types=["sparse"],
        layer_types=["indexed_attention"],
    )
    if family.model_type == "glm_moe_dsa":
        fields["indexer_types"] = ["full"]  # the MTP layer always owns and runs an indexer
    for key in ("transformers_version", "architectures", "model_type"):
        fields.pop(key, None)
    config = family.config_cls(**fields, attn_implementation="eager", experts_implementation="eager")
    return config


class MtpHead(torch.nn.Module):
    """One MTP step: logits(x_{t+2}) from (h_t, x_{t+1}) at RoPE position t (model-spec §7.2)."""

    def __init__(self, family: Family, trunk_config, ckpt: dict[str, torch.Tensor], dtype: torch.dtype):
        super().__init__()
        hidden = trunk_config.hidden_size
        eps = trunk_config.rms_norm_eps
        prefix = f"model.layers.{trunk_config.num_hidden_layers}."
        self.family = family
        self.config = single_layer_config(trunk_config, family)
        self.layer = family.decoder_layer_cls(self.config, layer_idx=0)  # same class as the trunk's sparse layers
        runtime_names = list(self.layer.state_dict().keys())
        self.layer.load_state_dict(fuse_layer_state(ckpt, prefix, runtime_names), strict=True)
        self.rotary = family.rotary_cls(self.config)  # same rope parameters as the trunk
        self.enorm = family.rmsnorm_cls(hidden, eps)
        self.hnorm = family.rmsnorm_cls(hidden, eps)
        self.shared_head_norm = family.rmsnorm_cls(hidden, eps)
        self.eh_proj = torch.nn.Linear(2 * hidden, hidden, bias=False)
        with torch.no_grad():
            self.enorm.weight.copy_(ckpt[prefix + "enorm.weight"])
            self.hnorm.weight.copy_(ckpt[prefix + "hnorm.weight"])
            self.shared_head_norm.weight.copy_(ckpt[prefix + "shared_head.norm.weight"])
            self.eh_proj.weight.copy_(ckpt[prefix + "eh_proj.weight"])  # [H, 2H]
        # Prefer the layer's own copies when the checkpoint has them, else bind the main weights.
        embed = ckpt.get(prefix + "embed_tokens.weight", ckpt["model.embed_tokens.weight"])  # [V, H]
        head = ckpt.get(prefix + "shared_head.head.weight", ckpt["lm_head.weight"])  # [V, H]
        self.embed = torch.nn.Embedding.from_pretrained(embed.clone(), freeze=True)
        self.head = torch.nn.Linear(hidden, head.shape[0], bias=False)
        with torch.no_grad():
            self.head.weight.copy_(head)
        self.uses_copies = (prefix + "embed_tokens.weight") in ckpt
        self.to(dtype).eval()
        self.topk_record: list[torch.Tensor] = []
        if self.layer.self_attn.indexer is not None:
            self.layer.self_attn.indexer.register_forward_hook(
                lambda _m, _i, out: self.topk_record.append(out[0].long().clone())  # [S, K]
            )

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.config)

    @torch.no_grad()
    def step(self, hidden: torch.Tensor, next_tokens: torch.Tensor, positions: torch.Tensor, cache: DynamicCache):
        """hidden [S, H], next_tokens [S] int64, positions [S] int64 (= cache offset + arange(S)).

        Returns (logits [S, V] fp32, g [S, H] raw block output, normed [S, H] = shared_head.norm(g))."""
        assert int(positions[0]) == cache.get_seq_length(), "MTP positions must continue the MTP cache"
        e = self.embed(next_tokens)  # [S, H]
        u = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(hidden)], dim=-1))  # [S, H], embedding first
        u = u.unsqueeze(0)  # [1, S, H]
        position_ids = positions.unsqueeze(0)  # [1, S]
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=u,
            attention_mask=None,
            past_key_values=cache,
            position_ids=position_ids,
            allow_is_causal_skip=False,
        )  # [1, 1, S, cache+S]
        position_embeddings = self.rotary(u, position_ids=position_ids)
        out = self.layer(
            u,
            attention_mask=mask,
            position_embeddings=position_embeddings,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        g = (out[0] if isinstance(out, tuple) else out)[0]  # [S, H]
        normed = self.shared_head_norm(g)  # [S, H]
        logits = self.head(normed).float()  # [S, V]
        return logits, g, normed


# --------------------------------------------------------------------------------------------
# Indexer RoPE style probe (behavioural: run HF's indexer module, compare against both styles)
# --------------------------------------------------------------------------------------------


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """Rotate the last dim of x (size d_r) by per-pair angles. cos/sin broadcast to [..., d_r/2].

    interleaved: pairs (x_{2i}, x_{2i+1}); half-split: pairs (x_i, x_{i+d_r/2}). Output keeps x's layout."""
    half = x.shape[-1] // 2
    if style == "interleaved":
        u, w = x[..., 0::2], x[..., 1::2]
    elif style == "half-split":
        u, w = x[..., :half], x[..., half:]
    else:
        raise ValueError(style)
    ru, rw = u * cos - w * sin, u * sin + w * cos
    out = torch.empty_like(x)
    if style == "interleaved":
        out[..., 0::2], out[..., 1::2] = ru, rw
    else:
        out[..., :half], out[..., half:] = ru, rw
    return out


def indexer_scores_spec(
    indexer: torch.nn.Module,
    x: torch.Tensor,
    c_q: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    style: str,
    d_rope: int,
) -> torch.Tensor:
    """model-spec §4.2 steps 1-4 (no mask). x [T, H], c_q [T, r_q], cos/sin [T, d_r/2]. Returns [T, T] (query, key)."""
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
    """GLM must be interleaved, DeepSeek-V3.2 half-split (model-spec §0.1). Also record whether the GLM
    indexer honours `indexer_rope_interleave` (probe with the flag flipped to false)."""
    result = {}
    for make_config in (glm_a_config, dsv32_b_config):
        config = make_config()
        family = Family(config.model_type)
        style = probe_indexer_rope_style(family, config)
        if style != family.expected_indexer_rope:
            raise AssertionError(
                f"transformers {transformers.__version__}: {family.model_type} indexer uses {style} RoPE, "
                f"expected {family.expected_indexer_rope} (model-spec §0.1). Refusing to write fixtures."
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


# --------------------------------------------------------------------------------------------
# Independent float64 re-implementation of model-spec.md (§1.2, §2, §3, §4, §5, §6, §7)
# --------------------------------------------------------------------------------------------


class SpecReference:
    """Written from model-spec.md only, on checkpoint-named tensors, in float64, no cache (full sequences)."""

    def __init__(self, config, ckpt: dict[str, torch.Tensor], indexer_style: str):
        self.c = config
        self.w = {k: v.to(torch.float64) for k, v in ckpt.items()}
        self.indexer_style = indexer_style
        self.indexer_types = indexer_types_of(config)
        rp = config.rope_parameters
        d_r = config.qk_rope_head_dim
        base = float(rp["rope_theta"])
        theta = base ** (-torch.arange(0, d_r, 2, dtype=torch.float64) / d_r)  # [d_r/2]
        self.attention_factor = 1.0
        self.softmax_scale = (config.qk_nope_head_dim + d_r) ** -0.5
        if rp.get("rope_type", "default") == "yarn":
            s, l0 = float(rp["factor"]), float(rp["original_max_position_embeddings"])

            def corr(n):
                return d_r * math.log(l0 / (2 * math.pi * n)) / (2 * math.log(base))

            def m(scale, mu):
                return 0.1 * mu * math.log(scale) + 1.0 if scale > 1 else 1.0

            lo = max(math.floor(corr(rp["beta_fast"])), 0)
            hi = min(math.ceil(corr(rp["beta_slow"])), d_r - 1)
            if lo == hi:
                hi += 0.001
            ramp = ((torch.arange(d_r // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)  # [d_r/2]
            theta = theta / s * ramp + theta * (1 - ramp)
            self.attention_factor = m(s, rp["mscale"]) / m(s, rp["mscale_all_dim"])
            self.softmax_scale *= m(s, rp["mscale_all_dim"]) ** 2
            self.yarn_lo_hi = (lo, hi)
        self.theta = theta
        self.router_margins: list[float] = []  # per sparse-layer call: smallest selection gap (expert / group)

    def angles(self, positions: torch.Tensor):
        phi = positions.to(torch.float64)[:, None] * self.theta[None]  # [T, d_r/2]
        return phi.cos() * self.attention_factor, phi.sin() * self.attention_factor

    @staticmethod
    def rms(x, w, eps):
        return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)

    def linear(self, x, name):
        return x @ self.w[name].T

    def mla_and_indexer(self, p, x, positions, prev_allowed, full):
        """x [T, H] normed input. Returns (attention output [T, H], allowed [T, T] bool, index scores or None)."""
        c = self.c
        n_h, d_n, d_r, d_v = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        seq = x.shape[0]
        cos, sin = self.angles(positions)  # [T, d_r/2]
        c_q = self.rms(self.linear(x, p + "self_attn.q_a_proj.weight"), self.w[p + "self_attn.q_a_layernorm.weight"], 1e-6)
        q = self.linear(c_q, p + "self_attn.q_b_proj.weight").view(seq, n_h, d_n + d_r)  # [T, N_h, d_qk]
        q_n, q_r = q[..., :d_n], rotate_pairs(q[..., d_n:], cos[:, None], sin[:, None], "interleaved")
        kv_a = self.linear(x, p + "self_attn.kv_a_proj_with_mqa.weight")  # [T, r_kv + d_r]
        latent = self.rms(kv_a[:, : c.kv_lora_rank], self.w[p + "self_attn.kv_a_layernorm.weight"], 1e-6)  # [T, r_kv]
        k_r = rotate_pairs(kv_a[:, c.kv_lora_rank :], cos, sin, "interleaved")  # [T, d_r]
        kv = self.linear(latent, p + "self_attn.kv_b_proj.weight").view(seq, n_h, d_n + d_v)  # [T, N_h, d_n+d_v]
        k_n, v = kv[..., :d_n], kv[..., d_n:]
        causal = positions[None, :] <= positions[:, None]  # [T(query), T(key)]
        scores_index = None
        if full:
            ip = p + "self_attn.indexer."
            n_i, d_i = c.index_n_heads, c.index_head_dim
            qi = self.linear(c_q, ip + "wq_b.weight").view(seq, n_i, d_i)  # [T, N_I, d_I]
            qi = torch.cat([rotate_pairs(qi[..., :d_r], cos[:, None], sin[:, None], self.indexer_style), qi[..., d_r:]], -1)
            ki = F.layer_norm(self.linear(x, ip + "wk.weight"), (d_i,), self.w[ip + "k_norm.weight"], self.w[ip + "k_norm.bias"], 1e-6)
            ki = torch.cat([rotate_pairs(ki[..., :d_r], cos, sin, self.indexer_style), ki[..., d_r:]], -1)  # [T, d_I]
            wts = self.linear(x, ip + "weights_proj.weight") * n_i**-0.5  # [T, N_I]
            scores_index = torch.einsum("th,ths->ts", wts, F.relu(torch.einsum("thd,sd->ths", qi, ki) * d_i**-0.5))
            scores_index = scores_index.masked_fill(~causal, float("-inf"))  # [T, T]
            top = scores_index.topk(min(c.index_topk, seq), dim=-1).indices  # [T, K]
            selected = torch.zeros(seq, seq, dtype=torch.bool).scatter(-1, top, True)
            allowed = selected & causal
        else:
            allowed = prev_allowed
        logits = self.softmax_scale * (torch.einsum("thd,shd->hts", q_n, k_n) + torch.einsum("thd,sd->hts", q_r, k_r))
        logits = logits.masked_fill(~allowed[None], float("-inf"))  # [N_h, T, T]
        probs = logits.softmax(-1)
        o = torch.einsum("hts,shd->thd", probs, v).reshape(seq, n_h * d_v)  # [T, N_h*d_v]
        return self.linear(o, p + "self_attn.o_proj.weight"), allowed, scores_index

    def moe(self, p, x):
        c = self.c
        z = self.linear(x, p + "mlp.gate.weight")  # [T, E]
        sig = z.sigmoid()
        choice = sig + self.w[p + "mlp.gate.e_score_correction_bias"]  # bias only for selection
        if c.n_group > 1:
            grouped = choice.view(x.shape[0], c.n_group, -1)  # [T, G, E/G]
            group_score = grouped.topk(2, dim=-1).values.sum(-1)  # [T, G]
            keep = torch.zeros_like(group_score, dtype=torch.bool).scatter(-1, group_score.topk(c.topk_group, -1).indices, True)
            choice = choice.masked_fill(~keep[:, :, None].expand_as(grouped).reshape_as(choice), float("-inf"))
            ranked_groups = group_score.sort(-1, descending=True).values  # [T, G]
            self.router_margins.append(float((ranked_groups[:, c.topk_group - 1] - ranked_groups[:, c.topk_group]).min()))
        ranked = choice.sort(-1, descending=True).values  # [T, E]
        self.router_margins.append(float((ranked[:, c.num_experts_per_tok - 1] - ranked[:, c.num_experts_per_tok]).min()))
        idx = choice.topk(c.num_experts_per_tok, dim=-1).indices  # [T, k_e]
        g = sig.gather(-1, idx)
        if c.norm_topk_prob:
            g = g / (g.sum(-1, keepdim=True) + 1e-20)
        g = g * c.routed_scaling_factor  # [T, k_e]
        y = torch.zeros_like(x)
        for e in range(c.n_routed_experts):
            ep = f"{p}mlp.experts.{e}."
            out_e = self.linear(F.silu(self.linear(x, ep + "gate_proj.weight")) * self.linear(x, ep + "up_proj.weight"), ep + "down_proj.weight")
            weight_e = (g * (idx == e)).sum(-1, keepdim=True)  # [T, 1]
            y = y + weight_e * out_e
        sp = p + "mlp.shared_experts."
        return y + self.linear(F.silu(self.linear(x, sp + "gate_proj.weight")) * self.linear(x, sp + "up_proj.weight"), sp + "down_proj.weight")

    def dense_mlp(self, p, x):
        return self.linear(F.silu(self.linear(x, p + "mlp.gate_proj.weight")) * self.linear(x, p + "mlp.up_proj.weight"), p + "mlp.down_proj.weight")

    def layer(self, l, h, positions, prev_allowed, full, sparse):
        p = f"model.layers.{l}."
        eps = self.c.rms_norm_eps
        attn, allowed, scores = self.mla_and_indexer(p, self.rms(h, self.w[p + "input_layernorm.weight"], eps), positions, prev_allowed, full)
        h = h + attn
        x = self.rms(h, self.w[p + "post_attention_layernorm.weight"], eps)
        h = h + (self.moe(p, x) if sparse else self.dense_mlp(p, x))
        return h, allowed, scores

    def trunk(self, ids: torch.Tensor):
        """ids [T] -> logits [T, V], prenorm [T, H], postnorm [T, H], per-layer index scores (None for shared)."""
        positions = torch.arange(ids.shape[0])
        h = self.w["model.embed_tokens.weight"][ids]  # [T, H]
        allowed, all_scores = None, []
        for l in range(self.c.num_hidden_layers):
            h, allowed, scores = self.layer(
                l, h, positions, allowed, self.indexer_types[l] == "full", self.c.mlp_layer_types[l] == "sparse"
            )
            all_scores.append(scores)
        post = self.rms(h, self.w["model.norm.weight"], self.c.rms_norm_eps)
        return post @ self.w["lm_head.weight"].T, h, post, all_scores

    def mtp(self, hidden: torch.Tensor, next_tokens: torch.Tensor):
        """Pairs (h_t, x_{t+1}) at positions 0..S-1 as one causal sequence -> logits [S, V], g [S, H], index scores."""
        L = self.c.num_hidden_layers
        p = f"model.layers.{L}."
        eps = self.c.rms_norm_eps
        embed = self.w.get(p + "embed_tokens.weight", self.w["model.embed_tokens.weight"])
        head = self.w.get(p + "shared_head.head.weight", self.w["lm_head.weight"])
        e = embed[next_tokens]  # [S, H]
        u = torch.cat([self.rms(e, self.w[p + "enorm.weight"], eps), self.rms(hidden.double(), self.w[p + "hnorm.weight"], eps)], -1)
        u = self.linear(u, p + "eh_proj.weight")  # [S, H]
        g, _, scores = self.layer(L, u, torch.arange(u.shape[0]), None, True, True)
        return self.rms(g, self.w[p + "shared_head.norm.weight"], eps) @ head.T, g, scores


def topk_margin(scores: torch.Tensor, k: int) -> float:
    """Smallest relative gap between the k-th and (k+1)-th causal index score over rows that have > k causal keys."""
    gaps = []
    for row in scores:
        finite = row[torch.isfinite(row)]
        if finite.numel() > k:
            top = finite.topk(k + 1).values
            gaps.append(float((top[k - 1] - top[k]) / top[: k + 1].abs().max().clamp_min(1e-30)))
    return min(gaps) if gaps else float("inf")


# --------------------------------------------------------------------------------------------
# Running HF
# --------------------------------------------------------------------------------------------


class TopkRecorder:
    """Captures the top-k indices each trunk layer used ([S, K] per call), full and shared layers alike."""

    def __init__(self, model, family: Family):
        self.calls: dict[int, list[torch.Tensor]] = {l: [] for l in range(model.config.num_hidden_layers)}
        self.hooks = []
        for l, layer in enumerate(model.model.layers):
            attn = layer.self_attn
            if family.model_type == "glm_moe_dsa":
                # GlmMoeDsaAttention returns (out, weights, topk_indices) for full and shared layers.
                self.hooks.append(attn.register_forward_hook(self._make_hook(l, output_index=2)))
            else:
                self.hooks.append(attn.indexer.register_forward_hook(self._make_hook(l, output_index=None)))

    def _make_hook(self, l, output_index):
        def hook(_module, _inputs, output):
            indices = output if output_index is None else output[output_index]
            self.calls[l].append(indices[0].long().clone())  # [S, K]

        return hook

    def pop(self) -> dict[int, torch.Tensor]:
        out = {l: calls[-1] for l, calls in self.calls.items()}
        for calls in self.calls.values():
            calls.clear()
        return out

    def remove(self):
        for h in self.hooks:
            h.remove()


class NormTap:
    """Captures model.norm's input (pre-norm hidden) and output (post-norm hidden)."""

    def __init__(self, model):
        self.pre = self.post = None
        self.hook = model.model.norm.register_forward_hook(self._hook)

    def _hook(self, _m, inputs, output):
        self.pre = inputs[0][0].float().clone()  # [S, H]
        self.post = output[0].float().clone()  # [S, H]


@torch.no_grad()
def run_chunks(model, ids: torch.Tensor, chunk_lengths: list[int]) -> torch.Tensor:
    """Feed ids [T] as consecutive chunks through one HF cache. Returns logits [T, V] fp32."""
    cache = DynamicCache(config=model.config)
    rows, start = [], 0
    for length in chunk_lengths:
        out = model(input_ids=ids[None, start : start + length], past_key_values=cache, use_cache=True)
        rows.append(out.logits[0].float())
        start += length
    assert start == ids.shape[0]
    return torch.cat(rows)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a-b| / max |b|."""
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def sorted_valid_topk(topk: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[S, K] HF indices -> same shape, entries > the row's position replaced by -1, row sorted ascending (-1 last)."""
    big = torch.iinfo(torch.int64).max
    valid = topk <= positions[:, None]
    keyed = torch.where(valid, topk, torch.full_like(topk, big)).sort(-1).values
    return torch.where(keyed == big, torch.full_like(keyed, -1), keyed)


@torch.no_grad()
def trunk_fixture(model, family: Family, ids: torch.Tensor, decode_ids: torch.Tensor | None):
    """Prefill ids [T] then decode `DECODE_STEPS` tokens one at a time through the HF cache.

    decode_ids None -> greedy (each token = argmax of the previous row); else feed the given tokens."""
    recorder = TopkRecorder(model, family)
    tap = NormTap(model)
    seq = ids.shape[0]
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    prefill_logits = out.logits[0].float()  # [T, V]
    prenorm, postnorm = tap.pre, tap.post  # [T, H] each
    prefill_topk = recorder.pop()  # layer -> [T, K]
    greedy = decode_ids is None
    tokens, decode_rows, decode_topk = [], [], []
    last = prefill_logits[-1]
    for j in range(DECODE_STEPS):
        token = int(last.argmax()) if greedy else int(decode_ids[j])
        tokens.append(token)
        step = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
        last = step.logits[0, -1].float()  # [V]
        decode_rows.append(last)
        decode_topk.append(recorder.pop())
    tap.hook.remove()
    recorder.remove()
    result = {
        "input_ids": ids.clone(),  # [T] int64
        "prefill_logits": prefill_logits,  # [T, V]
        "prefill_hidden_prenorm": prenorm,  # [T, H]
        "prefill_hidden_postnorm": postnorm,  # [T, H]
        "decode_ids": torch.tensor(tokens, dtype=torch.int64),  # [n]
        "decode_logits": torch.stack(decode_rows),  # [n, V]
    }
    positions = torch.arange(seq)
    for l, topk in prefill_topk.items():
        result[f"topk_layer{l}"] = topk  # [T, K] int64, as HF computed it
        result[f"topk_sorted_layer{l}"] = sorted_valid_topk(topk, positions)  # [T, K], -1 = no key
        result[f"decode_topk_layer{l}"] = torch.stack([d[l][0] for d in decode_topk])  # [n, K]
    return result


@torch.no_grad()
def self_check_trunk(model, fixture: dict, report: dict, tag: str) -> None:
    ids = fixture["input_ids"]  # [T]
    seq = ids.shape[0]
    ref = fixture["prefill_logits"]  # [T, V]
    for first in FIRST_CHUNK_LENGTHS:
        chunked = run_chunks(model, ids, [first, seq - first])  # [T, V]
        report[f"{tag}two_chunk_prefill_{first}+{seq - first}"] = {"max_abs": max_abs(chunked, ref), "rel": rel_err(chunked, ref)}
    longer_ids = torch.cat([ids, fixture["decode_ids"]])  # [T+n]
    longer = run_chunks(model, longer_ids, [longer_ids.shape[0]])[seq:]  # [n, V]
    report[f"{tag}decode_vs_longer_prefill"] = {
        "max_abs": max_abs(fixture["decode_logits"], longer),
        "rel": rel_err(fixture["decode_logits"], longer),
    }
    # Decode step-by-step from scratch must also equal the one-shot prefill (pure cached path).
    stepwise = run_chunks(model, ids, [1] * seq)
    report[f"{tag}token_by_token_vs_prefill"] = {"max_abs": max_abs(stepwise, ref), "rel": rel_err(stepwise, ref)}


# --------------------------------------------------------------------------------------------
# MTP reference logits
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def mtp_fixture(mtp: MtpHead, fixture: dict, report: dict) -> dict:
    ids = fixture["input_ids"]  # [T]
    seq = ids.shape[0]
    post = fixture["prefill_hidden_postnorm"]  # [T, H]
    pre = fixture["prefill_hidden_prenorm"]  # [T, H]
    positions = torch.arange(seq - 1)  # [T-1]
    out: dict[str, torch.Tensor] = {}

    mtp.topk_record.clear()
    cache = mtp.new_cache()
    logits_post, _, _ = mtp.step(post[:-1], ids[1:], positions, cache)  # [T-1, V]
    out["mtp_prefill_logits"] = logits_post
    out["mtp_prefill_topk"] = mtp.topk_record[-1]  # [T-1, K]
    out["mtp_prefill_topk_sorted"] = sorted_valid_topk(mtp.topk_record[-1], positions)

    logits_pre, _, _ = mtp.step(pre[:-1], ids[1:], positions, mtp.new_cache())
    out["mtp_prefill_logits_prenorm"] = logits_pre  # [T-1, V]

    # Self-check: batched MTP prefill == token-by-token MTP calls (same cache contents).
    one_cache = mtp.new_cache()
    rows = [mtp.step(post[t : t + 1], ids[t + 1 : t + 2], positions[t : t + 1], one_cache)[0] for t in range(seq - 1)]
    stepwise = torch.cat(rows)
    report["mtp_batched_vs_token_by_token"] = {"max_abs": max_abs(stepwise, logits_post), "rel": rel_err(stepwise, logits_post)}

    first_token = int(fixture["prefill_logits"][-1].argmax())  # x_T
    out["mtp_chain_first_token"] = torch.tensor([first_token], dtype=torch.int64)  # [1]
    for variant in ("normed", "raw"):
        chain_cache = mtp.new_cache()
        mtp.step(post[:-1], ids[1:], positions, chain_cache)  # MTP cache: pairs (h_t, x_{t+1}), t = 0..T-2
        hidden = post[-1:]  # [1, H]  h_{T-1}, post-final-norm
        token = first_token
        logits_rows, tokens, hiddens = [], [], []
        for j in range(MTP_CHAIN_STEPS):
            pos = torch.tensor([seq - 1 + j])  # anchor position T-1+j
            logits, g, normed = mtp.step(hidden, torch.tensor([token]), pos, chain_cache)  # [1, V], [1, H], [1, H]
            logits_rows.append(logits[0])
            token = int(logits[0].argmax())  # d_{j+1}
            tokens.append(token)
            hidden = normed if variant == "normed" else g
            hiddens.append(hidden[0].float())
        out[f"mtp_chain_{variant}_logits"] = torch.stack(logits_rows)  # [k, V]
        out[f"mtp_chain_{variant}_tokens"] = torch.tensor(tokens, dtype=torch.int64)  # [k]
        out[f"mtp_chain_{variant}_hidden"] = torch.stack(hiddens)  # [k, H], the hidden fed to step j+1
    return out


# --------------------------------------------------------------------------------------------
# Spec cross-check
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def spec_cross_check(config, ckpt, style, fixture, report, with_mtp: bool) -> None:
    ref = SpecReference(config, ckpt, style)
    ids = fixture["input_ids"]
    seq = ids.shape[0]
    logits, _, post, scores = ref.trunk(ids)
    report["spec_ref_prefill_logits"] = {"max_abs": max_abs(fixture["prefill_logits"], logits), "rel": rel_err(fixture["prefill_logits"], logits)}
    report["spec_ref_postnorm"] = {"rel": rel_err(fixture["prefill_hidden_postnorm"], post)}
    K = config.index_topk
    set_mismatch_rows, margins = 0, []
    donor_scores = None
    for l in range(config.num_hidden_layers):
        if scores[l] is not None:
            donor_scores = scores[l]
            margins.append(topk_margin(scores[l], K))
        ref_top = donor_scores.topk(min(K, seq), -1).indices  # [T, K] (shared layers: the donor's)
        hf_top = fixture[f"topk_layer{l}"]
        for t in range(seq):
            n_valid = min(K, t + 1)
            hf_set = {int(j) for j in hf_top[t] if j <= t}
            ref_set = {int(j) for j in ref_top[t] if j <= t}
            if hf_set != ref_set or len(hf_set) != n_valid:
                set_mismatch_rows += 1
    report["spec_ref_topk_rows_mismatching"] = set_mismatch_rows
    report["spec_ref_min_relative_topk_margin"] = min(margins)
    report["spec_ref_min_router_margin"] = min(ref.router_margins)
    if hasattr(ref, "yarn_lo_hi"):
        report["yarn_lo_hi"] = list(ref.yarn_lo_hi)
    report["softmax_scale"] = ref.softmax_scale
    if with_mtp:
        post_hf = fixture["prefill_hidden_postnorm"]
        mtp_logits, _, mtp_scores = ref.mtp(post_hf[:-1], ids[1:])
        report["spec_ref_mtp_prefill_logits"] = {"rel": rel_err(fixture["mtp_prefill_logits"], mtp_logits)}
        report["spec_ref_mtp_topk_margin"] = topk_margin(mtp_scores, K)
        # Chained drafting = the same layer over the extended causal sequence of pairs.
        for variant in ("normed", "raw"):
            hidden = torch.cat([post_hf, fixture[f"mtp_chain_{variant}_hidden"][:-1]])  # [T-1+k, H]
            tokens = torch.cat([ids[1:], fixture["mtp_chain_first_token"], fixture[f"mtp_chain_{variant}_tokens"][:-1]])
            chain_logits, _, chain_scores = ref.mtp(hidden, tokens)
            report[f"spec_ref_mtp_chain_{variant}"] = {"rel": rel_err(fixture[f"mtp_chain_{variant}_logits"], chain_logits[seq - 1 :])}
            report["spec_ref_mtp_topk_margin"] = min(report["spec_ref_mtp_topk_margin"], topk_margin(chain_scores[seq - 1 :], K))
    if set_mismatch_rows:
        raise AssertionError(f"indexer top-k sets differ from the spec re-implementation in {set_mismatch_rows} rows")


# --------------------------------------------------------------------------------------------
# Writing one config
# --------------------------------------------------------------------------------------------


def build_checkpoint(name: str, config, family: Family):
    """Random trunk + MTP layer as checkpoint-named fp32 tensors (trunk names taken from save_pretrained).

    Returns (checkpoint dict, the generating model's config)."""
    seeds = SEEDS[name]
    torch.manual_seed(seeds["weights"])
    model = family.model_cls(config).eval()
    randomize_module(model, seeds["weights"])
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        trunk = read_safetensors(os.path.join(tmp, "model.safetensors"))
    if any("gate_up_proj" in k for k in trunk):
        raise AssertionError("save_pretrained wrote fused expert tensors; expected per-expert names")
    # Our own unfusing must agree with save_pretrained's (it is reused for the MTP layer).
    for l, layer in enumerate(model.model.layers):
        mine = unfuse_layer_state(layer.state_dict(), f"model.layers.{l}.")
        for k, v in mine.items():
            assert torch.equal(trunk[k], v), k
        assert len([k for k in trunk if k.startswith(f"model.layers.{l}.")]) == len(mine)

    L = config.num_hidden_layers
    mtp_layer = family.decoder_layer_cls(single_layer_config(config, family), layer_idx=0).eval()
    randomize_module(mtp_layer, seeds["mtp_weights"])
    mtp = unfuse_layer_state(mtp_layer.state_dict(), f"model.layers.{L}.")
    gen = torch.Generator().manual_seed(seeds["mtp_weights"] + 1000)
    H = config.hidden_size
    extra = [("enorm.weight", (H,)), ("hnorm.weight", (H,)), ("eh_proj.weight", (H, 2 * H)), ("shared_head.norm.weight", (H,))]
    for short, shape in extra:
        mtp[f"model.layers.{L}.{short}"] = random_tensor(short, shape, gen)
    if family.mtp_has_copies:
        # Copies that differ from the main weights, so a test can tell which ones an implementation uses.
        mtp[f"model.layers.{L}.embed_tokens.weight"] = trunk["model.embed_tokens.weight"] + 0.5 * torch.randn(
            trunk["model.embed_tokens.weight"].shape, generator=gen
        )
        mtp[f"model.layers.{L}.shared_head.head.weight"] = trunk["lm_head.weight"] + 0.05 * torch.randn(
            trunk["lm_head.weight"].shape, generator=gen
        )
    return OrderedDict(sorted({**trunk, **mtp}.items())), model.config


def cast_checkpoint(ckpt: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    # e_score_correction_bias stays fp32 as in the released checkpoints (and HF keeps it fp32).
    return OrderedDict(
        (k, v.contiguous() if k.endswith("e_score_correction_bias") else v.to(dtype).contiguous()) for k, v in ckpt.items()
    )


def load_back(out_dir: str, family: Family, ckpt: dict[str, torch.Tensor], dtype: torch.dtype, report: dict, tag: str):
    """from_pretrained the written checkpoint; verify nothing is missing and the values are the file's."""
    model, info = family.model_cls.from_pretrained(
        out_dir, dtype=dtype, attn_implementation="eager", experts_implementation="eager", output_loading_info=True
    )
    assert model.config._attn_implementation == "eager" and model.config._experts_implementation == "eager"
    model.eval()
    L = model.config.num_hidden_layers
    mtp_keys = {k for k in ckpt if k.startswith(f"model.layers.{L}.")}
    missing = set(info.get("missing_keys", []))
    unexpected = set(info.get("unexpected_keys", []))
    mismatched = list(info.get("mismatched_keys", []))
    # HF reports the MTP layer's tensors (under its runtime names, experts fused) as unexpected: its
    # ignore pattern only covers layer 78 (GLM) / 61 (DeepSeek). Anything else unexpected is an error.
    stray = sorted(k for k in unexpected if not k.startswith(f"model.layers.{L}."))
    if missing or mismatched or stray:
        raise AssertionError(f"load-back failed: missing={sorted(missing)} mismatched={mismatched} unexpected={stray}")
    # Every runtime tensor must equal the checkpoint value (after HF's own per-expert fusion).
    for l, layer in enumerate(model.model.layers):
        prefix = f"model.layers.{l}."
        expected = fuse_layer_state(ckpt, prefix, list(layer.state_dict().keys()))
        for k, v in layer.state_dict().items():
            assert torch.equal(v, expected[k].to(v.dtype)), f"{prefix}{k} differs after load"
    assert torch.equal(model.model.embed_tokens.weight, ckpt["model.embed_tokens.weight"].to(dtype))
    assert torch.equal(model.lm_head.weight, ckpt["lm_head.weight"].to(dtype))
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight), "lm_head must not be tied"
    report[f"{tag}load_back"] = {
        "missing_keys": len(missing),
        "unexpected_keys_all_mtp_layer": sorted(unexpected),
        "mtp_layer_tensors_in_file": len(mtp_keys),
        "dtypes_after_load": sorted({str(p.dtype) for p in model.state_dict().values()}),
        "e_score_correction_bias_dtype": str(model.model.layers[-1].mlp.gate.e_score_correction_bias.dtype),
        "weights_proj_dtype": str(model.model.layers[0].self_attn.indexer.weights_proj.weight.dtype),
    }
    return model


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


def shapes_of(tensors: dict) -> dict:
    return {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} for k, v in sorted(tensors.items())}


def make_prompt(seed: int, vocab: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (PROMPT_LEN,), generator=gen, dtype=torch.int64)  # [T]


def environment_record(probes: dict) -> dict:
    return {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python_version": sys.version.split()[0],
        "indexer_rope_probe": probes,
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
    style = probes[config.model_type]["indexer_rope_style"]
    spec_cross_check(model.config, file_ckpt, style, fixture, report, with_mtp=True)
    write_fixture(out_dir, fixture)
    summary = {
        "name": name,
        "model_type": config.model_type,
        "checkpoint_dtype": "float32",
        "compute": "fp32, attn_implementation=eager, experts_implementation=eager, CPU, torch.no_grad, model.eval",
        "seeds": SEEDS[name],
        "T": PROMPT_LEN,
        "K": config.index_topk,
        "decode_steps": DECODE_STEPS,
        "decode_ids_policy": "greedy: decode_ids[0] = argmax(prefill_logits[-1]), decode_ids[j] = argmax(decode_logits[j-1])",
        "mtp_chain_steps": MTP_CHAIN_STEPS,
        "indexer_types": indexer_types_of(model.config),
        "mlp_layer_types": list(model.config.mlp_layer_types),
        "mtp_layer_index": config.num_hidden_layers,
        "mtp_uses_embed_head_copies": mtp.uses_copies,
        "mtp_conventions": "u = eh_proj([enorm(Emb(x_{t+1})) ; hnorm(h_t)]), RoPE position t, own cache and own indexer; "
        "mtp_prefill_logits use model.norm output, mtp_prefill_logits_prenorm the last layer output before it",
        "logits": logits_summary(fixture),
        "self_checks": report,
        "tensors": shapes_of(fixture),
    }
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


# --------------------------------------------------------------------------------------------
# Main
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
    router = summary["self_checks"].get("spec_ref_min_router_margin", 1.0)
    if router < 1e-4:
        failures.append(f"{summary['name']}: router selection margin {router:.2e} too small")
    for key in ("min_top2_gap_greedy_decode_rows", "min_top2_gap_mtp_chain_rows"):
        if summary["logits"][key] < 1e-3:
            failures.append(f"{summary['name']}: {key} = {summary['logits'][key]:.2e}, greedy tokens not robust")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    repo_root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--out", default=os.path.join(repo_root, "tests", "golden"))
    parser.add_argument("--only", choices=["glm_a", "dsv32_b", "glm_a_bf16"], action="append")
    args = parser.parse_args()
    check_versions()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    wanted = args.only or ["glm_a", "dsv32_b", "glm_a_bf16"]

    probes = assert_indexer_rope_styles()
    env = environment_record(probes)
    summaries = []
    glm_source = None
    if "glm_a" in wanted:
        summary, glm_source = generate_fp32("glm_a", glm_a_config(), args.out, probes)
        summaries.append(summary)
    elif "glm_a_bf16" in wanted:  # rebuild glm_a's weights in a scratch directory, leave tests/golden/glm_a alone
        with tempfile.TemporaryDirectory() as scratch:
            glm_source = generate_fp32("glm_a", glm_a_config(), scratch, probes)[1]
    if "dsv32_b" in wanted:
        summaries.append(generate_fp32("dsv32_b", dsv32_b_config(), args.out, probes)[0])
    if "glm_a_bf16" in wanted:
        summaries.append(generate_bf16("glm_a_bf16", "glm_a", glm_source, glm_a_config(), args.out, probes))

    failures = []
    for summary in summaries:
        summary.update(env)
        with open(os.path.join(args.out, summary["name"], "golden.json"), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        print(f"\n== {summary['name']} ({summary['model_type']}) -> {os.path.join(args.out, summary['name'])}")
        print(f"   logits: {summary['logits']}")
        for key, value in summary["self_checks"].items():
            print(f"   {key}: {value}")
        failures += enforce(summary)
    if failures:
        print("\nSELF-CHECK FAILURES:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("\nall self-checks passed")


if __name__ == "__main__":
    main()
