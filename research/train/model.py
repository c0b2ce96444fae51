"""A tiny GLM-5-shaped model (`glm_moe_dsa`) with one MTP layer, for training in PyTorch.

The forward pass is written to reproduce transformers' `GlmMoeDsaForCausalLM` (v5.23) operation by
operation, so that an export loads there and gives the same logits:
  * RMSNorm: statistics in fp32, eps = rms_norm_eps for the residual norms, 1e-6 for the MLA latent
    norms (q_a_layernorm, kv_a_layernorm) as HF constructs them;
  * MLA with interleaved RoPE on the last qk_rope_head_dim dims of q and on the shared rope key;
    softmax scale (qk_nope_head_dim + qk_rope_head_dim) ** -0.5;
  * DSA lightning indexer: wq_b on the normalised q latent, wk + LayerNorm(eps 1e-6, with bias),
    interleaved RoPE on the *first* qk_rope_head_dim dims of each index head (GLM,
    indexer_rope_interleave = true), ReLU(q.k) * index_head_dim ** -0.5, weighted by
    weights_proj(x) * index_n_heads ** -0.5 and summed over heads, causal top-k;
  * IndexShare: layers whose indexer_types entry is "shared" have no indexer and reuse the top-k of
    the nearest full layer below them;
  * MoE: sigmoid router in fp32, e_score_correction_bias used for selection only, top-k experts,
    weights renormalised (+1e-20) and scaled by routed_scaling_factor, plus one shared expert;
  * MTP layer (index num_hidden_layers): eh_proj([enorm(embed(x_{t+1})); hnorm(h_t)]) -> a full sparse
    decoder block with its own indexer -> shared_head.norm -> the main lm_head.

Parameter names equal the Hugging Face checkpoint names, except that routed experts are stored fused
as `mlp.experts.gate_up_proj` [E, 2*I, H] and `mlp.experts.down_proj` [E, H, I] (the layout
transformers uses after loading); export.py splits them into per-expert tensors.

Shape letters: B batch, S query length, T key length (= S here, no cache), H hidden_size,
V vocab_size, N attention heads, E routed experts, K index_topk.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

LATENT_NORM_EPS = 1e-6  # HF builds q_a_layernorm / kv_a_layernorm with its RMSNorm default
INDEXER_K_NORM_EPS = 1e-6


@dataclass
class ModelConfig:
    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 512  # dense MLP (layers < first_k_dense_replace)
    moe_intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    q_lora_rank: int = 96
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    routed_scaling_factor: float = 1.5
    norm_topk_prob: bool = True
    first_k_dense_replace: int = 1
    index_n_heads: int = 8
    index_head_dim: int = 32
    index_topk: int = 64
    indexer_types: list[str] = field(default_factory=lambda: ["full", "shared", "shared", "full"])
    rms_norm_eps: float = 1e-5
    rope_theta: float = 50000.0
    max_position_embeddings: int = 2048
    num_nextn_predict_layers: int = 1
    eos_token_id: int = 0
    pad_token_id: int = 1
    initializer_range: float = 0.02

    def __post_init__(self):
        if len(self.indexer_types) != self.num_hidden_layers:
            raise ValueError("indexer_types needs one entry per trunk layer")
        if self.indexer_types[0] != "full":
            raise ValueError("layer 0 must run its own indexer")
        if self.qk_rope_head_dim > self.index_head_dim or self.qk_rope_head_dim % 2:
            raise ValueError("bad rope / index head sizes")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def donor_groups(self) -> dict[int, list[int]]:
        """{full layer: [that layer and the shared layers that reuse its top-k]} for the trunk."""
        groups: dict[int, list[int]] = {}
        donor = 0
        for layer, kind in enumerate(self.indexer_types):
            if kind == "full":
                donor = layer
            groups.setdefault(donor, []).append(layer)
        return groups


# ----------------------------------------------------------------------------------------------
# Basic pieces


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(input_dtype)


def rope_angles(positions: torch.Tensor, rope_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of the per-pair angles, each [S, rope_dim / 2] (same arithmetic as HF)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.int64).to(torch.float) / rope_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]  # [S, rope_dim/2]
    return angles.cos(), angles.sin()


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates pairs (x[2i], x[2i+1]) by angle i; returns them de-interleaved ([evens | odds]), as HF
    does. q and k must both go through this so that their dot products are unchanged.

    x: [..., S, rope_dim] with cos/sin broadcastable to [..., S, rope_dim / 2].
    """
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat([even * cos - odd * sin, odd * cos + even * sin], dim=-1)


class DenseMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ----------------------------------------------------------------------------------------------
# DSA lightning indexer


class Indexer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.index_n_heads
        self.head_dim = config.index_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.wq_b = nn.Linear(config.q_lora_rank, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.LayerNorm(self.head_dim, eps=INDEXER_K_NORM_EPS)
        self.weights_proj = nn.Linear(config.hidden_size, self.n_heads, bias=False)
        self.softmax_scale = self.head_dim ** -0.5
        # True: the exact contraction order of transformers (bit-identical top-k, used for export
        # checks and evaluation). False: a faster order for training (differs only by rounding).
        self.hf_exact = True

    def forward(self, x: torch.Tensor, q_latent: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                causal: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Index scores [B, R, T] in fp32, -inf where the key is in the future.

        x: [B, S, H] (the layer's normed input), q_latent: [B, S, q_lora_rank] (normalised),
        cos/sin: [S, rope/2], causal: [S, T] bool (True = visible). rows: optional [R] query rows to
        score (all S rows when None); keys are always all T positions.
        """
        batch, seq, _ = x.shape
        q_cos, q_sin = (cos, sin) if rows is None else (cos[rows], sin[rows])
        if rows is not None:
            q_latent, causal = q_latent[:, rows], causal[rows]
        n_rows = q_latent.shape[1]
        q = self.wq_b(q_latent).view(batch, n_rows, self.n_heads, self.head_dim)  # [B, R, NI, DI]
        q_rot, q_pass = q.split([self.rope_dim, self.head_dim - self.rope_dim], dim=-1)
        q = torch.cat([apply_rope_interleaved(q_rot, q_cos[None, :, None, :], q_sin[None, :, None, :]), q_pass],
                      dim=-1)  # [B, R, NI, DI]
        k = self.k_norm(self.wk(x)).unsqueeze(2)  # [B, T, 1, DI]
        k_rot, k_pass = k.split([self.rope_dim, self.head_dim - self.rope_dim], dim=-1)
        k = torch.cat([apply_rope_interleaved(k_rot, cos[None, :, None, :], sin[None, :, None, :]), k_pass],
                      dim=-1).squeeze(2)  # [B, T, DI]

        head_weights = self.weights_proj(x if rows is None else x[:, rows]).float() * (self.n_heads ** -0.5)
        if self.hf_exact:
            # Same contraction as HF: per query row, [NI, DI] @ [DI, T], then [1, NI] @ [NI, T].
            scores = torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * self.softmax_scale
            scores = F.relu(scores)  # [B, R, NI, T]
            index_scores = torch.matmul(head_weights.unsqueeze(-2), scores).squeeze(-2)  # [B, R, T]
        else:
            q_heads = (q.float() * self.softmax_scale).transpose(1, 2)  # [B, NI, R, DI]
            scores = F.relu(torch.matmul(q_heads, k.float().transpose(-1, -2).unsqueeze(1)))  # [B, NI, R, T]
            index_scores = (scores * head_weights.transpose(1, 2).unsqueeze(-1)).sum(dim=1)  # [B, R, T]
        return index_scores.masked_fill(~causal, float("-inf"))


# ----------------------------------------------------------------------------------------------
# MLA attention with DSA


@dataclass
class AttentionExtras:
    """What a layer hands back besides its output (all [B, S, T] unless noted)."""
    topk_indices: torch.Tensor | None  # [B, S, K'] int64; None in dense mode
    allowed: torch.Tensor  # [B, S, T] bool, keys the attention could see (causal, and selected when sparse)
    # Only when KL rows are requested ([B, R, T] each, R = len(kl_rows)):
    kl_index_scores: torch.Tensor | None  # this layer's own indexer scores with grad (None on shared layers)
    head_mean_probs: torch.Tensor | None  # detached attention probabilities averaged over heads


class MlaAttention(nn.Module):
    def __init__(self, config: ModelConfig, has_indexer: bool):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.nope_dim = config.qk_nope_head_dim
        self.rope_dim = config.qk_rope_head_dim
        self.qk_dim = config.qk_head_dim
        self.v_dim = config.v_head_dim
        self.kv_lora_rank = config.kv_lora_rank
        self.scaling = self.qk_dim ** -0.5
        h = config.hidden_size
        self.q_a_proj = nn.Linear(h, config.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(config.q_lora_rank, LATENT_NORM_EPS)
        self.q_b_proj = nn.Linear(config.q_lora_rank, self.num_heads * self.qk_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, config.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(config.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(config.kv_lora_rank, self.num_heads * (self.nope_dim + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_dim, h, bias=False)
        self.indexer = Indexer(config) if has_indexer else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, causal: torch.Tensor,
                sparse: bool, donor_topk: torch.Tensor | None,
                kl_rows: torch.Tensor | None) -> tuple[torch.Tensor, AttentionExtras]:
        """x: [B, S, H] normed input; causal: [S, T] bool; kl_rows: [R] query rows on which to return
        the indexer's KL ingredients (None: no KL). Returns ([B, S, H], extras).

        The indexer never receives gradient from the LM loss: top-k selection is not differentiable,
        and its KL scores are computed on detached inputs (DeepSeek-V3.2 recipe)."""
        batch, seq, _ = x.shape
        q_latent = self.q_a_layernorm(self.q_a_proj(x))  # [B, S, r_q]
        q = self.q_b_proj(q_latent).view(batch, seq, self.num_heads, self.qk_dim).transpose(1, 2)  # [B, N, S, d_qk]
        q_nope, q_rot = q.split([self.nope_dim, self.rope_dim], dim=-1)

        compressed = self.kv_a_proj_with_mqa(x)  # [B, S, r_kv + d_r]
        kv_latent, k_rot = compressed.split([self.kv_lora_rank, self.rope_dim], dim=-1)
        kv_latent = self.kv_a_layernorm(kv_latent).view(batch, 1, seq, self.kv_lora_rank)  # [B, 1, T, r_kv]
        k_rot = k_rot.view(batch, 1, seq, self.rope_dim)  # [B, 1, T, d_r]
        q_rot = apply_rope_interleaved(q_rot, cos, sin)  # [B, N, S, d_r]
        k_rot = apply_rope_interleaved(k_rot, cos, sin)  # [B, 1, T, d_r]
        query = torch.cat([q_nope, q_rot], dim=-1)  # [B, N, S, d_qk]

        kv = self.kv_b_proj(kv_latent).view(batch, seq, self.num_heads, self.nope_dim + self.v_dim).transpose(1, 2)
        k_nope, value = kv.split([self.nope_dim, self.v_dim], dim=-1)  # [B, N, T, d_n], [B, N, T, d_v]
        key = torch.cat([k_nope, k_rot.expand(-1, self.num_heads, -1, -1)], dim=-1)  # [B, N, T, d_qk]

        allowed = causal.expand(batch, seq, seq)  # [B, S, T]
        topk_indices = None
        if sparse:
            if self.indexer is not None:
                with torch.no_grad():
                    index_scores = self.indexer(x, q_latent, cos, sin, causal)  # [B, S, T]
                k = min(self.config.index_topk, seq)
                topk_indices = index_scores.topk(k, dim=-1).indices  # [B, S, K]
            else:
                topk_indices = donor_topk
            if topk_indices is None:
                raise ValueError("a shared layer needs the top-k of a full layer below it")
            selected = torch.zeros(batch, seq, seq, dtype=torch.bool, device=x.device)
            selected.scatter_(-1, topk_indices, True)
            allowed = allowed & selected

        scores = torch.matmul(query, key.transpose(2, 3)) * self.scaling  # [B, N, S, T]
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        out = torch.matmul(probs, value).transpose(1, 2).reshape(batch, seq, self.num_heads * self.v_dim)
        kl_scores = head_mean = None
        if kl_rows is not None:
            head_mean = probs.detach()[:, :, kl_rows].mean(dim=1)  # [B, R, T]
            if self.indexer is not None:
                kl_scores = self.indexer(x.detach(), q_latent.detach(), cos, sin, causal, rows=kl_rows)
        return self.o_proj(out), AttentionExtras(topk_indices, allowed, kl_scores, head_mean)


# ----------------------------------------------------------------------------------------------
# MoE


class Router(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.routed_scaling_factor = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.zeros(config.n_routed_experts, config.hidden_size))
        # Selection-only bias, updated outside autograd by the aux-loss-free balancer (train.py).
        self.register_buffer("e_score_correction_bias", torch.zeros(config.n_routed_experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [M, H] -> (weights [M, k] fp32, expert ids [M, k])."""
        logits = F.linear(x.float(), self.weight.float())  # [M, E]
        scores = logits.sigmoid()
        chosen = torch.topk(scores + self.e_score_correction_bias, k=self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, chosen)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.routed_scaling_factor, chosen


class RoutedExperts(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        e, h, i = config.n_routed_experts, config.hidden_size, config.moe_intermediate_size
        self.num_experts = e
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))  # rows [gate (I) | up (I)]
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [M, H], weights/chosen: [M, k]. Returns ([M, H], tokens per expert [E])."""
        out = torch.zeros_like(x)
        load = torch.zeros(self.num_experts, dtype=torch.float32, device=x.device)
        for expert in range(self.num_experts):
            token_idx, slot = torch.where(chosen == expert)
            if token_idx.numel() == 0:
                continue
            load[expert] = token_idx.numel()
            gate, up = F.linear(x[token_idx], self.gate_up_proj[expert]).chunk(2, dim=-1)  # [m, I] each
            y = F.linear(F.silu(gate) * up, self.down_proj[expert])  # [m, H]
            out.index_add_(0, token_idx, y * weights[token_idx, slot, None])
        return out, load


class MoE(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate = Router(config)
        self.experts = RoutedExperts(config)
        self.shared_experts = DenseMLP(config.hidden_size, config.moe_intermediate_size * config.n_shared_experts)
        self.last_load: torch.Tensor | None = None  # [E] tokens per expert in the last forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # [M, H]
        weights, chosen = self.gate(flat)
        routed, self.last_load = self.experts(flat, weights, chosen)
        return routed.view(shape) + self.shared_experts(x)


# ----------------------------------------------------------------------------------------------
# Layers and model


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int, is_mtp: bool = False):
        super().__init__()
        has_indexer = is_mtp or config.indexer_types[layer_index] == "full"
        self.self_attn = MlaAttention(config, has_indexer)
        dense = (not is_mtp) and layer_index < config.first_k_dense_replace
        self.mlp = DenseMLP(config.hidden_size, config.intermediate_size) if dense else MoE(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, h: torch.Tensor, cos, sin, causal, sparse, donor_topk, kl_rows):
        attn_out, extras = self.self_attn(self.input_layernorm(h), cos, sin, causal, sparse, donor_topk, kl_rows)
        h = h + attn_out
        h = h + self.mlp(self.post_attention_layernorm(h))
        return h, extras


class SharedHead(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class MtpLayer(DecoderLayer):
    """Next-n layer: predicts x_{t+2} from (h_t, x_{t+1}); uses the main embedding and lm_head."""

    def __init__(self, config: ModelConfig):
        super().__init__(config, config.num_hidden_layers, is_mtp=True)
        self.enorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hnorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.shared_head = SharedHead(config)


class Trunk(nn.Module):
    """Holds what HF calls `model.*`: embeddings, trunk layers + the MTP layer, final norm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        layers = [DecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        layers += [MtpLayer(config) for _ in range(config.num_nextn_predict_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


@dataclass
class ForwardResult:
    logits: torch.Tensor  # [B, S, V]: next token x_{t+1}
    mtp_logits: torch.Tensor | None  # [B, S, V]: x_{t+2} from (h_t, x_{t+1})
    indexer_kl: torch.Tensor  # scalar: sum over indexers of the mean per-row KL(attention || indexer)
    expert_load: list[torch.Tensor]  # per MoE layer (trunk then MTP), tokens per expert [E]


def indexer_kl_loss(index_scores: torch.Tensor, allowed: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of KL(target || softmax(index_scores over the allowed keys)).

    index_scores, target: [B, R, T]; allowed: [B, R, T] bool; target sums to 1 over allowed keys.
    """
    log_q = F.log_softmax(index_scores.masked_fill(~allowed, float("-inf")), dim=-1)
    log_q = log_q.masked_fill(~allowed, 0.0)
    kl = torch.xlogy(target, target) - target * log_q  # [B, S, T]
    return kl.sum(dim=-1).mean()


class GlmTinyForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Trunk(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif isinstance(module, RoutedExperts):
                nn.init.normal_(module.gate_up_proj, mean=0.0, std=std)
                nn.init.normal_(module.down_proj, mean=0.0, std=std)
            elif isinstance(module, Router):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                module.e_score_correction_bias.zero_()
            elif isinstance(module, (RMSNorm, nn.LayerNorm)):
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def moe_layers(self) -> list[MoE]:
        return [layer.mlp for layer in self.model.layers if isinstance(layer.mlp, MoE)]

    def forward(self, input_ids: torch.Tensor, next_ids: torch.Tensor | None = None, sparse: bool = True,
                kl_rows: torch.Tensor | None = None) -> ForwardResult:
        """input_ids: [B, S] tokens x_0..x_{S-1}; next_ids: [B, S] tokens x_1..x_S for the MTP layer
        (None skips MTP). sparse: DSA top-k attention (True) or dense causal attention (False).
        kl_rows: [R] query rows on which the indexer KL loss is computed (None: no KL)."""
        want_indexer_kl = kl_rows is not None
        config = self.config
        batch, seq = input_ids.shape
        device = input_ids.device
        positions = torch.arange(seq, device=device)
        cos, sin = rope_angles(positions, config.qk_rope_head_dim, config.rope_theta)  # [S, rope/2]
        causal = positions[None, :] <= positions[:, None]  # [S, T]

        for moe in self.moe_layers():
            moe.last_load = None
        h = self.model.embed_tokens(input_ids)  # [B, S, H]
        donor_topk = None
        group_extras: dict[int, list[AttentionExtras]] = {}
        groups = config.donor_groups()
        donor_of = {member: donor for donor, members in groups.items() for member in members}
        for layer_index in range(config.num_hidden_layers):
            layer = self.model.layers[layer_index]
            h, extras = layer(h, cos, sin, causal, sparse, donor_topk, kl_rows)
            if layer.self_attn.indexer is not None:
                donor_topk = extras.topk_indices
            group_extras.setdefault(donor_of[layer_index], []).append(extras)
        h_final = self.model.norm(h)  # [B, S, H]
        logits = self.lm_head(h_final)

        kl_terms = []
        if want_indexer_kl:
            # IndexShare: a full layer's indexer serves its shared followers too, so its target is
            # the head-mean attention averaged over the whole group (all on the same allowed set).
            for donor, extras_list in group_extras.items():
                target = torch.stack([e.head_mean_probs for e in extras_list]).mean(0)
                own = extras_list[0]
                kl_terms.append(indexer_kl_loss(own.kl_index_scores, own.allowed[:, kl_rows], target))

        mtp_logits = None
        if next_ids is not None and config.num_nextn_predict_layers > 0:
            mtp = self.model.layers[config.num_hidden_layers]
            embedded = self.model.embed_tokens(next_ids)  # [B, S, H]
            u = mtp.eh_proj(torch.cat([mtp.enorm(embedded), mtp.hnorm(h_final)], dim=-1))  # [B, S, H]
            g, extras = mtp(u, cos, sin, causal, sparse, None, kl_rows)
            mtp_logits = self.lm_head(mtp.shared_head.norm(g))
            if want_indexer_kl:
                kl_terms.append(indexer_kl_loss(extras.kl_index_scores, extras.allowed[:, kl_rows],
                                                extras.head_mean_probs))

        indexer_kl = torch.stack(kl_terms).sum() if kl_terms else logits.new_zeros(())
        loads = [moe.last_load for moe in self.moe_layers() if moe.last_load is not None]
        return ForwardResult(logits, mtp_logits, indexer_kl, loads)

    def set_indexer_exact(self, exact: bool) -> None:
        """See Indexer.hf_exact."""
        for module in self.modules():
            if isinstance(module, Indexer):
                module.hf_exact = exact

    def indexer_parameters(self) -> list[nn.Parameter]:
        return [p for name, p in self.named_parameters() if ".indexer." in name]

    def main_parameters(self) -> list[nn.Parameter]:
        return [p for name, p in self.named_parameters() if ".indexer." not in name]


def count_parameters(model: nn.Module) -> dict[str, int]:
    total = sum(p.numel() for p in model.parameters())
    config: ModelConfig = model.config
    per_expert = 3 * config.hidden_size * config.moe_intermediate_size
    n_moe = len(model.moe_layers())
    inactive = n_moe * (config.n_routed_experts - config.num_experts_per_tok) * per_expert
    return {"total": total, "active_per_token": total - inactive}
