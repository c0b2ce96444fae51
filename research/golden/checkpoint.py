"""Random weights and the HF-layout checkpoint: per-expert names, the MTP layer, the bf16 cast."""

from __future__ import annotations

import math
import os
import tempfile
from collections import OrderedDict

import torch
from safetensors import safe_open

from configs import SEEDS, Family, single_layer_config


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
# Building one checkpoint: the trunk as save_pretrained writes it, plus the MTP layer
# --------------------------------------------------------------------------------------------


def build_checkpoint(name: str, config, family: Family):
    """Random trunk + MTP layer as checkpoint-named fp32 tensors (trunk names taken from save_pretrained).

    The MTP layer is the family's decoder layer built from the 1-layer config (sparse MoE, and an indexer only
    where the family has one), plus enorm / hnorm / eh_proj / shared_head.norm and the family's copies.

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
    if family.mtp_copies == "noisy":
        # Copies that differ from the main weights, so a test can tell which ones an implementation uses.
        mtp[f"model.layers.{L}.embed_tokens.weight"] = trunk["model.embed_tokens.weight"] + 0.5 * torch.randn(
            trunk["model.embed_tokens.weight"].shape, generator=gen
        )
        mtp[f"model.layers.{L}.shared_head.head.weight"] = trunk["lm_head.weight"] + 0.05 * torch.randn(
            trunk["lm_head.weight"].shape, generator=gen
        )
    elif family.mtp_copies == "equal":
        # Bit-for-bit copies (as in DeepSeek-V3's release), so transformers' use_mtp drafting, which binds the
        # trunk's embedding and lm_head, computes the same thing as an implementation that reads the copies.
        mtp[f"model.layers.{L}.embed_tokens.weight"] = trunk["model.embed_tokens.weight"].clone()
        mtp[f"model.layers.{L}.shared_head.head.weight"] = trunk["lm_head.weight"].clone()
    return OrderedDict(sorted({**trunk, **mtp}.items())), model.config


def cast_checkpoint(ckpt: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    # e_score_correction_bias stays fp32 as in the released checkpoints (and HF keeps it fp32).
    return OrderedDict(
        (k, v.contiguous() if k.endswith("e_score_correction_bias") else v.to(dtype).contiguous()) for k, v in ckpt.items()
    )
