"""MTP layer: HF's own decoder-layer class + enorm / hnorm / eh_proj / shared_head (docs/models.md, "The MTP layer as a drafter").

`MtpHead` assembles one step of it and `mtp_fixture` records the MTP reference logits. For the DSA families
HF has no MTP module at all; for deepseek_v3 transformers' own `MtpModel` (generate(use_mtp=True)) is
compared against this assembly in hf_mtp.py."""

from __future__ import annotations

import torch

from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask

from checks import max_abs, rel_err
from checkpoint import fuse_layer_state
from configs import MTP_CHAIN_STEPS, Family, single_layer_config
from hf_runs import sorted_valid_topk


class MtpHead(torch.nn.Module):
    """One MTP step: logits(x_{t+2}) from (h_t, x_{t+1}) at RoPE position t (docs/models.md, "The MTP layer as a drafter")."""

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
        if getattr(self.layer.self_attn, "indexer", None) is not None:  # no indexer in glm4_moe_lite / deepseek_v3
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
    if mtp.topk_record:  # families with an indexer
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
