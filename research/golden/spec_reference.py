"""Independent float64 re-implementation of docs/models.md (the trunk, MLA, the indexer, IndexShare, MoE, MTP).

It reads the checkpoint tensors only, never HF's modules, and `spec_cross_check` compares it with what HF
computed (logits, MTP logits, top-k sets) and records the robustness margins. Model types without an
indexer (glm4_moe_lite, deepseek_v3) run dense MLA over every causal key on every layer, MTP included."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from checks import max_abs, rel_err, topk_margin
from configs import indexer_types_of, mlp_layer_types_of


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


class SpecReference:
    """Written from docs/models.md only, on checkpoint-named tensors, in float64, no cache (full sequences)."""

    def __init__(self, config, ckpt: dict[str, torch.Tensor], indexer_style: str | None, mla_style: str = "interleaved"):
        self.c = config
        self.w = {k: v.to(torch.float64) for k, v in ckpt.items()}
        self.indexer_style = indexer_style  # None: the model has no indexer
        self.mla_style = mla_style  # main MLA RoPE pairing
        self.indexer_types = indexer_types_of(config)  # "full" / "shared" / "dense" per layer
        self.has_indexer = hasattr(config, "index_topk")
        self.mlp_layer_types = mlp_layer_types_of(config)
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

    def mla_and_indexer(self, p, x, positions, prev_allowed, mode):
        """x [T, H] normed input; mode "full" (own indexer), "shared" (prev_allowed) or "dense" (every causal key).

        Returns (attention output [T, H], allowed [T, T] bool, index scores or None)."""
        c = self.c
        n_h, d_n, d_r, d_v = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        seq = x.shape[0]
        cos, sin = self.angles(positions)  # [T, d_r/2]
        c_q = self.rms(self.linear(x, p + "self_attn.q_a_proj.weight"), self.w[p + "self_attn.q_a_layernorm.weight"], 1e-6)
        q = self.linear(c_q, p + "self_attn.q_b_proj.weight").view(seq, n_h, d_n + d_r)  # [T, N_h, d_qk]
        q_n, q_r = q[..., :d_n], rotate_pairs(q[..., d_n:], cos[:, None], sin[:, None], self.mla_style)
        kv_a = self.linear(x, p + "self_attn.kv_a_proj_with_mqa.weight")  # [T, r_kv + d_r]
        latent = self.rms(kv_a[:, : c.kv_lora_rank], self.w[p + "self_attn.kv_a_layernorm.weight"], 1e-6)  # [T, r_kv]
        k_r = rotate_pairs(kv_a[:, c.kv_lora_rank :], cos, sin, self.mla_style)  # [T, d_r]
        kv = self.linear(latent, p + "self_attn.kv_b_proj.weight").view(seq, n_h, d_n + d_v)  # [T, N_h, d_n+d_v]
        k_n, v = kv[..., :d_n], kv[..., d_n:]
        causal = positions[None, :] <= positions[:, None]  # [T(query), T(key)]
        scores_index = None
        if mode == "full":
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
        elif mode == "shared":
            allowed = prev_allowed
        else:  # "dense": no indexer, every causal key
            allowed = causal
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

    def layer(self, l, h, positions, prev_allowed, mode, sparse):
        p = f"model.layers.{l}."
        eps = self.c.rms_norm_eps
        attn, allowed, scores = self.mla_and_indexer(p, self.rms(h, self.w[p + "input_layernorm.weight"], eps), positions, prev_allowed, mode)
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
            h, allowed, scores = self.layer(l, h, positions, allowed, self.indexer_types[l], self.mlp_layer_types[l] == "sparse")
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
        g, _, scores = self.layer(L, u, torch.arange(u.shape[0]), None, "full" if self.has_indexer else "dense", True)
        return self.rms(g, self.w[p + "shared_head.norm.weight"], eps) @ head.T, g, scores


# --------------------------------------------------------------------------------------------
# Spec cross-check
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def spec_cross_check(config, ckpt, style, fixture, report, with_mtp: bool, mla_style: str = "interleaved") -> None:
    """style: the indexer RoPE style, None for a model without an indexer (then no top-k checks or margins)."""
    ref = SpecReference(config, ckpt, style, mla_style)
    ids = fixture["input_ids"]
    seq = ids.shape[0]
    logits, _, post, scores = ref.trunk(ids)
    report["spec_ref_prefill_logits"] = {"max_abs": max_abs(fixture["prefill_logits"], logits), "rel": rel_err(fixture["prefill_logits"], logits)}
    report["spec_ref_postnorm"] = {"rel": rel_err(fixture["prefill_hidden_postnorm"], post)}
    K = getattr(config, "index_topk", None)
    set_mismatch_rows = 0
    if ref.has_indexer:
        margins = []
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
    if not ref.has_indexer:
        # The cached decode rows too: the full sequence input_ids + decode_ids, rows T .. T+n-1.
        start = len(ref.router_margins)
        longer = ref.trunk(torch.cat([ids, fixture["decode_ids"]]))[0][seq:]  # [n, V]
        report["spec_ref_decode_logits"] = {"rel": rel_err(fixture["decode_logits"], longer)}
        report["spec_ref_min_router_margin_decode"] = min(ref.router_margins[start:])
    trunk_margins = len(ref.router_margins)
    if hasattr(ref, "yarn_lo_hi"):
        report["yarn_lo_hi"] = list(ref.yarn_lo_hi)
    report["softmax_scale"] = ref.softmax_scale
    if with_mtp:
        post_hf = fixture["prefill_hidden_postnorm"]
        mtp_logits, _, mtp_scores = ref.mtp(post_hf[:-1], ids[1:])
        report["spec_ref_mtp_prefill_logits"] = {"rel": rel_err(fixture["mtp_prefill_logits"], mtp_logits)}
        if ref.has_indexer:
            report["spec_ref_mtp_topk_margin"] = topk_margin(mtp_scores, K)
        else:
            pre_hf = fixture["prefill_hidden_prenorm"]
            pre_logits = ref.mtp(pre_hf[:-1], ids[1:])[0]
            report["spec_ref_mtp_prefill_logits_prenorm"] = {"rel": rel_err(fixture["mtp_prefill_logits_prenorm"], pre_logits)}
        # Chained drafting = the same layer over the extended causal sequence of pairs.
        for variant in ("normed", "raw"):
            hidden = torch.cat([post_hf, fixture[f"mtp_chain_{variant}_hidden"][:-1]])  # [T-1+k, H]
            tokens = torch.cat([ids[1:], fixture["mtp_chain_first_token"], fixture[f"mtp_chain_{variant}_tokens"][:-1]])
            chain_logits, _, chain_scores = ref.mtp(hidden, tokens)
            report[f"spec_ref_mtp_chain_{variant}"] = {"rel": rel_err(fixture[f"mtp_chain_{variant}_logits"], chain_logits[seq - 1 :])}
            if ref.has_indexer:
                report["spec_ref_mtp_topk_margin"] = min(report["spec_ref_mtp_topk_margin"], topk_margin(chain_scores[seq - 1 :], K))
        if not ref.has_indexer:
            # The MTP layer's router too (the DSA fixtures record the trunk's only).
            report["spec_ref_min_router_margin_mtp"] = min(ref.router_margins[trunk_margins:])
    if "hf_mtp_sequence" in fixture:
        # transformers' own use_mtp drafts against the float64 spec: trunk over the whole generated sequence
        # (decode positions included), MTP layer over all its pairs at RoPE positions 0.. (HF uses 1..).
        sequence = fixture["hf_mtp_sequence"]
        start = len(ref.router_margins)
        _, _, post_seq, _ = ref.trunk(sequence)
        report["spec_ref_min_router_margin_hf_sequence_trunk"] = min(ref.router_margins[start:])
        start = len(ref.router_margins)
        draft_logits = ref.mtp(post_seq[:-1], sequence[1:])[0][fixture["hf_mtp_draft_anchor"]]  # [n, V]
        report["spec_ref_min_router_margin_hf_sequence_mtp"] = min(ref.router_margins[start:])
        report["spec_ref_hf_mtp_draft_logits"] = {"rel": rel_err(fixture["hf_mtp_draft_logits"], draft_logits)}
        if not torch.equal(draft_logits.argmax(-1), fixture["hf_mtp_draft_tokens"]):
            raise AssertionError("transformers' use_mtp drafts differ from the spec re-implementation's argmax")
    if set_mismatch_rows:
        raise AssertionError(f"indexer top-k sets differ from the spec re-implementation in {set_mismatch_rows} rows")
