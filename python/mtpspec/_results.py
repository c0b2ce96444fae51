"""Result types: plain dataclasses over what the C++ library returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import numpy as np

from mtpspec import _ext

Scalar = Union[int, float, str, bool]

# Field order of Stats.to_dict(): identification, counts, rates, per-position lists, timings.
_TIMINGS = ("prefill_seconds", "draft_seconds", "verify_seconds", "sample_seconds", "other_seconds",
            "draft_prefill_seconds", "extend_seconds", "total_seconds")


def _table(rows: Any) -> np.ndarray:
    """A list of int lists of different lengths as a 2-D int64 array, padded with zeros."""
    width = max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


@dataclass(frozen=True, eq=False)
class Stats:
    """Statistics of one request (spec/stats.h). Names follow vLLM where it has one.

    ``per_position_acceptance[i]`` is the unconditional rate ``accepted_per_pos[i] / num_drafts``;
    ``conditional_acceptance[i]`` is ``accepted_per_pos[i] / reached_per_pos[i]`` (position i
    accepted given that every earlier one was). ``accepted_histogram[m]`` counts the verify steps
    with drafts that accepted m of them, so it sums to ``num_drafts``.
    """

    drafter: str
    accept_rule: str
    lossy: bool
    synthetic: bool
    prompt_tokens: int
    generated_tokens: int
    verify_steps: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    mean_acceptance_length: float
    draft_acceptance_rate: float
    tokens_per_second: float
    per_position_acceptance: np.ndarray  # [k_max] float64
    conditional_acceptance: np.ndarray  # [k_max] float64
    drafted_per_pos: np.ndarray  # [k_max] int64
    reached_per_pos: np.ndarray  # [k_max] int64
    accepted_per_pos: np.ndarray  # [k_max] int64
    accepted_histogram: np.ndarray  # [k_max + 1] int64
    k_decisions: np.ndarray  # [k_max + 1] int64: verify steps by the k they drafted
    probe_decisions: np.ndarray  # [k_max + 1] int64: ... of which adaptive-k exploration probes
    verify_seconds_by_k: np.ndarray  # [k_max + 1] float64: target forward seconds of those steps
    cycle_seconds_by_k: np.ndarray  # [k_max + 1] float64: whole-cycle seconds (draft, verify, sampling, extend)
    prompts_deferred: int  # requests whose drafter left the prompt for later (adaptive k expected plain decoding)
    prefill_seconds: float
    draft_seconds: float
    verify_seconds: float
    sample_seconds: float
    other_seconds: float
    draft_prefill_seconds: float  # the drafter's work on the prompt (part of prefill_seconds)
    extend_seconds: float  # the drafter's extend of committed rows (part of other_seconds)
    total_seconds: float
    adaptive_k: bool = False  # k was chosen each cycle by an adaptive-k controller
    # Tree drafting: the shape ("3,2,1", "nodes=8"; empty for a chain). The per-position arrays then
    # count depths, num_draft_tokens the tree nodes verified, and k_decisions the node counts.
    tree: str = ""
    accepted_per_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [max rank + 1]
    # [depth, max rank + 1] accepted nodes by depth (0: the root's children) and sibling rank
    accepted_per_depth_rank: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    summary: str = field(default="", repr=False, compare=False)  # the C++ one-screen summary

    @classmethod
    def _from_ext(cls, s: Any) -> "Stats":
        def ints(v: Any) -> np.ndarray:
            return np.asarray(v, dtype=np.int64)

        def floats(v: Any) -> np.ndarray:
            return np.asarray(v, dtype=np.float64)

        return cls(
            drafter=s.drafter,
            accept_rule=s.accept_rule,
            lossy=s.lossy,
            synthetic=s.synthetic,
            prompt_tokens=s.prompt_tokens,
            generated_tokens=s.generated_tokens,
            verify_steps=s.verify_steps,
            num_drafts=s.num_drafts,
            num_draft_tokens=s.num_draft_tokens,
            num_accepted_tokens=s.num_accepted_tokens,
            mean_acceptance_length=s.mean_acceptance_length,
            draft_acceptance_rate=s.draft_acceptance_rate,
            tokens_per_second=s.tokens_per_second,
            per_position_acceptance=floats(s.per_position_acceptance),
            conditional_acceptance=floats(s.conditional_acceptance),
            drafted_per_pos=ints(s.drafted_per_pos),
            reached_per_pos=ints(s.reached_per_pos),
            accepted_per_pos=ints(s.accepted_per_pos),
            accepted_histogram=ints(s.accepted_histogram),
            k_decisions=ints(s.k_decisions),
            probe_decisions=ints(s.probe_decisions),
            verify_seconds_by_k=floats(s.verify_seconds_by_k),
            cycle_seconds_by_k=floats(s.cycle_seconds_by_k),
            prompts_deferred=s.prompts_deferred,
            adaptive_k=s.adaptive_k,
            tree=s.tree,
            accepted_per_rank=ints(s.accepted_per_rank),
            accepted_per_depth_rank=_table(s.accepted_per_depth_rank),
            summary=s.summary(),
            **{name: getattr(s, name) for name in _TIMINGS},
        )

    def to_dict(self) -> Dict[str, Union[Scalar, List[Any]]]:
        """Flat scalars and plain lists, e.g. for ``pandas.DataFrame([r.stats.to_dict() for r in runs])``."""
        out: Dict[str, Union[Scalar, List[Any]]] = {}
        for f in dataclasses.fields(self):
            if f.name == "summary":
                continue
            value = getattr(self, f.name)
            out[f.name] = value.tolist() if isinstance(value, np.ndarray) else value
        return out

    def __str__(self) -> str:
        return self.summary or repr(self)


@dataclass(frozen=True, eq=False)
class GenerateResult:
    """One request: the generated tokens (prompt excluded), their text when the model has a
    tokenizer, the statistics and why it stopped ("eos", "stop_token", "stop_string",
    "max_new_tokens", "capacity", "cancelled").

    ``text`` leaves out the id that ended the request (an EOS or stop id, which ``tokens`` keep) and
    everything from a stop string on. ``logprobs`` (with ``logprobs=True``, else None) is float32
    ``[len(tokens)]``: each token's log-probability under the target's raw distribution.
    """

    text: Optional[str]
    tokens: List[int]
    stats: Stats
    stop_reason: str
    logprobs: Optional[np.ndarray] = None


@dataclass(frozen=True, eq=False)
class MtpDraft:
    """The MTP head's greedy chain after a prefill (see :meth:`mtpspec.Model.mtp_draft`).

    ``tokens[j]`` is the argmax of ``probs[j]`` (softmax of step j's MTP logits, float32 [k, vocab]);
    ``next_token`` is the token the chain started from (the target's greedy next token, or the one
    passed in). ``tokens`` may be shorter than k near the cache capacity.
    """

    tokens: List[int]
    probs: np.ndarray
    next_token: int

    @property
    def token_probs(self) -> np.ndarray:
        """Probability the MTP head gave each chosen draft token. [len(tokens)]"""
        return self.probs[np.arange(len(self.tokens)), self.tokens]


@dataclass(frozen=True, eq=False)
class BatchStats:
    """How a batch ran (spec/batch.h), over all its cycles.

    ``forwards`` counts the target's verify forwards (one batched forward counts once),
    ``rows_per_forward`` their mean rows, ``batch_histogram[b]`` the cycles with b requests in the
    batch. ``experts_read`` sums, over forwards and MoE layers, the routed experts whose weights the
    forward read (the union of its rows' choices); ``expert_choices`` the rows' routing choices, what
    one forward per row would read. ``seconds`` splits the wall time: prefill, draft, verify,
    accept_commit (acceptance, commit, rollback and the extends of drafters not batched), tree_drafts
    (tree requests drafting their own trees), draft_extends (of draft: the batched MTP drafters'
    extends of committed rows, one forward for all of them), total. ``cycle_log`` holds each cycle in
    order: ``requests`` in it, ``draft_lengths`` (the k each chain request drafted), ``verify_rows``,
    ``experts_read`` (summed over MoE layers), ``draft_seconds`` and ``verify_seconds``.
    """

    slots: int
    requests: int
    failed: int
    generated_tokens: int
    cycles: int
    forwards: int
    batched_forwards: int
    verify_rows: int
    rows_per_forward: float
    max_rows: int
    batched_drafts: int  # cycles whose drafts ran together (one MTP forward per depth)
    mean_batch: float
    batch_histogram: List[int]
    experts_read: int
    expert_choices: int
    tokens_per_second: float
    seconds: Dict[str, float]
    cycle_log: List[Dict[str, Any]]

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "BatchStats":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


class BatchResult(List[GenerateResult]):
    """The results of a batch of requests, in the order of the prompts, with the batch's
    :class:`BatchStats` in ``stats`` and, in ``timing``, each request's slot, ``queued_seconds``
    (from the batch's start to its prefill), ``latency_seconds`` (to its last token) and
    ``tokens_per_second`` (its tokens over its time in a slot)."""

    def __init__(self, results: List[GenerateResult], stats: BatchStats, timing: List[Dict[str, Any]]) -> None:
        super().__init__(results)
        self.stats = stats
        self.timing = timing


class BatchError(_ext.Error):
    """Requests of a batch failed while running (e.g. a prompt too long for the cache); the others
    finished. ``results`` is the :class:`BatchResult` with None where a request failed, ``errors``
    maps each failed request's index to its message."""

    def __init__(self, results: BatchResult, errors: Dict[int, str]) -> None:
        lines = "; ".join(f"prompt {i}: {message}" for i, message in sorted(errors.items()))
        super().__init__(f"{len(errors)} of {len(results)} requests failed ({lines}); the others finished")
        self.code = "UNKNOWN"
        self.results = results
        self.errors = errors
