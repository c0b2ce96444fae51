#!/usr/bin/env python3
"""Writes the held-out token ids that bench/accept_bench measures acceptance on.

The held-out split is the one research/train uses for evaluation (research/train/corpus.py): the last ~5%
of each corpus, cut at a line boundary. Documents are split on the corpus separator, encoded with
the model's own tokenizer.json (HF `tokenizers`, no special tokens added) and each document is
followed by the EOS id, exactly as research/train/train.py tokenizes its splits.

  build/heldout/prose.npy  austen + web held-out text (int32, 1-D)
  build/heldout/code.npy   python held-out text (int32, 1-D)
  build/heldout/meta.json  sources, counts, tokenizer sha256

  python research/train/make_heldout.py [--model DIR] [--work-dir build/train_work] [--out build/heldout]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "research" / "train"))
import corpus  # noqa: E402  (research/train/corpus.py: the split definition)

GROUPS = {"prose": ("austen", "web"), "code": ("python",)}
EOS_TOKEN = "<|endoftext|>"


def default_model_dir() -> Path:
    trained = REPO_ROOT / "models" / "glm-tiny-mtp"
    if (trained / "tokenizer.json").exists():
        return trained
    return REPO_ROOT / "build" / "pilot" / "out"


def encode_documents(tokenizer: Tokenizer, text: str, eos: int) -> np.ndarray:
    documents = [d for d in text.split(corpus.DOC_SEPARATOR) if d]
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(documents, add_special_tokens=False):
        ids.extend(encoding.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.int32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="dir with tokenizer.json (default: trained model, "
                        "else the pilot)")
    parser.add_argument("--work-dir", type=Path, default=corpus.DEFAULT_WORK_DIR)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "heldout")
    args = parser.parse_args()

    model_dir = args.model or default_model_dir()
    tokenizer_path = model_dir / "tokenizer.json"
    if not tokenizer_path.exists():
        sys.exit(f"error: {tokenizer_path} does not exist (pass --model DIR)")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    eos = tokenizer.token_to_id(EOS_TOKEN)
    if eos is None:
        sys.exit(f"error: {tokenizer_path} has no {EOS_TOKEN} token")
    try:
        splits = corpus.load_splits(args.work_dir)  # {name: (train, holdout)}, checksums verified
    except corpus.CorpusError as error:
        sys.exit(f"error: {error}")

    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"model_dir": str(model_dir), "tokenizer_sha256": hashlib.sha256(tokenizer_path.read_bytes()).hexdigest(),
            "split": f"last {corpus.HOLDOUT_FRACTION:.0%} of each corpus (research/train/corpus.py)", "files": {}}
    for group, names in GROUPS.items():
        ids = np.concatenate([encode_documents(tokenizer, splits[name][1], eos) for name in names])
        vocab = tokenizer.get_vocab_size()
        if ids.size == 0 or ids.max() >= vocab:
            sys.exit(f"error: {group}: bad token ids (max {ids.max() if ids.size else None}, vocab {vocab})")
        path = args.out / f"{group}.npy"
        np.save(path, ids)
        meta["files"][group] = {"path": str(path), "corpora": list(names), "tokens": int(ids.size)}
        print(f"{group:5s} {ids.size:8d} tokens from {'+'.join(names)} -> {path}")
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
