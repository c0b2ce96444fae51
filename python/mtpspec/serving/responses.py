"""One choice of a served request as its events arrive (tokens, stop strings, text), and the
response objects built from it: OpenAI's choices and usage, vLLM's per-request
metrics.speculative_decoding, and llama.cpp's timings."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np

from .. import _ext
from .._text import _StopStrings

FINISH = {"eos": "stop", "stop_token": "stop", "max_new_tokens": "length", "capacity": "length",
          "cancelled": "abort"}


class Choice:
    """The tokens and text of one prompt's request, fed event by event."""

    def __init__(self, index: int, prompt: List[int], tokenizer: Any, stops: List[str], ending: set) -> None:
        self.index, self.prompt, self.tokenizer = index, prompt, tokenizer
        self.tokens: List[int] = []
        self.logprobs: List[float] = []
        self.handle: Optional[int] = None
        self.done = False
        self.result: Any = None
        self.error: Optional[tuple] = None
        self.finish_reason: Optional[str] = None
        self._ending = ending  # ids whose text the completion leaves out (end of sequence)
        self._stops = _StopStrings(tokenizer, stops, None, skip_special_tokens=True) if stops else None
        self._hold_back = max((len(s) for s in stops), default=1) - 1
        self._emitted = ""
        self.stopped = False  # a stop string ended it (the engine was told to cancel)
        self.streamed = 0  # tokens already sent in stream chunks

    def feed(self, tokens: List[int], logprobs: List[float]) -> bool:
        """Adds a step's tokens; True when a stop string ended the choice with them."""
        if self.stopped:
            return False
        if self._stops is not None and not self._stops(tokens):
            keep = self._stops.hit_tokens - len(self.tokens)
            self.tokens.extend(tokens[:keep])
            self.logprobs.extend(logprobs[:keep])
            self.stopped = True
            return True
        self.tokens.extend(tokens)
        self.logprobs.extend(logprobs)
        return False

    def end(self, error: Optional[tuple], result: Any) -> None:
        self.done, self.error, self.result = True, error, result
        if error is None:
            self.finish_reason = "stop" if self.stopped else FINISH.get(result.stop_reason, "stop")

    def text(self) -> str:
        if self.tokenizer is None:
            return ""
        if self._stops is not None and self._stops.hit is not None:
            return self._stops.hit
        ids = self.tokens[:-1] if self.done and self.tokens and self.tokens[-1] in self._ending else self.tokens
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def piece(self) -> str:
        """The text not yet streamed: all of it once done, else what later tokens cannot change."""
        if self.tokenizer is None:
            return ""
        text = self.text()
        if not (self.done or self.stopped):
            text = text.rstrip("\ufffd")
            ids = self.tokens
            if ids and ids[-1] in self._ending:  # maybe the end: hold its text back
                text = self.tokenizer.decode(ids[:-1], skip_special_tokens=True).rstrip("\ufffd")
            text = text[:max(len(self._emitted), len(text) - self._hold_back)]
        piece = text[len(self._emitted):] if text.startswith(self._emitted) else ""
        self._emitted += piece
        return piece


def token_strings(tokenizer: Any, ids: List[int]) -> List[str]:
    if tokenizer is None:
        return [f"token_id:{i}" for i in ids]
    return [tokenizer.decode([i]) for i in ids]


def completion_logprobs(tokenizer: Any, ids: List[int], logprobs: List[Optional[float]],
                        top: Optional[List[Optional[Dict[str, float]]]] = None) -> Dict[str, Any]:
    """OpenAI's completions logprobs object. The generated tokens carry their own log-probability;
    their top_logprobs are null (the engine keeps only the sampled token's)."""
    strings = token_strings(tokenizer, ids)
    offsets, at = [], 0
    for s in strings:
        offsets.append(at)
        at += len(s)
    def finite(v: Optional[float]) -> Optional[float]:  # -inf as vLLM writes it: JSON has no infinity
        return None if v is None else v if math.isfinite(v) else -9999.0

    top = top if top is not None else [None] * len(ids)
    return {"tokens": strings, "token_logprobs": [finite(v) for v in logprobs],
            "top_logprobs": [None if t is None else {k: finite(v) for k, v in t.items()} for t in top],
            "text_offset": offsets}


def prompt_logprobs(logits: np.ndarray, ids: List[int], tokenizer: Any, top_n: int):
    """Each prompt token's log-probability after the tokens before it (None for the first), and the
    top_n likeliest tokens there, from the prompt's logits [rows, V]."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # [rows, V]
    token_logprobs: List[Optional[float]] = [None]
    top: List[Optional[Dict[str, float]]] = [None]
    for i in range(1, len(ids)):
        row = logp[i - 1]
        token_logprobs.append(float(row[ids[i]]))
        best = []
        if top_n > 0:
            part = np.argpartition(-row, min(top_n, row.size - 1))[:top_n]
            best = part[np.argsort(-row[part])]
        entries = {s: float(row[t]) for s, t in zip(token_strings(tokenizer, [int(t) for t in best]), best)}
        entries.setdefault(token_strings(tokenizer, [ids[i]])[0], float(row[ids[i]]))
        top.append(entries)
    return token_logprobs, top


def spec_decode_metrics(stats: List[Any], k: int, detailed: bool) -> Dict[str, Any]:
    """vLLM's metrics.speculative_decoding object over a request's choices (their SpecStats)."""
    merged = _ext.merge_stats(stats)
    drafts, draft_tokens, accepted = merged.num_drafts, merged.num_draft_tokens, merged.num_accepted_tokens
    steps_drafted, steps_accepted = list(merged.step_drafted), list(merged.step_accepted)
    width = max([k] + steps_drafted) + 1
    histogram = [0] * width
    by_length: Dict[str, List[int]] = {}
    for d, a in zip(steps_drafted, steps_accepted):
        histogram[a] += 1
        by_length.setdefault(str(d), [0] * (d + 1))[a] += 1
    out: Dict[str, Any] = {
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        "acceptance_histogram": histogram,
        "acceptance_histogram_by_draft_length": by_length,
        "num_spec_steps": drafts,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": draft_tokens,
        "num_spec_tokens": k,
    }
    # Per draft position i (tree depth i for a tree), as spec/stats.h defines them: accepted at i
    # over drafting steps (vLLM's per-position rate), and over the steps whose drafts reached i.
    out["per_position_acceptance_rate"] = list(merged.per_position_acceptance)
    out["per_position_conditional_acceptance_rate"] = list(merged.conditional_acceptance)
    seconds = merged.total_seconds
    out["tokens_per_second"] = merged.generated_tokens / seconds if seconds > 0 else 0.0
    if detailed:
        out["per_step_accepted"] = steps_accepted
        out["per_step_drafted"] = steps_drafted
    return out


def timings(stats: List[Any]) -> Dict[str, Any]:
    """llama-server's timings object over a request's choices."""
    prompt_n = sum(s.prompt_tokens for s in stats)
    prompt_ms = 1000 * sum(s.prefill_seconds for s in stats)
    predicted_n = sum(s.generated_tokens for s in stats)
    predicted_ms = 1000 * sum(max(s.total_seconds - s.prefill_seconds, 0.0) for s in stats)
    return {"prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_second": prompt_n / (prompt_ms / 1000) if prompt_ms > 0 else 0.0,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_second": predicted_n / (predicted_ms / 1000) if predicted_ms > 0 else 0.0,
            "draft_n": sum(s.num_draft_tokens for s in stats),
            "draft_n_accepted": sum(s.num_accepted_tokens for s in stats)}
