"""Loss plot and model card for a finished training run (called by train.py at the end).

  python research/train/report.py --log models/glm-tiny-mtp/train_log.jsonl --plot models/glm-tiny-mtp/loss.png
re-draws the plot from a log (also works on a log of a run still in progress).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import corpus
from export import hf_config_dict


def read_log(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]


def plot_losses(log_path: Path, png_path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_log(log_path)
    train = [r for r in records if "lm_loss" in r and "step" in r]
    evals = [r for r in records if "eval" in r]
    fig, (ax_loss, ax_kl) = plt.subplots(1, 2, figsize=(12, 4.5))
    if train:
        steps = [r["step"] for r in train]
        ax_loss.plot(steps, [r["lm_loss"] for r in train], lw=0.8, alpha=0.6, label="train LM (x_{t+1})")
        ax_loss.plot(steps, [r["mtp_loss"] for r in train], lw=0.8, alpha=0.6, label="train MTP (x_{t+2})")
        ax_kl.plot(steps, [r["indexer_kl"] for r in train], lw=0.8,
                   label="train (sum over the indexers of layers with one, incl. MTP)")
        top = max(r["lm_loss"] for r in train)
        previous = train[0]["phase"]
        boundaries = 0
        for r in train:
            if r["phase"] != previous:  # first record of a new phase (records are every log_every steps)
                for ax in (ax_loss, ax_kl):
                    ax.axvline(r["step"], color="grey", ls=":", lw=1)
                ax_loss.text(r["step"], top * (1.0 - 0.04 * boundaries), " " + r["phase"], fontsize=8,
                             color="grey", va="top")
                boundaries += 1
                previous = r["phase"]
    if evals:
        steps = [r["step"] for r in evals]
        ax_loss.plot(steps, [r["eval"]["all"]["lm_loss"] for r in evals], "o-", ms=3, label="held-out LM")
        ax_loss.plot(steps, [r["eval"]["all"]["mtp_loss"] for r in evals], "s-", ms=3, label="held-out MTP")
        ax_kl.plot(steps, [r["eval"]["all"]["indexer_kl"] for r in evals], "o-", ms=3, label="held-out")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("nats / token")
    ax_loss.set_title("LM and MTP loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    ax_kl.set_xlabel("step")
    ax_kl.set_title("DSA indexer KL to the attention distribution")
    ax_kl.set_yscale("log")
    ax_kl.grid(alpha=0.3)
    ax_kl.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def _metric_table(sparse: dict, dense: dict) -> str:
    lines = ["| held-out set | tokens | LM loss (sparse) | LM loss (dense) | MTP loss (sparse) | LM top-1 | "
             "MTP top-1 (x_{t+2}) | MTP = trunk greedy | indexer KL |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in list(corpus.CORPUS_NAMES) + ["all"]:
        s, d = sparse[name], dense[name]
        lines.append(f"| {name} | {s['tokens']:,} | {s['lm_loss']:.3f} | {d['lm_loss']:.3f} | {s['mtp_loss']:.3f} | "
                     f"{s['lm_top1']:.3f} | {s['mtp_top1']:.3f} | {s['mtp_agrees_with_trunk']:.3f} | "
                     f"{s['indexer_kl']:.3f} |")
    return "\n".join(lines)


def write_model_card(out_dir: Path, *, log_path: Path, command: str, config, params: dict, token_counts: dict,
                     steps: int, tokens_per_step: int, stopped_by: str, phase_first_step: dict,
                     train_wall_s: float, total_wall_s: float,
                     verification: dict, final_sparse: dict, final_dense: dict, samples: dict,
                     versions: dict, args) -> None:
    checksums = corpus.load_checksums()
    weights_sha = hashlib.sha256((out_dir / "model.safetensors").read_bytes()).hexdigest()
    tokenizer_sha = hashlib.sha256((out_dir / "tokenizer.json").read_bytes()).hexdigest()
    size_mb = (out_dir / "model.safetensors").stat().st_size / 1e6
    hf = hf_config_dict(config)
    records = read_log(log_path)
    train_records = [r for r in records if "lm_loss" in r]
    rates = [r["tokens_per_s"] for r in train_records if r.get("tokens_per_s")]
    median_rate = sorted(rates)[len(rates) // 2] if rates else 0.0
    phase_text = {
        "dense": "dense attention, indexers trained at the same time by KL(head-averaged attention || "
                 "softmax(index scores))",
        "indexer_warmup": "indexer warm-up (dense attention, everything else frozen)",
        "sparse": f"sparse top-{config.index_topk} attention with the KL restricted to the selected keys",
    }
    starts = sorted((first, name) for name, first in phase_first_step.items())
    phase_parts = []
    for i, (first, name) in enumerate(starts):
        last = starts[i + 1][0] - 1 if i + 1 < len(starts) else steps - 1
        phase_parts.append(f"steps {first}-{last} {phase_text[name]}")
    recipe = "; ".join(phase_parts)
    if stopped_by == "steps":
        stop_text = f"the fixed step count (--steps {args.steps})"
    else:
        stop_text = (f"the time budget (--time-budget-min {args.time_budget_min:g}; --steps {args.steps} was the "
                     "maximum): the machine was shared, so the schedule advanced with wall-clock time")
    s_all, d_all = final_sparse["all"], final_dense["all"]

    data_rows = "\n".join(
        f"| {name} | {checksums[name]['source']} | {checksums[name]['bytes']:,} | `{checksums[name]['sha256']}` | "
        f"{token_counts[name]['train']:,} | {token_counts[name]['holdout']:,} |" for name in corpus.CORPUS_NAMES)
    verify_text = json.dumps(verification, indent=2)
    sample_text = "\n\n".join(f"Prompt `{p!r}`:\n\n```\n{t}\n```" for p, t in samples.items())
    config_rows = "\n".join(f"| `{k}` | `{json.dumps(v)}` |" for k, v in hf.items()
                            if k not in ("architectures", "transformers_version"))

    card = f"""# glm-tiny-mtp: a tiny trained `glm_moe_dsa` checkpoint with a real MTP head

