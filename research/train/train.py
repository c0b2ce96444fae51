"""Train the tiny GLM-5-shaped reference model (MLA + DSA indexer + IndexShare + MoE + one MTP layer).

Losses
  LM      cross entropy of x_{t+1} from the trunk.
  MTP     cross entropy of x_{t+2} from the MTP layer, fed [enorm(embed(x_{t+1})); hnorm(h_t)] where h_t is
          the trunk's hidden after `model.norm` (what serving stacks feed at inference). h_t is NOT
          detached: the MTP loss also trains the trunk, as in DeepSeek-V3 and Megatron's MTP. Weight 0.3.
  indexer KL(p || q) per full layer, q = softmax of the index scores over the keys the attention could
          see, p = the head-averaged attention probabilities of that layer, averaged with the shared
          layers that reuse its top-k (IndexShare), renormalised. The indexer sees detached inputs and
          its top-k is not differentiable, so it learns only from the KL and the LM/MTP losses never
          reach it (DeepSeek-V3.2). To save time the KL is computed on --kl-rows random query rows
          per step (an unbiased estimate); the MTP layer's own indexer is trained the same way.

Schedule (fractions of the run)
  dense      [0, dense_fraction): dense causal attention; LM + 0.3 MTP train everything but the
             indexers; the indexers learn the dense distribution by KL at the same time.
  warm-up    next indexer_warmup_fraction: dense attention, everything frozen except the indexers
             (KL only) - the DSA "dense warm-up" stage.
  sparse     the rest: top-k sparse attention (index_topk of the 512 keys), LM + 0.3 MTP on the model,
             KL restricted to the selected keys on the indexers.

MoE balance: aux-loss-free bias update (DeepSeek-V3): after each step that trains the model,
e_score_correction_bias[e] += rate * sign(mean load - load[e]). No auxiliary loss.

Optimizer: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warm-up then cosine decay to
10% of the peak; gradient norm clipped to 1.0 separately for model and indexers.

At the end it writes an fp32 checkpoint (work dir), exports the bf16 Hugging Face checkpoint to --out,
verifies it against transformers, evaluates the exported weights on the held-out data and writes
loss.png, train_log.jsonl and the model card README.md next to the checkpoint.

Schedule position: step / --steps, or elapsed / --time-budget-min when that is larger (a shared machine);
phases and the cosine decay are functions of that position.

Usage (see research/train/README.md):
  python research/train/train.py --steps 2000 --final-eval-windows 16 --out models/glm-tiny-mtp  (the committed model)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

# OpenMP threads that spin while waiting burn the CPU that the other processes on this shared machine
# need, and under contention a 2-thread run then trains slower than a 1-thread run. Passive waiting
# avoids that; it must be set before torch loads libgomp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

import corpus
import export
import tokenizer as tok
from model import GlmTinyForCausalLM, ModelConfig, count_parameters

REPO_ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------
# Data


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def prepare_tokens(work_dir: Path, vocab_size: int) -> tuple[tok.Tokenizer, dict[str, dict[str, np.ndarray]]]:
    """Trains (once) the tokenizer and tokenizes every corpus split (cached as .npy in the work dir).

    Returns (tokenizer, {corpus: {"train": ids, "holdout": ids}}). Each document ends with the EOS
    token. Everything needed later is returned in memory, so the run survives a cleaned build/.
    """
    splits = corpus.load_splits(work_dir)
    tokenizer_path = work_dir / "tokenizer.json"
    if not tokenizer_path.exists():
        tokenizer = tok.train_tokenizer(splits, vocab_size)
        tok.write_tokenizer_files(tokenizer, work_dir, model_max_length=2048)
    tokenizer = tok.Tokenizer.from_file(str(tokenizer_path))
    tok.write_tokenizer_files(tokenizer, work_dir, model_max_length=2048)  # rewrites the same tokenizer.json
    if tokenizer.get_vocab_size() != vocab_size:
        raise SystemExit(f"{tokenizer_path} has {tokenizer.get_vocab_size()} tokens, wanted {vocab_size}; "
                         "delete it to retrain")
    tokenizer_sha = file_sha256(tokenizer_path)
    token_dir = work_dir / "tokens"
    token_dir.mkdir(exist_ok=True)
    meta_path = token_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    eos = tokenizer.token_to_id(tok.EOS_TOKEN)
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in corpus.CORPUS_NAMES:
        out[name] = {}
        for split_name, text in zip(("train", "holdout"), splits[name]):
            path = token_dir / f"{name}_{split_name}.npy"
            key = f"{name}_{split_name}"
            if not path.exists() or meta.get(key) != tokenizer_sha:
                documents = [d for d in text.split(corpus.DOC_SEPARATOR) if d]
                ids: list[int] = []
                for encoding in tokenizer.encode_batch(documents, add_special_tokens=False):
                    ids.extend(encoding.ids)
                    ids.append(eos)
                np.save(path, np.asarray(ids, dtype=np.uint16))
                meta[key] = tokenizer_sha
                meta_path.write_text(json.dumps(meta, indent=2))
            out[name][split_name] = np.load(path)
    return tokenizer, out


class WindowSampler:
    """Random training windows of `length` tokens; corpus chosen in proportion to its size.

    The draw for step s depends only on (seed, s), so a resumed run sees the same data.
    """

    def __init__(self, train_tokens: dict[str, np.ndarray], length: int, seed: int):
        self.names = list(train_tokens)
        self.arrays = [train_tokens[n] for n in self.names]
        sizes = np.array([len(a) for a in self.arrays], dtype=np.float64)
        self.probabilities = sizes / sizes.sum()
        self.length = length
        self.seed = seed

    def batch(self, step: int, batch_size: int) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, step])
        rows = []
        for _ in range(batch_size):
            array = self.arrays[rng.choice(len(self.arrays), p=self.probabilities)]
            start = int(rng.integers(0, len(array) - self.length))
            rows.append(array[start:start + self.length].astype(np.int64))
        return torch.from_numpy(np.stack(rows))  # [B, length]


def holdout_windows(holdout_tokens: dict[str, np.ndarray], length: int, per_corpus: int) -> dict[str, torch.Tensor]:
    """Non-overlapping windows from the start of each held-out split: {corpus: [W, length]}."""
    out = {}
    for name, array in holdout_tokens.items():
        count = (len(array) - 1) // length
        if per_corpus > 0:
            count = min(count, per_corpus)
        windows = [array[i * length:(i + 1) * length].astype(np.int64) for i in range(count)]
        out[name] = torch.from_numpy(np.stack(windows))
    return out


# ----------------------------------------------------------------------------------------------
# Evaluation


@torch.no_grad()
def evaluate(model: GlmTinyForCausalLM, windows: dict[str, torch.Tensor], seq_len: int, sparse: bool,
             device: torch.device, batch_size: int = 4) -> dict:
    """Held-out metrics per corpus and overall (token-weighted).

    lm_loss / mtp_loss: nats per token for x_{t+1} / x_{t+2}; lm_top1 / mtp_top1: greedy accuracy;
    mtp_agrees_with_trunk: argmax of the MTP head at t == argmax of the trunk at t+1 given the true
    x_{t+1} - the teacher-forced estimate of greedy first-draft acceptance; indexer_kl: the KL loss
    over all rows.
    """
    was_training = model.training
    model.eval()
    all_rows = torch.arange(seq_len, device=device)
    results = {}
    totals: dict[str, float] = {}
    for name, data in windows.items():
        sums = {"lm_loss": 0.0, "mtp_loss": 0.0, "lm_top1": 0.0, "mtp_top1": 0.0,
                "mtp_agrees_with_trunk": 0.0, "indexer_kl": 0.0}
        count = agree_count = batches = 0
        for start in range(0, len(data), batch_size):
            batch = data[start:start + batch_size].to(device)  # [b, S+2]
            inputs, nexts, after = batch[:, :seq_len], batch[:, 1:seq_len + 1], batch[:, 2:seq_len + 2]
            result = model(inputs, nexts, sparse=sparse, kl_rows=all_rows)
            n = inputs.numel()
            sums["lm_loss"] += F.cross_entropy(result.logits.flatten(0, 1), nexts.flatten(), reduction="sum").item()
            sums["mtp_loss"] += F.cross_entropy(result.mtp_logits.flatten(0, 1), after.flatten(), reduction="sum").item()
            trunk_greedy = result.logits.argmax(-1)  # [b, S]
            mtp_greedy = result.mtp_logits.argmax(-1)  # [b, S]
            sums["lm_top1"] += (trunk_greedy == nexts).sum().item()
            sums["mtp_top1"] += (mtp_greedy == after).sum().item()
            sums["mtp_agrees_with_trunk"] += (mtp_greedy[:, :-1] == trunk_greedy[:, 1:]).sum().item()
            sums["indexer_kl"] += result.indexer_kl.item()
            count += n
            agree_count += inputs.shape[0] * (seq_len - 1)
            batches += 1
        metrics = {
            "tokens": count,
            "lm_loss": sums["lm_loss"] / count,
            "mtp_loss": sums["mtp_loss"] / count,
            "lm_top1": sums["lm_top1"] / count,
            "mtp_top1": sums["mtp_top1"] / count,
            "mtp_agrees_with_trunk": sums["mtp_agrees_with_trunk"] / agree_count,
            "indexer_kl": sums["indexer_kl"] / batches,
        }
        results[name] = metrics
        for key, value in metrics.items():
            if key != "tokens":
                totals[key] = totals.get(key, 0.0) + value * count
        totals["tokens"] = totals.get("tokens", 0) + count
    results["all"] = {k: (v / totals["tokens"] if k != "tokens" else int(v)) for k, v in totals.items()}
    model.train(was_training)
    return results


@torch.no_grad()
def greedy_sample(model: GlmTinyForCausalLM, tokenizer, prompt: str, new_tokens: int, device) -> str:
    ids = tokenizer.encode(prompt, add_special_tokens=False).ids
    x = torch.tensor([ids], device=device)
    for _ in range(new_tokens):
        next_id = model(x, None, sparse=True).logits[0, -1].argmax()
        x = torch.cat([x, next_id.view(1, 1)], dim=1)
    return tokenizer.decode(x[0].tolist())


# ----------------------------------------------------------------------------------------------
# Training


def phase_of(progress: float, dense_fraction: float, warmup_fraction: float) -> str:
    """Schedule phase at a training progress in [0, 1)."""
    if progress < dense_fraction:
        return "dense"
    if progress < dense_fraction + warmup_fraction:
        return "indexer_warmup"
    return "sparse"


def learning_rate(step: int, progress: float, peak: float, warmup_steps: int, min_ratio: float) -> float:
    """Linear warm-up over the first warmup_steps steps times a cosine decay over progress."""
    warmup = min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    cosine = min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return peak * warmup * cosine


def training_progress(step: int, steps: int, elapsed_s: float, budget_s: float) -> float:
    """Fraction of the run done: step / steps, or the fraction of the time budget if that is larger.

    Without a budget (or when the machine is fast enough) the schedule depends only on the step and
    the run is reproducible; with a binding budget on a shared machine, the schedule (phases, cosine)
    still completes, over fewer steps.
    """
    progress = step / steps
    if budget_s > 0:
        progress = max(progress, elapsed_s / budget_s)
    return progress


def build_optimizer(model: GlmTinyForCausalLM, weight_decay: float) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.ndim >= 2 else no_decay).append(param)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], betas=(0.9, 0.95), eps=1e-8)


@torch.no_grad()
def update_router_bias(model: GlmTinyForCausalLM, loads: list[torch.Tensor], rate: float) -> None:
    for moe, load in zip(model.moe_layers(), loads):
        moe.gate.e_score_correction_bias += rate * torch.sign(load.mean() - load)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    for module in ("transformers", "tokenizers", "safetensors", "tqdm", "matplotlib"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            versions[module] = "not installed"
    return versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500, help="number of steps (the maximum with --time-budget-min)")
    parser.add_argument("--time-budget-min", type=float, default=0.0,
                        help="wall-clock budget of the training loop in minutes (0: none); when it binds, the "
                             "schedule advances with time and the run ends early, see training_progress()")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--min-lr-ratio", type=float, default=0.1)
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--mtp-weight", type=float, default=0.3)
    parser.add_argument("--dense-fraction", type=float, default=0.3)
    parser.add_argument("--indexer-warmup-fraction", type=float, default=0.05)
    parser.add_argument("--kl-rows", type=int, default=128, help="query rows per step for the indexer KL")
    parser.add_argument("--bias-update-rate", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--eval-windows", type=int, default=6, help="held-out windows per corpus, periodic eval")
    parser.add_argument("--final-eval-windows", type=int, default=48, help="per corpus at the end; 0 = all")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=tok.DEFAULT_VOCAB_SIZE)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "models" / "glm-tiny-mtp")
    parser.add_argument("--work-dir", type=Path, default=corpus.DEFAULT_WORK_DIR)
    parser.add_argument("--resume", action="store_true", help="continue from <work-dir>/checkpoint.pt")
    args = parser.parse_args()
    command = "python " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:])

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    work_dir = args.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    wall_start = time.time()

    print("preparing corpora and tokenizer ...", flush=True)
    tokenizer, tokens = prepare_tokens(work_dir, args.vocab_size)
    window = args.seq_len + 2  # x_0 .. x_{S+1}: inputs, LM targets, MTP targets
    sampler = WindowSampler({n: t["train"] for n, t in tokens.items()}, window, args.seed)
    eval_windows = holdout_windows({n: t["holdout"] for n, t in tokens.items()}, window, args.eval_windows)
    token_counts = {n: {s: int(len(a)) for s, a in t.items()} for n, t in tokens.items()}
    print(json.dumps(token_counts), flush=True)

    config = ModelConfig(vocab_size=args.vocab_size, max_position_embeddings=max(2048, args.seq_len))
    model = GlmTinyForCausalLM(config).to(device)
    model.set_indexer_exact(False)  # faster contraction order while training; the export check uses the exact one
    params = count_parameters(model)
    print(f"parameters: {params}", flush=True)
    optimizer = build_optimizer(model, args.weight_decay)
    indexer_params = model.indexer_parameters()
    main_params = model.main_parameters()

    log_path = out_dir / "train_log.jsonl"
    start_step = 0
    resumed_loop_s = 0.0
    checkpoint_path = work_dir / "checkpoint.pt"
    if args.resume and checkpoint_path.exists():
        saved = torch.load(checkpoint_path, map_location=device, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start_step = saved["step"]
        wall_start -= saved.get("elapsed_s", 0.0)
        resumed_loop_s = saved.get("loop_s", 0.0)
        print(f"resumed at step {start_step}", flush=True)
    else:
        log_path.write_text("")
    log_file = open(log_path, "a")

    def log(record: dict) -> None:
        log_file.write(json.dumps(record) + "\n")
        log_file.flush()

    if start_step == 0:
        log({"event": "start", "command": command, "args": {k: str(v) for k, v in vars(args).items()},
             "config": config.to_dict(), "parameters": params, "tokens": token_counts,
             "versions": package_versions()})

    kl_generator = torch.Generator().manual_seed(args.seed)
    tokens_per_step = args.batch_size * args.seq_len
    running = {"lm": 0.0, "mtp": 0.0, "kl": 0.0, "n": 0}
    interval_start = time.time()
    model.train()
    budget_s = args.time_budget_min * 60.0
    loop_start = time.time() - resumed_loop_s  # the time budget counts the training loop only
    phase_first_step: dict[str, int] = {}
    stopped_by = "steps"
    progress_bar = tqdm(total=args.steps, initial=start_step, mininterval=5.0, dynamic_ncols=True, file=sys.stderr)
    step = start_step
    while step < args.steps:
        progress = training_progress(step, args.steps, time.time() - loop_start, budget_s)
        if progress >= 1.0:
            stopped_by = "time budget"
            break
        phase = phase_of(progress, args.dense_fraction, args.indexer_warmup_fraction)
        phase_first_step.setdefault(phase, step)
        lr = learning_rate(step, progress, args.lr, args.warmup_steps, args.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        train_main = phase != "indexer_warmup"
        for p in main_params:
            p.requires_grad_(train_main)

        batch = sampler.batch(step, args.batch_size).to(device)  # [B, S+2]
        inputs = batch[:, :args.seq_len]
        nexts = batch[:, 1:args.seq_len + 1]
        after = batch[:, 2:args.seq_len + 2]
        kl_rows = torch.randperm(args.seq_len, generator=kl_generator)[:args.kl_rows].sort().values.to(device)
        result = model(inputs, nexts, sparse=(phase == "sparse"), kl_rows=kl_rows)
        lm_loss = F.cross_entropy(result.logits.flatten(0, 1), nexts.flatten())
        mtp_loss = F.cross_entropy(result.mtp_logits.flatten(0, 1), after.flatten())
        loss = result.indexer_kl
        if train_main:
            loss = loss + lm_loss + args.mtp_weight * mtp_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if train_main:
            torch.nn.utils.clip_grad_norm_(main_params, 1.0)
        torch.nn.utils.clip_grad_norm_(indexer_params, 1.0)
        optimizer.step()
        if train_main and args.bias_update_rate > 0:
            update_router_bias(model, result.expert_load, args.bias_update_rate)

        running["lm"] += lm_loss.item()
        running["mtp"] += mtp_loss.item()
        running["kl"] += result.indexer_kl.item()
        running["n"] += 1
        done = step + 1
        step = done
        progress_bar.update(1)
        if done % args.log_every == 0 or done == args.steps:
            n = running["n"]
            now = time.time()
            record = {"step": done, "phase": phase, "progress": round(progress, 4), "lr": lr, "lm_loss": running["lm"] / n,
                      "mtp_loss": running["mtp"] / n, "indexer_kl": running["kl"] / n,
                      "tokens_seen": done * tokens_per_step, "elapsed_s": round(now - wall_start, 1),
                      "tokens_per_s": round(n * tokens_per_step / (now - interval_start), 1)}
            log(record)
            progress_bar.set_postfix(phase=phase, lm=f"{record['lm_loss']:.3f}", mtp=f"{record['mtp_loss']:.3f}",
                                 kl=f"{record['indexer_kl']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
            running = {"lm": 0.0, "mtp": 0.0, "kl": 0.0, "n": 0}
            interval_start = time.time()
        if done % args.eval_every == 0 or done == args.steps:
            metrics = evaluate(model, eval_windows, args.seq_len, sparse=(phase == "sparse"), device=device)
            log({"step": done, "phase": phase, "eval": metrics})
            tqdm.write(f"step {done} eval ({phase}): lm {metrics['all']['lm_loss']:.3f} "
                       f"mtp {metrics['all']['mtp_loss']:.3f} mtp_top1 {metrics['all']['mtp_top1']:.3f} "
                       f"agree {metrics['all']['mtp_agrees_with_trunk']:.3f} kl {metrics['all']['indexer_kl']:.3f}",
                       file=sys.stderr)
            interval_start = time.time()
        if done % args.checkpoint_every == 0 and done < args.steps:
            work_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done,
                        "config": config.to_dict(), "elapsed_s": time.time() - wall_start,
                        "loop_s": time.time() - loop_start}, checkpoint_path)
    progress_bar.close()
    for p in main_params:
        p.requires_grad_(True)
    train_wall_s = time.time() - wall_start
    steps_done = step
    if steps_done % args.eval_every != 0 and steps_done != args.steps:  # the last eval was skipped
        metrics = evaluate(model, eval_windows, args.seq_len, sparse=True, device=device)
        log({"step": steps_done, "phase": "sparse", "eval": metrics})
    print(f"training stopped by {stopped_by} after {steps_done} steps, {train_wall_s / 60:.1f} min", flush=True)

    # -- Export, verification, final evaluation, card ------------------------------------------
    work_dir.mkdir(parents=True, exist_ok=True)
    final_path = work_dir / "final_fp32.pt"
    torch.save({"model": model.state_dict(), "config": config.to_dict(), "step": steps_done}, final_path)
    model = model.cpu().eval()
    tok.write_tokenizer_files(tokenizer, out_dir, model_max_length=config.max_position_embeddings)
    export.export_checkpoint(model, out_dir, tokenizer_dir=None)
    print(f"exported to {out_dir}", flush=True)
    verify_error = None
    verify_tokens = torch.from_numpy(tokens["austen"]["holdout"][:args.seq_len].astype(np.int64))[None]
    try:
        verification = export.verify_with_transformers(out_dir, verify_tokens)
    except AssertionError as error:  # keep going so the card records the failure
        verification, verify_error = {"error": str(error)}, error
    print("export check:", json.dumps(verification), flush=True)
    log({"event": "export_check", "result": verification})

    exported = export.load_exported(out_dir)
    final_windows = holdout_windows({n: t["holdout"] for n, t in tokens.items()}, window, args.final_eval_windows)
    final_sparse = evaluate(exported, final_windows, args.seq_len, sparse=True, device=torch.device("cpu"))
    final_dense = evaluate(exported, final_windows, args.seq_len, sparse=False, device=torch.device("cpu"))
    log({"event": "final_eval", "weights": "exported bf16", "sparse": final_sparse, "dense": final_dense})
    samples = {p: greedy_sample(exported, tokenizer, p, 48, torch.device("cpu"))
               for p in ("It is a truth universally acknowledged", "In the beginning", "def read_config(path):\n")}
    total_wall_s = time.time() - wall_start
    log({"event": "done", "steps_done": steps_done, "stopped_by": stopped_by, "phase_first_step": phase_first_step,
         "train_wall_s": train_wall_s, "total_wall_s": total_wall_s})
    log_file.close()

    import report  # imported late on purpose: the card code can be improved while a long run trains
    report.plot_losses(log_path, out_dir / "loss.png")
    report.write_model_card(out_dir, log_path=log_path, command=command, config=config, params=params,
                            token_counts=token_counts, steps=steps_done, tokens_per_step=tokens_per_step,
                            stopped_by=stopped_by, phase_first_step=phase_first_step,
                            train_wall_s=train_wall_s, total_wall_s=total_wall_s, verification=verification,
                            final_sparse=final_sparse, final_dense=final_dense, samples=samples,
                            versions=package_versions(), args=args)
    print(f"wrote {out_dir / 'README.md'}; total wall time {total_wall_s / 60:.1f} min", flush=True)
    if verify_error is not None:
        raise verify_error


if __name__ == "__main__":
    main()
