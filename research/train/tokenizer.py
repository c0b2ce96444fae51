"""Byte-level BPE tokenizer in the GLM-4/GLM-5 style, trained with Hugging Face `tokenizers`.

Pipeline (the same stages as GLM's tokenizer.json, with a small vocabulary):
  normalizer     none
  pre-tokenizer  Split(GLM_SPLIT_PATTERN, behavior=Isolated)  then  ByteLevel(add_prefix_space=False,
                 use_regex=False)
  model          BPE over the 256 byte symbols, merges learned on the training splits
  decoder        ByteLevel
Special tokens (ids 0 and 1): `<|endoftext|>` (EOS and document separator) and `<|pad|>`.

Usage:
  python research/train/tokenizer.py [--work-dir DIR] [--vocab-size 2048] [--out tokenizer.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

import corpus

GLM_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                     r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN]
DEFAULT_VOCAB_SIZE = 2048


def build_empty_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _training_documents(splits: dict[str, tuple[str, str]]):
    """Yields training-split documents (never the held-out tail), without separators."""
    for name in corpus.CORPUS_NAMES:
        train_text, _ = splits[name]
        for document in train_text.split(corpus.DOC_SEPARATOR):
            if document:
                yield document


def train_tokenizer(splits: dict[str, tuple[str, str]], vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    tokenizer = build_empty_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_documents(splits), trainer=trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} entries, wanted {vocab_size}")
    if tokenizer.token_to_id(EOS_TOKEN) != 0 or tokenizer.token_to_id(PAD_TOKEN) != 1:
        raise RuntimeError("special tokens must be ids 0 (<|endoftext|>) and 1 (<|pad|>)")
    return tokenizer


def write_tokenizer_files(tokenizer: Tokenizer, out_dir: Path, model_max_length: int) -> None:
    """Writes tokenizer.json plus a tokenizer_config.json so transformers' AutoTokenizer loads it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=corpus.DEFAULT_WORK_DIR)
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    parser.add_argument("--out", type=Path, default=None, help="default: <work-dir>/tokenizer.json")
    args = parser.parse_args()
    splits = corpus.load_splits(args.work_dir)
    tokenizer = train_tokenizer(splits, args.vocab_size)
    out = args.out or args.work_dir / "tokenizer.json"
    tokenizer.save(str(out))
    for name in corpus.CORPUS_NAMES:
        _, holdout = splits[name]
        ids = tokenizer.encode(holdout).ids
        print(f"{name:7s} held-out: {len(holdout.encode()) / len(ids):.2f} bytes/token")
    sample = "def f(x):\n    return x + 1  # It's 1234 o'clock\n"
    ids = tokenizer.encode(sample).ids
    assert tokenizer.decode(ids) == sample, "round trip failed"
    print(f"wrote {out} ({tokenizer.get_vocab_size()} tokens); round trip ok")


if __name__ == "__main__":
    main()
