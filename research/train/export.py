"""Export the tiny model to the Hugging Face `glm_moe_dsa` layout and verify it with transformers.

Written files (in --out):
  config.json            model_type glm_moe_dsa, every applicable field of docs/models.md, "Notation and configuration"
  model.safetensors      bf16 tensors with checkpoint names; `mlp.gate.e_score_correction_bias` fp32.
                         Routed experts per expert (`mlp.experts.{e}.{gate,up,down}_proj.weight`);
                         indexer tensors only on "full" layers; the MTP layer is layer
                         `num_hidden_layers` (enorm, hnorm, eh_proj, shared_head.norm, a full block with
                         its own indexer) and carries no embed_tokens / shared_head.head copies.
  tokenizer.json, tokenizer_config.json

Verification (`verify_with_transformers`): transformers loads the trunk in fp32 with eager attention
(it fuses the per-expert tensors at load time and ignores the MTP layer as an unexpected key); its
logits on a held-out 512-token sequence are compared with this repository's model run on the same
bf16-rounded weights. The check asserts a relative error (max |diff| / max |logit|) below 1e-4.

Usage:
  python research/train/export.py --checkpoint build/train_work/final_fp32.pt --out models/glm-tiny-mtp \
      [--work-dir build/train_work]
  python research/train/export.py --verify-only models/glm-tiny-mtp [--work-dir build/train_work]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from model import GlmTinyForCausalLM, ModelConfig

VERIFY_RELATIVE_TOLERANCE = 1e-4
FP32_TENSORS = ("mlp.gate.e_score_correction_bias",)


def hf_config_dict(config: ModelConfig, torch_dtype: str = "bfloat16") -> dict:
    n = config.num_hidden_layers
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "moe_intermediate_size": config.moe_intermediate_size,
        "num_hidden_layers": n,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_attention_heads,
        "q_lora_rank": config.q_lora_rank,
        "kv_lora_rank": config.kv_lora_rank,
        "qk_nope_head_dim": config.qk_nope_head_dim,
        "qk_rope_head_dim": config.qk_rope_head_dim,
        "qk_head_dim": config.qk_head_dim,
        "head_dim": config.qk_rope_head_dim,
        "v_head_dim": config.v_head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "rope_interleave": True,
        "max_position_embeddings": config.max_position_embeddings,
        "n_routed_experts": config.n_routed_experts,
        "n_shared_experts": config.n_shared_experts,
        "num_experts_per_tok": config.num_experts_per_tok,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": config.norm_topk_prob,
        "routed_scaling_factor": config.routed_scaling_factor,
        "moe_layer_freq": 1,
        "moe_router_dtype": "float32",
        "first_k_dense_replace": config.first_k_dense_replace,
        "mlp_layer_types": ["dense" if i < config.first_k_dense_replace else "sparse" for i in range(n)],
        "index_n_heads": config.index_n_heads,
        "index_head_dim": config.index_head_dim,
        "index_topk": config.index_topk,
        "indexer_types": list(config.indexer_types),
        "indexer_rope_interleave": True,
        "num_nextn_predict_layers": config.num_nextn_predict_layers,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "initializer_range": config.initializer_range,
        "use_cache": True,
        "dtype": torch_dtype,
        "transformers_version": _transformers_version(),
    }


def model_config_from_hf(hf: dict) -> ModelConfig:
    rope = hf.get("rope_parameters") or {}
    return ModelConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"], intermediate_size=hf["intermediate_size"],
        moe_intermediate_size=hf["moe_intermediate_size"], num_hidden_layers=hf["num_hidden_layers"],
        num_attention_heads=hf["num_attention_heads"], q_lora_rank=hf["q_lora_rank"],
        kv_lora_rank=hf["kv_lora_rank"], qk_nope_head_dim=hf["qk_nope_head_dim"],
        qk_rope_head_dim=hf["qk_rope_head_dim"], v_head_dim=hf["v_head_dim"],
        n_routed_experts=hf["n_routed_experts"], n_shared_experts=hf["n_shared_experts"],
        num_experts_per_tok=hf["num_experts_per_tok"], routed_scaling_factor=hf["routed_scaling_factor"],
        norm_topk_prob=hf["norm_topk_prob"], first_k_dense_replace=hf["first_k_dense_replace"],
        index_n_heads=hf["index_n_heads"], index_head_dim=hf["index_head_dim"], index_topk=hf["index_topk"],
        indexer_types=list(hf["indexer_types"]), rms_norm_eps=hf["rms_norm_eps"],
        rope_theta=float(rope.get("rope_theta", hf.get("rope_theta"))),
        max_position_embeddings=hf["max_position_embeddings"],
        num_nextn_predict_layers=hf["num_nextn_predict_layers"], eos_token_id=hf["eos_token_id"],
        pad_token_id=hf["pad_token_id"], initializer_range=hf.get("initializer_range", 0.02))


def _transformers_version() -> str:
    try:
        import transformers
        return transformers.__version__
    except ImportError:
        return "none"


def checkpoint_tensors(model: GlmTinyForCausalLM) -> dict[str, torch.Tensor]:
    """State dict under checkpoint names: per-expert tensors, bf16 except the router bias."""
    tensors: dict[str, torch.Tensor] = {}
    for name, value in model.state_dict().items():
        value = value.detach().cpu()
        if name.endswith("mlp.experts.gate_up_proj"):  # [E, 2I, H] -> per expert gate [I, H], up [I, H]
            prefix = name[: -len("gate_up_proj")]
            for expert, fused in enumerate(value):
                gate, up = fused.chunk(2, dim=0)
                tensors[f"{prefix}{expert}.gate_proj.weight"] = gate
                tensors[f"{prefix}{expert}.up_proj.weight"] = up
        elif name.endswith("mlp.experts.down_proj"):  # [E, H, I] -> per expert [H, I]
            prefix = name[: -len("down_proj")]
            for expert, matrix in enumerate(value):
                tensors[f"{prefix}{expert}.down_proj.weight"] = matrix
        else:
            tensors[name] = value
    out = {}
    for name, value in tensors.items():
        keep_fp32 = any(name.endswith(suffix) for suffix in FP32_TENSORS)
        out[name] = value.to(torch.float32 if keep_fp32 else torch.bfloat16).contiguous()
    return out


def load_checkpoint_tensors(model: GlmTinyForCausalLM, tensors: dict[str, torch.Tensor]) -> None:
    """Inverse of checkpoint_tensors: fuses per-expert tensors and loads everything as fp32."""
    state = {}
    expected = model.state_dict()
    for name in expected:
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            count = expected[name].shape[0]
            state[name] = torch.stack([torch.cat([tensors.pop(f"{prefix}{e}.gate_proj.weight"),
                                                  tensors.pop(f"{prefix}{e}.up_proj.weight")]) for e in range(count)])
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            count = expected[name].shape[0]
            state[name] = torch.stack([tensors.pop(f"{prefix}{e}.down_proj.weight") for e in range(count)])
        else:
            state[name] = tensors.pop(name)
    if tensors:
        raise KeyError(f"unexpected tensors in checkpoint: {sorted(tensors)[:8]}")
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=True)


def bf16_rounded_copy(model: GlmTinyForCausalLM) -> GlmTinyForCausalLM:
    """The model exactly as the export stores it, but computing in fp32."""
    rounded = GlmTinyForCausalLM(model.config)
    load_checkpoint_tensors(rounded, checkpoint_tensors(model))
    return rounded.eval()


def export_checkpoint(model: GlmTinyForCausalLM, out_dir: Path, tokenizer_dir: Path | None) -> None:
    """Writes config.json and model.safetensors; copies the tokenizer files from tokenizer_dir unless
    it is None (the caller then writes them itself)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = checkpoint_tensors(model)
    save_file(dict(sorted(tensors.items())), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(hf_config_dict(model.config), indent=2) + "\n")
    if tokenizer_dir is not None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(Path(tokenizer_dir) / name, out_dir / name)