A {params['total'] / 1e6:.2f}M-parameter model ({params['active_per_token'] / 1e6:.2f}M active per token) with the
GLM-5.x architecture (MLA, DSA lightning indexer with IndexShare, sigmoid-routed MoE with a shared
expert, one multi-token-prediction layer), trained from scratch on CPU for {steps} steps by
`research/train/train.py`. It exists so that the mtpspec engine can measure **real** MTP acceptance rates
and check numerics against `transformers`; it is not a useful language model.

Files: `config.json`, `model.safetensors` (bf16, {size_mb:.1f} MB, sha256 `{weights_sha}`),
`tokenizer.json` (sha256 `{tokenizer_sha}`), `tokenizer_config.json`, `train_log.jsonl`, `loss.png`.

## Results (held-out, exported bf16 weights computed in fp32)

{_metric_table(final_sparse, final_dense)}

- "sparse" = DSA top-{config.index_topk} attention as the checkpoint is meant to run (and as
  transformers runs it); "dense" = the same weights with full causal attention.
- "indexer KL" = sum over the {sum(t == "full" for t in config.indexer_types) + config.num_nextn_predict_layers} indexers (full trunk layers and the MTP layer) of the
  mean per-row KL(head-averaged attention || softmax(index scores)) over the keys the attention saw.
- **MTP top-1 (x_{{t+2}})** is the MTP head's greedy accuracy on the true second-next token.
  **MTP = trunk greedy** compares the MTP head's argmax at t with the trunk's argmax at t+1 under
  teacher forcing; this is the closest offline estimate of first-draft greedy acceptance.
- Overall: LM loss {s_all['lm_loss']:.3f} nats/token, MTP loss {s_all['mtp_loss']:.3f}, MTP top-1
  {s_all['mtp_top1']:.3f}, MTP/trunk agreement {s_all['mtp_agrees_with_trunk']:.3f}.
- Evaluated on {s_all['tokens']:,} held-out tokens: up to {args.final_eval_windows or 'all'} windows of
  {args.seq_len} tokens from the start of each corpus's held-out tail.

![loss curves](loss.png)

## Architecture (`config.json`)

| field | value |
|---|---|
{config_rows}

- Layers 0..{config.num_hidden_layers - 1} are the trunk; layer 0 has a dense SwiGLU MLP, the rest MoE
  ({config.n_routed_experts} routed experts, top-{config.num_experts_per_tok}, 1 shared expert,
  `routed_scaling_factor` {config.routed_scaling_factor}).
- IndexShare: `indexer_types` = {config.indexer_types}; shared layers have no indexer tensors and reuse
  the top-k of the nearest full layer below them.
