"""Running HF: load the written checkpoint back, prefill and decode through its cache, and check its
cache paths against each other."""

from __future__ import annotations

import torch

from transformers import DynamicCache

from checks import max_abs, rel_err
from configs import DECODE_STEPS, FIRST_CHUNK_LENGTHS, Family
from checkpoint import fuse_layer_state


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
    recorder = TopkRecorder(model, family) if family.has_indexer else None  # no indexer: no top-k to record
    tap = NormTap(model)
    seq = ids.shape[0]
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    prefill_logits = out.logits[0].float()  # [T, V]
    prenorm, postnorm = tap.pre, tap.post  # [T, H] each
    prefill_topk = recorder.pop() if recorder else {}  # layer -> [T, K]
    greedy = decode_ids is None
    tokens, decode_rows, decode_topk = [], [], []
    last = prefill_logits[-1]
    for j in range(DECODE_STEPS):
        token = int(last.argmax()) if greedy else int(decode_ids[j])
        tokens.append(token)
        step = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
        last = step.logits[0, -1].float()  # [V]
        decode_rows.append(last)
        decode_topk.append(recorder.pop() if recorder else {})
    tap.hook.remove()
    if recorder:
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
# Loading the written checkpoint back
# --------------------------------------------------------------------------------------------


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
    # ignore pattern only covers layer 78 (GLM-5) / 47 (GLM-4.7-Flash) / 61 (DeepSeek). Anything else
    # unexpected is an error.
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
    }
    if family.has_indexer:
        report[f"{tag}load_back"]["weights_proj_dtype"] = str(model.model.layers[0].self_attn.indexer.weights_proj.weight.dtype)
    return model