def load_exported(out_dir: Path) -> GlmTinyForCausalLM:
    hf = json.loads((Path(out_dir) / "config.json").read_text())
    model = GlmTinyForCausalLM(model_config_from_hf(hf))
    load_checkpoint_tensors(model, load_file(str(Path(out_dir) / "model.safetensors")))
    return model.eval()


@torch.no_grad()
def verify_with_transformers(out_dir: Path, tokens: torch.Tensor) -> dict:
    """Compares transformers' logits with ours on `tokens` [1, S]. Raises AssertionError on mismatch."""
    from transformers import AutoModelForCausalLM

    ours = load_exported(out_dir)
    hf_model = AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32, attn_implementation="eager")
    hf_model.eval()
    hf_names = set(hf_model.state_dict())
    missing_in_hf = [n for n in hf_names if "rotary" not in n and n not in _hf_expected_names(ours)]
    hf_logits = hf_model(input_ids=tokens).logits.float()  # [1, S, V]
    our_logits = ours(tokens, None, sparse=True).logits  # [1, S, V]
    diff = (hf_logits - our_logits).abs()
    result = {
        "sequence_length": int(tokens.shape[1]),
        "index_topk": ours.config.index_topk,
        "max_abs_diff": float(diff.max()),
        "max_abs_logit": float(hf_logits.abs().max()),
        "relative_error": float(diff.max() / hf_logits.abs().max()),
        "mean_abs_diff": float(diff.mean()),
        "argmax_agreement": float((hf_logits.argmax(-1) == our_logits.argmax(-1)).float().mean()),
        "hf_parameter_tensors": len(hf_names),
        "unmatched_hf_names": missing_in_hf,
    }
    assert not missing_in_hf, f"transformers has tensors we did not expect: {missing_in_hf[:5]}"
    assert result["relative_error"] < VERIFY_RELATIVE_TOLERANCE, f"export check failed: {result}"
    return result


def _hf_expected_names(model: GlmTinyForCausalLM) -> set[str]:
    """Our trunk tensor names as transformers holds them after load (fused experts, no MTP layer)."""
    mtp_prefix = f"model.layers.{model.config.num_hidden_layers}."
    return {n for n in model.state_dict() if not n.startswith(mtp_prefix)}


def heldout_sequence(work_dir: Path, length: int) -> torch.Tensor:
    """The first `length` held-out tokens of the prose corpus 'austen' (as tokenized by train.py)."""
    path = Path(work_dir) / "tokens" / "austen_holdout.npy"
    tokens = np.load(path)[:length].astype(np.int64)
    return torch.from_numpy(tokens)[None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help="fp32 training checkpoint written by train.py")
    parser.add_argument("--out", type=Path, help="output directory")
    parser.add_argument("--verify-only", type=Path, help="only verify an exported directory")
    parser.add_argument("--work-dir", type=Path, default=Path(__file__).resolve().parents[2] / "build" / "train_work")
    parser.add_argument("--seq-len", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out_dir = args.verify_only
    if out_dir is None:
        if args.checkpoint is None or args.out is None:
            parser.error("need --checkpoint and --out (or --verify-only DIR)")
        saved = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        model = GlmTinyForCausalLM(ModelConfig(**saved["config"]))
        model.load_state_dict(saved["model"])
        export_checkpoint(model, args.out, args.work_dir)
        out_dir = args.out
    result = verify_with_transformers(out_dir, heldout_sequence(args.work_dir, args.seq_len))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
