"""Model: argument and result conversion around mtpspec._ext (the tokenizer and text handling are in _text)."""

from __future__ import annotations

import json
import os
import queue
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple, Union, cast

import numpy as np

from mtpspec import _ext
from mtpspec._results import BatchError, BatchResult, BatchStats, GenerateResult, MtpDraft, Stats
from mtpspec._chat import load_chat_template
from mtpspec._text import PathLike, Tokenizer, TokenIds, _ids, _is_batch, _StopStrings, _TextPieces

# hook(target_probs [k+1, V], draft_tokens, draft_probs [k, V] | None) -> (accepted, token)
AcceptanceHook = Callable[[np.ndarray, List[int], Optional[np.ndarray]], Tuple[int, int]]


class Model:
    """A loaded checkpoint. Calls release the GIL while C++ runs; several threads may use one Model
    (each call has its own KV cache)."""

    def __init__(self, handle: _ext.Model, tokenizer: Optional[Tokenizer]) -> None:
        self._m = handle
        self._tokenizer = tokenizer

    @classmethod
    def load(
        cls,
        path: PathLike,
        threads: Optional[int] = None,
        dtype: Optional[str] = None,
        cache_capacity: Optional[int] = None,
        index_keys: str = "f32",
        activations: str = "f32",
    ) -> "Model":
        """Loads ``path/config.json`` and its safetensors checkpoint, and ``path/tokenizer.json``
        when present.

        threads: size of the C++ thread pool; it is process-wide and fixed by the first model call,
            so a different count later raises :class:`mtpspec.Error` (None: keep the current or
            default count: ``MTPSPEC_THREADS`` or the number of cores).
        dtype: None or "stored" (f32/bf16/FP8 used in place), "f32" or "bf16" (convert every matrix),
            or "fp8" (FP8 used in place, the other matrices but the MoE router quantised to FP8 with
            128 x 128 block scales at load).
        cache_capacity: KV positions of every call's cache (None: each call sizes its own,
            capped at max_position_embeddings).
        index_keys: "f32", "bf16" or "fp8": how the caches keep the DSA indexer's keys, and so how
            its scores are computed. bf16: keys and queries rounded to bf16, products summed in f32
            (half the bytes and twice the multiply-adds per instruction of f32). fp8: as DeepSeek-V3.2's
            reference inference code, keys and queries Hadamard-rotated and quantised to e4m3 with a
            power-of-two scale each. Both change the top-k selection slightly.
        activations: "f32", "bf16" or "fp8": the precision in which the matrices take their input
            rows. f32 multiplies the rows as given (exact products). bf16 rounds each row to bf16, for
            the FP8 and the bf16 matrices; fp8 quantises it to e4m3 in groups of 128 with power-of-two
            scales for the FP8 matrices, as DeepSeek-V3.2's reference code does before its FP8 GEMM.
            Both multiply bf16 pairs, with fewer operations per weight than f32 rows (for bf16
            matrices, in prefill chunks); f32 matrices, the MoE router and kv_b_proj take f32 rows.
            Speculative output stays identical to plain output.
        """
        if threads is not None:
            _ext.set_threads(int(threads))
        path = os.fspath(path)
        handle = _ext.Model.load(path, dtype, cache_capacity, index_keys, activations)
        note = handle.load_report()["activations_note"]
        if note:
            warnings.warn(note, stacklevel=2)
        tokenizer = None
        tokenizer_path = os.path.join(path, "tokenizer.json")
        if os.path.lexists(tokenizer_path):  # present but not a readable file is an error, not None
            tokenizer = Tokenizer.load(tokenizer_path)
        return cls(handle, tokenizer)

    # --- description -------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._m.path

    @property
    def config(self) -> Dict[str, Any]:
        """The parsed config.json (a fresh dict): every ModelConfig field, ``rope`` as a dict, and
        the per-layer schedules ``layer_is_dense`` (dense MLP vs MoE) and ``layer_has_indexer``
        (full vs shared indexer)."""
        return self._m.config()

    @property
    def load_report(self) -> Dict[str, Any]:
        """Tensors loaded, fp8 conversions, MTP availability, parameter and cache sizes."""
        return self._m.load_report()

    @property
    def vocab_size(self) -> int:
        return int(self._m.vocab_size)

    @property
    def has_mtp(self) -> bool:
        return bool(self._m.has_mtp)

    @property
    def index_keys(self) -> str:
        """How the caches keep the DSA indexer's keys: "f32", "bf16" or "fp8" (see :meth:`load`)."""
        return str(self._m.index_keys)

    @property
    def activations(self) -> str:
        """The precision of the FP8 matrices' input rows: "f32", "bf16" or "fp8" (see :meth:`load`)."""
        return str(self._m.activations)

    @property
    def eos_token_ids(self) -> List[int]:
        """The end-of-sequence ids of config.json (``eos_token_id``), which end generation by default."""
        return list(self._m.config()["eos_token_ids"])

    @property
    def tokenizer(self) -> Optional[Tokenizer]:
        """The tokenizer from ``tokenizer.json`` beside the checkpoint, or None."""
        return self._tokenizer

    def __repr__(self) -> str:
        c = self._m.config()
        return (f"Model({self.path!r}, {c['model_type']}, layers={c['num_hidden_layers']}, "
                f"hidden={c['hidden_size']}, vocab={c['vocab_size']}, mtp={self.has_mtp})")

    # --- forward passes -----------------------------------------------------------------------

    def logits(
        self,
        ids: TokenIds,
        positions: Optional[Sequence[int]] = None,
        rows: Union[None, str, Sequence[int]] = None,
        path: str = "auto",
        kv_cache: str = "f32",
    ) -> np.ndarray:
        """Logits of ``ids`` run on an empty cache: float32 ``[rows, vocab]`` (rows: None/"all",
        "last" or a list of row indices; path: "auto", "dense", "mask" or "gather"; kv_cache: "f32",
        "int8" for the latent stored as int8 with one scale per token, or "fp8" for DeepSeek-V3.2's
        served cache: e4m3 latent with a power-of-two scale per 128 values, bf16 rope key, attended
        in bf16 products). The array owns the C++ buffer; nothing is copied."""
        return self._m.logits(_ids(ids), None if positions is None else list(positions),
                              rows if rows is None or isinstance(rows, str) else list(rows), path, kv_cache)

    def time_forward(self, ids: TokenIds, rows: int, repeats: int = 5, warmup: int = 1) -> np.ndarray:
        """Seconds of each of ``repeats`` forwards of ``rows`` tokens (all logits, as a verify) after
        a context of ``len(ids)`` positions, prefilled once and not timed. rows=1 is a plain decode
        step; rows=k+1 is the verify of k drafts. float64 ``[repeats]``."""
        return self._m.time_forward(_ids(ids), int(rows), int(repeats), int(warmup))

    def mtp_draft(
        self,
        ids: TokenIds,
        k: int,
        chain: str = "default",
        hidden: str = "post",
        index_share: str = "exact",
        next_token: Optional[int] = None,
    ) -> MtpDraft:
        """Prefills ``ids`` through the target, then runs the MTP head's greedy chain for k steps
        from the pair (last hidden, next token), exactly as the first speculative cycle would.
        ``next_token`` defaults to the target's greedy token after ``ids``; pass the true next token
        to draft against held-out text."""
        tokens, probs, nxt = self._m.mtp_draft(_ids(ids), int(k), chain, hidden, index_share, next_token)
        return MtpDraft(tokens=list(tokens), probs=probs, next_token=int(nxt))

    # --- generation ---------------------------------------------------------------------------

    def _prompt(self, prompt_or_ids: Union[str, TokenIds]) -> List[int]:
        if isinstance(prompt_or_ids, str):
            if self._tokenizer is None:
                raise ValueError(f"{self.path} has no tokenizer.json: pass token ids instead of text")
            return self._tokenizer.encode(prompt_or_ids)
        return _ids(prompt_or_ids)

    def _result(self, r: _ext.GenerateResult, stops: Optional["_StopStrings"]) -> GenerateResult:
        tokens = list(r.tokens)
        stop_reason = r.stop_reason
        text: Optional[str] = None
        if stops is not None and stops.hit is not None:
            tokens, text, stop_reason = tokens[:stops.hit_tokens], stops.hit, "stop_string"
        elif self._tokenizer is not None:
            # The token that ended the request (an EOS or stop id) is in tokens, not in the text.
            ended = stop_reason in ("eos", "stop_token") and tokens
            text = self._tokenizer.decode(tokens[:-1] if ended else tokens)
        logprobs = np.asarray(r.logprobs, dtype=np.float32)[:len(tokens)] if len(r.logprobs) else None
        return GenerateResult(text=text, tokens=tokens, stats=Stats._from_ext(r.stats), stop_reason=stop_reason,
                              logprobs=logprobs)

    def apply_chat_template(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = True,
                            chat_template: Optional[PathLike] = None, **kwargs: Any) -> str:
        """The prompt text of chat ``messages`` ([{"role": ..., "content": ...}, ...]) by the model's
        chat template (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``), or
        the template file ``chat_template``, rendered as transformers' ``apply_chat_template`` renders
        it (jinja2, sandboxed). ``kwargs`` reach the template (``enable_thinking=False``, ...)."""
        template = load_chat_template(Path(self.path), None if chat_template is None else Path(chat_template))
        if template is None:
            raise ValueError(f"{self.path} has no chat template (chat_template.jinja, or chat_template in "
                             "tokenizer_config.json): pass chat_template=FILE")
        return template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)

    def generate(
        self,
        prompt_or_ids: Union[None, str, TokenIds, Sequence[Union[str, TokenIds]]] = None,
        max_new_tokens: int = 32,
        *,
        messages: Optional[List[Dict[str, Any]]] = None,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
        draft: str = "mtp",
        k: Union[int, str] = 3,
        accept: str = "sampler-equality",
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        seed: int = 0,
        mtp_hidden: str = "post",
        mtp_chain: str = "default",
        mtp_index_share: str = "exact",
        sample_drafts: bool = False,
        adaptive_k: bool = False,
        synthetic_rates: Optional[Sequence[float]] = None,
        synthetic_rates_unconditional: Optional[Sequence[float]] = None,
        synthetic_acceptance_length: Optional[float] = None,
        acceptance_hook: Optional[AcceptanceHook] = None,
        stop_at_eos: bool = True,
        eos_token_id: Union[None, int, Sequence[int]] = None,
        stop_token_ids: Optional[Sequence[int]] = None,
        stop: Union[None, str, Sequence[str]] = None,
        logprobs: bool = False,
        ngram: int = 3,
        relaxed_top_n: int = 3,
        relaxed_delta: float = 0.1,
        on_tokens: Optional[Callable[[List[int]], Optional[bool]]] = None,
        kv_cache: str = "f32",
        device: str = "cpu",
        device_weights: str = "bf16",
        adaptive_controller: Optional[_ext.AdaptiveController] = None,
        tree: Optional[Sequence[int]] = None,
        tree_nodes: Optional[int] = None,
        batch: Optional[int] = None,
        k_schedule: Optional[Sequence[Tuple[int, int]]] = None,
        per_request: Optional[Sequence[Dict[str, Any]]] = None,
    ) -> Any:
        """Generates up to ``max_new_tokens`` tokens after the prompt (text needs a tokenizer).
        Every option but the prompt and ``max_new_tokens`` is keyword-only; the C++ request builder
        (pipeline/request.h) checks them all, and each error names the parameter.

        messages: chat messages in place of a prompt, rendered by :meth:`apply_chat_template` with
            ``chat_template_kwargs`` (e.g. ``{"enable_thinking": False}``).

        draft: "mtp", "lookup" (prompt n-gram), "hybrid" (lookup, else MTP) or "none" (plain).
        k: drafts per cycle, 0..15, or "auto": adaptive k up to 8 (``adaptive_k=True`` makes ``k``
            the maximum instead).
        accept: "sampler-equality" (lossless: output identical to plain decoding with the same
            sampling parameters and seed), "rejection", "relaxed" (lossy) or "synthetic"
            (benchmark only: position i accepted with probability ``synthetic_rates[i]`` given that
            positions 0..i-1 were, one conditional rate per draft position;
            ``synthetic_rates_unconditional`` gives them as the fraction of drafts accepted up to
            each position, as llama.cpp and vLLM report them, and ``synthetic_acceptance_length``
            as a mean accepted length on vLLM's schedule [1, ..., 1, fraction, 0, ...]).
        acceptance_hook: a Python acceptance rule, replacing ``accept`` for every verify block
            with drafts: ``hook(target_probs, draft_tokens, draft_probs) -> (accepted, token)``
            where target_probs is float64 [k+1, V], the target sampler's distribution at each
            verified row (one-hot when greedy), draft_probs is [k, V] with ``sample_drafts`` and
            None otherwise, and ``token`` is the correction (or bonus) token emitted after the
            ``accepted`` drafts. It runs with the GIL held once per cycle: slow, for research.
        stop_at_eos: end at an end-of-sequence id (``eos_token_id`` if given, else
            :attr:`eos_token_ids` from config.json); stop_reason "eos".
        stop_token_ids: further ids that end the request once emitted (stop_reason "stop_token").
            The ending id stays in ``tokens`` but not in ``text``.
        stop: a string or strings that end the request once the decoded text contains one (needs
            the tokenizer; stop_reason "stop_string"). ``text`` ends just before it; ``tokens`` end
            with the token that completed it.
        logprobs: also return ``result.logprobs``, float32 [len(tokens)]: each emitted token's
            log-probability under the target's raw distribution (log softmax of its logits at
            temperature 1, before top-k/top-p/min-p), whatever the sampling.
        on_tokens: called with each batch of committed tokens; returning False stops generation
            (stop_reason "cancelled").
        kv_cache: "f32", "int8" for the target's MLA latent stored as int8 with one scale per
            token (rope and indexer keys stay f32), or "fp8" for DeepSeek-V3.2's served cache (e4m3
            latent with a power-of-two scale per 128 values, bf16 rope key; the decode and verify
            attention multiplies in bf16). The MTP layer's own cache stays f32.
        device: "cpu", or "cuda" in an extension built with the CUDA backend (no CPU fallback).
        device_weights: with device "cuda", "bf16" widens the model's FP8 matrices (those of an FP8
            checkpoint, or all with ``dtype="fp8"`` at load) to bf16 on the GPU; "fp8" keeps them FP8
            (one byte per weight and the block scales), widened in the kernels.
        adaptive_controller: with adaptive k, a :class:`mtpspec.AdaptiveController` made with
            ``k_max = k`` to carry across calls: the draft and verify costs and the acceptance it
            learned price the next request, which then needs no exploration burst of its own (see
            spec/adaptive_k.h). One request at a time; None gives each call a fresh controller, which
            probes drafting only in requests long enough to pay for it (~200 tokens at the default 1%
            exploration budget; ``AdaptiveController(k, exploration_budget=...)`` sets another).

        tree: a draft tree from the MTP head instead of a chain of ``k``: its branching per depth,
            e.g. ``[3, 2, 1]`` (3 children of the pending token, 2 under each, 1 under each of
            those: 15 nodes). Each node's children are the head's top tokens at that node; one
            forward verifies every node, and sampler-equality follows the child equal to the
            target's draw, so the output is still identical to plain decoding (``accept="rejection"``
            tries the siblings in turn and stays lossless in distribution). At most 15 nodes;
            ``draft="mtp"`` on the CPU, fixed shape only. With ``sample_drafts=True`` a node's
            children are drawn from the head's distribution without replacement instead, and
            ``accept="rejection"`` accepts them against it (recursive rejection over siblings).
            ``result.stats.accepted_per_rank`` counts accepted nodes by sibling rank.
        tree_nodes: a dynamic tree instead (EAGLE-2 style): grown depth by depth by cumulative
            draft probability, keeping the ``tree_nodes`` most probable nodes (1..15); argmax drafts.

        Ctrl-C (KeyboardInterrupt) stops generation within one verify step when called from the
        main thread; the model stays usable. From another thread, stop it with ``on_tokens``
        returning False (``stream()`` does this when closed).

        A list of prompts (texts or id lists) is a batch: the requests run ``batch`` at a time
        (default: all at once), each cycle drafting for every request and verifying all their
        blocks in one target forward (block-diagonal attention, each routed expert read once for the
        rows that chose it), and a finished request's slot takes the next prompt. Every request's
        tokens equal the same request run alone. Returns a :class:`BatchResult` (a list of
        GenerateResult, with ``.stats`` and ``.timing``).
        per_request: one dict of options per prompt that override the keywords for that request
            (e.g. ``[{"seed": 1}, {"temperature": 0.7, "k": 1}]``); what the slots share (draft,
            mtp_*, ngram, kv_cache, device, device_weights) must be the same for all.
        k_schedule: ``[(B1, k1), (B2, k2), ...]``: a cycle with up to B1 requests drafts k1, and so
            on (ascending B; the last entry beyond them), replacing every request's k.
        ``k="auto"`` in a batch: one controller picks every request's k each cycle, from the batch's
            measured verify cost per row and each request's acceptance (spec/batch_k.h).
        acceptance_hook and adaptive_controller serve one request at a time and cannot join a batch.
        Options that are refused raise before anything runs and name ``requests[i]``; a request
        that fails while running raises :class:`BatchError` once the others have finished.
        """
        if messages is not None:
            if prompt_or_ids is not None:
                raise ValueError("give a prompt or messages, not both")
            prompt_or_ids = self.apply_chat_template(messages, **(chat_template_kwargs or {}))
        elif chat_template_kwargs is not None:
            raise ValueError("chat_template_kwargs needs messages")
        if prompt_or_ids is None:
            raise ValueError("generate needs a prompt (text or token ids) or messages")
        options: Dict[str, Any] = dict(
            draft=draft, k=k, accept=accept, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            seed=seed, mtp_hidden=mtp_hidden, mtp_chain=mtp_chain, mtp_index_share=mtp_index_share,
            sample_drafts=sample_drafts, adaptive_k=adaptive_k, synthetic_rates=synthetic_rates,
            synthetic_rates_unconditional=synthetic_rates_unconditional,
            synthetic_acceptance_length=synthetic_acceptance_length, acceptance_hook=acceptance_hook,
            on_tokens=on_tokens, stop_at_eos=stop_at_eos,
            eos_token_id=eos_token_id, stop_token_ids=stop_token_ids, stop=stop, logprobs=logprobs, ngram=ngram,
            relaxed_top_n=relaxed_top_n, relaxed_delta=relaxed_delta, kv_cache=kv_cache, device=device,
            device_weights=device_weights, adaptive_controller=adaptive_controller, tree=tree, tree_nodes=tree_nodes)
        if _is_batch(prompt_or_ids):
            return self._generate_batch(list(prompt_or_ids), max_new_tokens, options, batch, k_schedule, per_request)
        for name, value in (("batch", batch), ("k_schedule", k_schedule), ("per_request", per_request)):
            if value is not None:
                raise ValueError(f"{name} needs a list of prompts (a batch); got one prompt")
        stops = None
        if stop is not None:
            if self._tokenizer is None:
                raise ValueError(f"{self.path} has no tokenizer.json: stop strings need one (use stop_token_ids)")
            stops = _StopStrings(self._tokenizer, stop, on_tokens)
            on_tokens = stops
        r = _ext.generate(
            self._m, self._prompt(prompt_or_ids), max_new_tokens=max_new_tokens, draft=draft, k=k, accept=accept,
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, mtp_hidden=mtp_hidden,
            mtp_chain=mtp_chain, mtp_index_share=mtp_index_share, sample_drafts=sample_drafts, adaptive_k=adaptive_k,
            synthetic_rates=synthetic_rates, synthetic_rates_unconditional=synthetic_rates_unconditional,
            synthetic_acceptance_length=synthetic_acceptance_length, acceptance_hook=acceptance_hook, on_tokens=on_tokens,
            stop_at_eos=stop_at_eos, eos_token_id=eos_token_id, stop_token_ids=stop_token_ids, logprobs=logprobs,
            ngram=ngram, relaxed_top_n=relaxed_top_n, relaxed_delta=relaxed_delta, kv_cache=kv_cache, device=device,
            device_weights=device_weights, adaptive_controller=adaptive_controller, tree=tree, tree_nodes=tree_nodes)
        return self._result(r, stops)

    def _generate_batch(self, prompts: List[Any], max_new_tokens: int, options: Dict[str, Any], batch: Optional[int],
                        k_schedule: Optional[Sequence[Tuple[int, int]]],
                        per_request: Optional[Sequence[Dict[str, Any]]]) -> BatchResult:
        if per_request is not None and len(per_request) != len(prompts):
            raise ValueError(f"per_request has {len(per_request)} entries for {len(prompts)} prompts")
        requests: List[Tuple[List[int], Dict[str, Any]]] = []
        stops: List[Optional[_StopStrings]] = []
        for i, prompt in enumerate(prompts):
            mine = dict(options, max_new_tokens=max_new_tokens)
            if per_request is not None:
                if not isinstance(per_request[i], dict):
                    raise TypeError(f"per_request[{i}] must be a dict of generate() options")
                if "prompt_or_ids" in per_request[i]:
                    raise ValueError(f"per_request[{i}]: the prompts come from the list, not per_request")
                mine.update(per_request[i])
            stop = mine.pop("stop", None)
            stop_strings = None
            if stop is not None:
                if self._tokenizer is None:
                    raise ValueError(f"{self.path} has no tokenizer.json: stop strings need one (use stop_token_ids)")
                stop_strings = _StopStrings(self._tokenizer, stop, mine.get("on_tokens"))
                mine["on_tokens"] = stop_strings
            stops.append(stop_strings)
            requests.append((self._prompt(prompt), mine))
        size = len(requests) if batch is None else batch
        raw, errors, timing, stats_json = _ext.generate_batch(self._m, requests, size, k_schedule)
        results = [None if r is None else self._result(r, stops[i]) for i, r in enumerate(raw)]
        out = BatchResult(cast(List[GenerateResult], results), BatchStats._from_json(json.loads(stats_json)), timing)
        failed = {i: e for i, e in enumerate(errors) if e is not None}
        if failed:
            raise BatchError(out, failed)
        return out

    def stream(
        self,
        prompt_or_ids: Union[str, TokenIds, Sequence[Union[str, TokenIds]]],
        max_new_tokens: int = 32,
        *,
        text: Optional[bool] = None,
        **options: Any,
    ) -> Generator[Any, None, Any]:
        """Like :meth:`generate` (same keyword options), but yields tokens as they are committed:
        token ids, or text pieces when the model has a tokenizer (``text=False`` forces ids).

        Generation runs on a background thread. Closing the generator (or breaking out of a
        ``for`` loop over it, or Ctrl-C) stops it within one verify step. The generator's return
        value (``StopIteration.value``, or the result of ``yield from``) is the GenerateResult.

        On a list of prompts (a batch, as in :meth:`generate`) it yields ``(index, piece)`` pairs,
        index being the prompt's place in the list, in the order the batch commits them, and returns
        the :class:`BatchResult`.
        """
        if "on_tokens" in options:
            raise TypeError("stream() delivers the tokens itself; on_tokens is not accepted")
        as_text = self._tokenizer is not None if text is None else bool(text)
        if as_text and self._tokenizer is None:
            raise ValueError(f"{self.path} has no tokenizer.json: text=True needs one")
        if _is_batch(prompt_or_ids):
            return self._stream_batch(list(prompt_or_ids), int(max_new_tokens), as_text, options)
        ids = self._prompt(prompt_or_ids)
        return self._stream(ids, int(max_new_tokens), as_text, options)

    def _stream(self, ids: List[int], max_new_tokens: int, as_text: bool,
                options: Dict[str, Any]) -> Generator[Union[int, str], None, GenerateResult]:
        batches: "queue.SimpleQueue[Tuple[str, Any]]" = queue.SimpleQueue()
        stop = threading.Event()

        def on_tokens(tokens: List[int]) -> bool:
            batches.put(("tokens", tokens))
            return not stop.is_set()

        def work() -> None:
            try:
                batches.put(("done", self.generate(ids, max_new_tokens, on_tokens=on_tokens, **options)))
            except BaseException as e:  # handed to the consumer
                batches.put(("error", e))

        pieces = _TextPieces(self, options) if as_text else None
        worker = threading.Thread(target=work, name="mtpspec-stream", daemon=True)
        worker.start()
        try:
            while True:
                kind, value = batches.get()
                if kind == "error":
                    raise value
                if kind == "done":
                    result = cast(GenerateResult, value)
                    if pieces is not None and (rest := pieces.finish(result)):
                        yield rest
                    return result
                if pieces is None:
                    yield from value
                elif piece := pieces.feed(value):
                    yield piece
        finally:
            stop.set()
            worker.join()

    def _stream_batch(self, prompts: List[Any], max_new_tokens: int, as_text: bool,
                      options: Dict[str, Any]) -> Generator[Tuple[int, Union[int, str]], None, BatchResult]:
        batches: "queue.SimpleQueue[Tuple[str, Any, Any]]" = queue.SimpleQueue()
        stop = threading.Event()
        per_request = list(options.pop("per_request", None) or [{} for _ in prompts])
        if len(per_request) != len(prompts):
            raise ValueError(f"per_request has {len(per_request)} entries for {len(prompts)} prompts")
        if any(not isinstance(x, dict) for x in per_request):
            raise TypeError("per_request must hold one dict of generate() options per prompt")
        if any("on_tokens" in x for x in per_request):
            raise TypeError("stream() delivers the tokens itself; on_tokens is not accepted")

        def on_tokens_of(index: int) -> Callable[[List[int]], bool]:
            def on_tokens(tokens: List[int]) -> bool:
                batches.put(("tokens", index, tokens))
                return not stop.is_set()
            return on_tokens

        streamed = [dict(x, on_tokens=on_tokens_of(i)) for i, x in enumerate(per_request)]

        def work() -> None:
            try:
                batches.put(("done", None, self.generate(prompts, max_new_tokens, per_request=streamed, **options)))
            except BaseException as e:  # handed to the consumer
                batches.put(("error", None, e))

        pieces = [_TextPieces(self, dict(options, **x)) for x in per_request] if as_text else None
        worker = threading.Thread(target=work, name="mtpspec-stream", daemon=True)
        worker.start()
        try:
            while True:
                kind, index, value = batches.get()
                if kind == "error":
                    raise value
                if kind == "done":
                    results = cast(BatchResult, value)
                    for i, result in enumerate(results):
                        if pieces is not None and (rest := pieces[i].finish(result)):
                            yield i, rest
                    return results
                if pieces is None:
                    for token in value:
                        yield index, token
                elif piece := pieces[index].feed(value):
                    yield index, piece
        finally:
            stop.set()
            worker.join()