- Layer {config.num_hidden_layers} is the MTP layer: `enorm`, `hnorm`, `eh_proj` [H, 2H] (columns
  0..H-1 multiply enorm(embedding of x_{{t+1}}), H..2H-1 multiply hnorm(h_t)), a full MoE block with its
  own indexer, and `shared_head.norm`. It has no `embed_tokens` / `shared_head.head` copies: bind the
  main `model.embed_tokens.weight` and `lm_head.weight`. h_t is the trunk hidden **after** `model.norm`.
- Main MLA RoPE and indexer RoPE are both interleaved (`rope_interleave`, `indexer_rope_interleave`);
  rope_theta {config.rope_theta:g} (deliberately neither 1e4 nor 1e6, so a wrong fallback shows).
- Routed experts are stored per expert (`model.layers.L.mlp.experts.E.{{gate,up,down}}_proj.weight`);
  `mlp.gate.e_score_correction_bias` is fp32, everything else bf16.

## Export check against transformers

transformers {versions.get('transformers')} loads the trunk with
`AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32, attn_implementation="eager")`. It
fuses the per-expert tensors on load (its `qwen2_moe` conversion mapping, shared by `glm_moe_dsa`) and
skips the MTP layer: `_keys_to_ignore_on_load_unexpected` names only `model.layers.78.*` (GLM-5's MTP
index), so for this model it prints the layer-{config.num_hidden_layers} tensors as UNEXPECTED in its
load report and then ignores them; that report is expected. Its logits on the first {verification.get('sequence_length', args.seq_len)} held-out tokens of
`austen` are compared with `research/train/model.py` running the same bf16-rounded weights in fp32:

```json
{verify_text}
```

## Data

| corpus | source | bytes | sha256 of extracted text | train tokens | held-out tokens |
|---|---|---|---|---|---|
{data_rows}

`research/train/corpus.py` downloads the Debian packages with `apt-get download`, unpacks them with
`dpkg-deb -x` into the work directory, extracts the text with its own readers (R lazy-load database;
SWORD zText/OSIS) and checks the sha256 values pinned in `research/train/corpus_checksums.json`. The
Python corpus is the standard library of the interpreter that ran the training (fixed selection rule in
`corpus.python_stdlib_files`). The last 5% of each corpus (cut at a line break) is held out; the
tokenizer never sees it. Training windows are drawn from the three corpora in proportion to their size.

Tokenizer: byte-level BPE, {config.vocab_size} entries, GLM-4/5 pre-tokenizer (`Split` on the GLM regex,
Isolated, then `ByteLevel(add_prefix_space=false, use_regex=false)`), ByteLevel decoder. Token 0
`<|endoftext|>` is EOS and the document separator, token 1 is `<|pad|>`.

## Training

- Command: `{command}` (run niced in the background, see `research/train/README.md`).
- {steps} steps x {args.batch_size} sequences x {args.seq_len} tokens = {steps * tokens_per_step:,} tokens seen
  ({tokens_per_step} tokens per step), seed {args.seed}. The run ended at {stop_text}.
- Wall time: {train_wall_s / 60:.1f} min of training ({median_rate:.0f} tokens/s median), {total_wall_s / 60:.1f} min
  including export, verification and final evaluation, on {args.threads} CPU threads ({args.device}).
- Loss: LM + {args.mtp_weight} x MTP (+ the indexer KL, which reaches only the indexers). The MTP
  input hidden is the post-`model.norm` trunk output and is not detached, so the MTP loss also trains
  the trunk (DeepSeek-V3 / Megatron practice).
- DSA recipe: {recipe} (phase fractions of the schedule {args.dense_fraction} /
  {args.indexer_warmup_fraction} / rest). Indexer inputs are detached, so the LM loss
  never reaches the indexers. For IndexShare the target of a full layer's indexer is the attention
  averaged over that layer and the shared layers that reuse its top-k. The KL uses {args.kl_rows}
  random query rows per step.
- MoE load balance: auxiliary-loss-free bias update, rate {args.bias_update_rate} (no aux loss).
- AdamW (0.9, 0.95), peak lr {args.lr}, {args.warmup_steps} linear warm-up steps, cosine to {args.min_lr_ratio} x peak
  over the schedule,
  weight decay {args.weight_decay} on matrices, gradient clipping 1.0.

Package versions: {', '.join(f'{k} {v}' for k, v in versions.items())}.

## Greedy samples (sparse attention, exported weights)

{sample_text}
"""
    (out_dir / "README.md").write_text(card)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--plot", type=Path, required=True)
    args = parser.parse_args()
    plot_losses(args.log, args.plot)


if __name__ == "__main__":
    main()
