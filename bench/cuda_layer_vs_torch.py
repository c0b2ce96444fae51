#!/usr/bin/env python3
"""One decoder layer (MLA absorbed decode with the DSA indexer + MoE) in plain
PyTorch on the device, with the same weights, against our forward: max abs error and time ratio.

bench/cuda_layer_dump (C++) runs layer L of the checkpoint on deterministic inputs x [T + 1, H]:
rows 0 .. T-1 fill the layer's cache, row T is the timed decode step; it writes x.npy, out.npy
(row T's layer output) and layer.json (median time). This script reads the layer's weights from
the safetensors files and computes row T again from x with docs/models.md ("The trunk" to "MoE"):
  h = x_T;  n = RMSNorm(h)                                     (input_layernorm, rms_norm_eps)
  cache rows j ≤ T: c_j = RMSNorm_kv(W_kva n_j)[:r_kv], k_r,j = RoPE(W_kva n_j [r_kv:])
  indexer: k^I_j = RoPE_first_d_r(LayerNorm(W_k n_j)); q^I = RoPE(W_qb^I c_q); w = W_w n / sqrt(N_I);
           I_j = Σ_h w_h ReLU(q^I_h · k^I_j / sqrt(d_I)); top-K over j ≤ T
  absorbed MLA: q_abs,h = W_uk,hᵀ q_nope,h; s_hj = (q_abs,h · c_j + q_r,h · k_r,j) · d_qk^-½;
           z_h = Σ_j softmax(s_h)_j c_j; o_h = W_uv,h z_h; h += W_o [o_1 … o_N]
  MoE: σ = sigmoid(W_g m) (m = RMSNorm(h)); top-8 by σ + bias; weights σ / Σσ · routed_scale;
       h += Σ_e w_e W_down,e (SiLU(W_gate,e m) ⊙ W_up,e m) + shared(m)
twice: in fp32 (weights upcast: the accuracy reference) and with bf16 weights and activations (how
a plain PyTorch implementation would run it: the speed reference, timed with CUDA events).

Usage: cuda_layer_vs_torch.py --model-dir DIR --tool build/.../cuda_layer_dump [--layer L]
       [--prefix 4096] [--reps 20] [--json FILE] [--device cuda|cpu]
--device cpu runs the C++ layer on the CPU and PyTorch on the CPU: a check of this reference on a
machine without a GPU (small models only). Exit status 2 when torch or the device is missing.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def load_layer_tensors(model_dir, prefix, device):
    from safetensors import safe_open
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        weight_map = json.load(open(index))["weight_map"]
        files = sorted({f for name, f in weight_map.items() if name.startswith(prefix)})
    else:
        files = ["model.safetensors"]
    tensors = {}
    for file in files:
        with safe_open(os.path.join(model_dir, file), framework="pt", device=device) as f:
            for name in f.keys():
                if name.startswith(prefix):
                    tensors[name[len(prefix):]] = f.get_tensor(name)
    return tensors


def rope_tables(torch, positions, rope_dim, theta, device):
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float64, device=device) / rope_dim))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [S, d_r / 2]
    return angles.cos(), angles.sin()


def rope(x, cos, sin, interleaved):
    """Rotates the last dim of x [..., S, d] (d = 2·len(cos)); cos/sin broadcast to [..., S, d/2]."""
    import torch
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def rms_norm(x, weight, eps):
    import torch
    xf = x.float()
    return (weight.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)


class Layer:
    """The layer's weights in one dtype (fp32 for accuracy, bf16 for speed) on one device."""

    def __init__(self, torch, tensors, config, dtype):
        self.t = {k: (v.to(dtype) if v.dim() == 2 else v.float()) for k, v in tensors.items()}
        self.c = config
        self.dtype = dtype
        self.torch = torch

    def w(self, name):
        return self.t[name]

    def cache_rows(self, normed, positions):
        """Latents, rope keys and indexer keys of the rows (all T + 1 of them)."""
        torch, c = self.torch, self.c
        F = torch.nn.functional
        r_kv, d_r = c["kv_lora_rank"], c["qk_rope_head_dim"]
        cos, sin = rope_tables(torch, positions, d_r, c["rope_theta"], normed.device)
        kv = F.linear(normed, self.w("self_attn.kv_a_proj_with_mqa.weight"))  # [S, r_kv + d_r]
        latent = rms_norm(kv[:, :r_kv], self.w("self_attn.kv_a_layernorm.weight"), 1e-6)  # [S, r_kv]
        k_rope = rope(kv[:, r_kv:], cos, sin, c["rope_interleave"])  # [S, d_r]
        ki = F.linear(normed, self.w("self_attn.indexer.wk.weight"))  # [S, d_I]
        ki = F.layer_norm(ki.float(), (ki.shape[-1],), self.w("self_attn.indexer.k_norm.weight"),
                          self.w("self_attn.indexer.k_norm.bias"), 1e-6).to(normed.dtype)
        ki = torch.cat([rope(ki[:, :d_r], cos, sin, c["indexer_rope_interleave"]), ki[:, d_r:]], dim=-1)
        return latent, k_rope, ki

    def decode(self, h, position, latent, k_rope, index_keys):
        """Row T's layer output; h [1, H]; the cache tensors hold rows 0 … T."""
        torch, c = self.torch, self.c
        F = torch.nn.functional
        N, d_n, d_r, d_v = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        r_kv, n_i, d_i = c["kv_lora_rank"], c["index_n_heads"], c["index_head_dim"]
        pos = torch.tensor([position], device=h.device)
        cos, sin = rope_tables(torch, pos, d_r, c["rope_theta"], h.device)
        n = rms_norm(h, self.w("input_layernorm.weight"), c["rms_norm_eps"])  # [1, H]
        c_q = rms_norm(F.linear(n, self.w("self_attn.q_a_proj.weight")), self.w("self_attn.q_a_layernorm.weight"),
                       1e-6)  # [1, r_q]
        q = F.linear(c_q, self.w("self_attn.q_b_proj.weight")).view(N, d_n + d_r)  # [N, d_qk]
        q_nope, q_rope = q[:, :d_n], rope(q[:, d_n:], cos, sin, c["rope_interleave"])
        # Indexer over keys 0 … T (all causal for row T) and its top-K.
        qi = F.linear(c_q, self.w("self_attn.indexer.wq_b.weight")).view(n_i, d_i)
        qi = torch.cat([rope(qi[:, :d_r], cos, sin, c["indexer_rope_interleave"]), qi[:, d_r:]], dim=-1)
        head_w = F.linear(n, self.w("self_attn.indexer.weights_proj.weight")).float().view(n_i) * n_i ** -0.5
        scores = torch.relu((qi.float() @ index_keys.float().T) * d_i ** -0.5)  # [N_I, T + 1]
        index_scores = head_w @ scores  # [T + 1]
        k = min(c["index_topk"], index_scores.shape[0])
        selected = torch.topk(index_scores, k).indices
        # Absorbed MLA over the selected latents.
        kv_b = self.w("self_attn.kv_b_proj.weight").view(N, d_n + d_v, r_kv)
        w_uk, w_uv = kv_b[:, :d_n, :], kv_b[:, d_n:, :]  # [N, d_n, r_kv], [N, d_v, r_kv]
        q_abs = torch.einsum("nd,ndr->nr", q_nope, w_uk)  # [N, r_kv]
        lat, kr = latent[selected], k_rope[selected]  # [K, r_kv], [K, d_r]
        s = (q_abs.float() @ lat.float().T + q_rope.float() @ kr.float().T) * (d_n + d_r) ** -0.5  # [N, K]
        p = torch.softmax(s, dim=-1)
        z = (p @ lat.float()).to(h.dtype)  # [N, r_kv]
        o = torch.einsum("nr,nvr->nv", z, w_uv).reshape(1, N * d_v)
        h = h + F.linear(o, self.w("self_attn.o_proj.weight"))
        # MoE.
        m = rms_norm(h, self.w("post_attention_layernorm.weight"), c["rms_norm_eps"])
        sigma = torch.sigmoid(F.linear(m.float(), self.w("mlp.gate.weight").float()))[0]  # [E]
        chosen = torch.topk(sigma + self.w("mlp.gate.e_score_correction_bias"), c["num_experts_per_tok"]).indices
        weights = sigma[chosen]
        if c.get("norm_topk_prob", True):
            weights = weights / weights.sum()
        weights = weights * c["routed_scaling_factor"]
        out = torch.zeros_like(h, dtype=torch.float32)
        for weight, e in zip(weights.tolist(), chosen.tolist()):
            out += weight * self.mlp(m, f"mlp.experts.{e}.").float()
        if c.get("n_shared_experts", 0) > 0:
            out += self.mlp(m, "mlp.shared_experts.").float()
        return h + out.to(h.dtype)

    def mlp(self, x, prefix):
        F = self.torch.nn.functional
        return F.linear(F.silu(F.linear(x, self.w(prefix + "gate_proj.weight"))) *
                        F.linear(x, self.w(prefix + "up_proj.weight")), self.w(prefix + "down_proj.weight"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--tool", required=True, help="path to the cuda_layer_dump binary")
    parser.add_argument("--layer", type=int, default=-1, help="default: the first full (indexer) MoE layer")
    parser.add_argument("--prefix", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--json", default="")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"cuda_layer_vs_torch: needs numpy and torch ({e})", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_layer_vs_torch: no CUDA device for torch", file=sys.stderr)
        return 2

    raw = json.load(open(os.path.join(args.model_dir, "config.json")))
    config = dict(raw)
    rope_params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    config["rope_theta"] = float(rope_params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    if rope_params.get("rope_type", rope_params.get("type", "default")) != "default":
        print("cuda_layer_vs_torch: only plain RoPE configs are supported (no YaRN)", file=sys.stderr)
        return 2
    config.setdefault("indexer_rope_interleave", False)
    config.setdefault("rope_interleave", True)
    types = raw.get("indexer_types")
    first_dense = raw.get("first_k_dense_replace", 3)
    layer = args.layer
    if layer < 0:
        layer = next((l for l in range(raw["num_hidden_layers"])
                      if l >= first_dense and (types is None or types[l] == "full")), -1)
        if layer < 0:
            print("cuda_layer_vs_torch: the model has no full MoE layer", file=sys.stderr)
            return 2

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.tool, "--model-dir", args.model_dir, "--layer", str(layer), "--prefix", str(args.prefix),
                        "--reps", str(args.reps), "--out-dir", tmp, "--device", args.device], check=True)
        x = np.load(os.path.join(tmp, "x.npy"))
        ours = np.load(os.path.join(tmp, "out.npy"))[0]
        dump = json.load(open(os.path.join(tmp, "layer.json")))

    device = torch.device(args.device)
    tensors = load_layer_tensors(args.model_dir, f"model.layers.{layer}.", args.device)
    T = args.prefix
    xs = torch.from_numpy(x).to(device)  # [T + 1, H]
    positions = torch.arange(T + 1, device=device)
    results = {}
    with torch.no_grad():
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            lay = Layer(torch, tensors, config, dtype)
            h = xs.to(dtype)
            normed = rms_norm(h, lay.w("input_layernorm.weight"), config["rms_norm_eps"])
            latent, k_rope, index_keys = lay.cache_rows(normed, positions)
            ref = lay.decode(h[T:T + 1], T, latent, k_rope, index_keys)
            seconds = []
            if args.device == "cuda":
                for rep in range(args.reps + 3):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    lay.decode(h[T:T + 1], T, latent, k_rope, index_keys)
                    end.record()
                    torch.cuda.synchronize()
                    if rep >= 3:
                        seconds.append(start.elapsed_time(end) / 1e3)
            results[name] = (ref.float().cpu().numpy()[0], sorted(seconds)[len(seconds) // 2] if seconds else None)
            del lay

    ref32 = results["fp32"][0]
    scale = float(np.abs(ref32).max())
    err_ours = float(np.abs(ours - ref32).max())
    err_bf16 = float(np.abs(results["bf16"][0] - ref32).max())
    delta = x[T]  # the layer's own contribution: out − input
    delta_scale = float(np.abs(ref32 - delta).max())
    torch_seconds = results["bf16"][1]
    summary = {
        "layer": layer, "prefix": T, "path": dump["path"], "device": args.device,
        "max_abs_err_ours_vs_fp32_torch": err_ours,
        "max_abs_err_bf16_torch_vs_fp32_torch": err_bf16,
        "max_abs_output": scale, "max_abs_layer_delta": delta_scale,
        "rel_err_ours": err_ours / max(delta_scale, 1e-30),
        "ours_seconds": dump["median_seconds"], "torch_bf16_seconds": torch_seconds,
        "torch_fp32_seconds": results["fp32"][1],
        "time_ratio_torch_over_ours": (torch_seconds / dump["median_seconds"]) if torch_seconds else None,
    }
    print(f"\ncuda_layer_vs_torch: layer {layer} ({dump['path']} path), decode row at T = {T}")
    print(f"  max |ours − torch fp32|       {err_ours:.3e}  (layer delta max {delta_scale:.3e}, rel "
          f"{summary['rel_err_ours']:.2e})")
    print(f"  max |torch bf16 − torch fp32| {err_bf16:.3e}")
    if torch_seconds:
        print(f"  time: ours {dump['median_seconds'] * 1e3:.3f} ms, torch bf16 {torch_seconds * 1e3:.3f} ms "
              f"(torch / ours = {summary['time_ratio_torch_over_ours']:.2f})")
    if args.json:
        json.dump({"summary": summary, "dump": dump}, open(args.json, "w"), indent=2)
    return 0 if math.isfinite(err_ours) else 1


if __name__ == "__main__":
    sys.exit(main())
