"""The OpenAI request bodies the server takes, as the field's tools send them, turned into
mtpspec requests: prompts as token ids and generate()'s keyword options (the option table,
pipeline/options.h). Every fault is an ApiError that names the field."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .. import _ext

# OpenAI's names for options of the table, and the table's names they stand for.
OPENAI_NAMES = {"max_tokens": "max_new_tokens", "ignore_eos": "stop_at_eos"}
# Table options that OpenAI's fields set (directly or through OPENAI_NAMES), so a body may not send
# them under the table's own name.
TAKEN = {"max_new_tokens", "stop_at_eos", "logprobs", "temperature", "top_p", "top_k", "min_p", "seed"}
# Fields the server accepts only at their neutral value (the tools send them so).
NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0, "repetition_penalty": 1, "best_of": 1, "min_tokens": 0,
           "logit_bias": None, "suffix": None}
IGNORED = {"user", "skip_special_tokens", "spaces_between_special_tokens"}


class ApiError(Exception):
    """An HTTP error with OpenAI's JSON body: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 kind: str = "invalid_request_error", headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.headers = headers or {}

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


def from_library_error(e: BaseException) -> ApiError:
    """An mtpspec error raised by submit(): a refused option is a 400 naming it, a full queue a 503."""
    code = getattr(e, "code", "")
    message = str(e)
    if code == "RESOURCE_EXHAUSTED":
        return ApiError(503, message, None, "server_overloaded", {"Retry-After": "1"})
    if code == "UNAVAILABLE":
        return ApiError(503, message, None, "server_shutting_down", {"Retry-After": "1"})
    if isinstance(e, (ValueError, TypeError)):
        param = message.split(" ", 1)[0].rstrip(":").split("[", 1)[0]
        param = {v: k for k, v in OPENAI_NAMES.items()}.get(param, param)
        known = {o["name"] for o in _ext.request_options()} | set(OPENAI_NAMES) | {"prompt"}
        return ApiError(400, message, param if param in known else None)
    return ApiError(500, message, None, "internal_error")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _need(ok: bool, name: str, what: str, value: Any) -> None:
    if not ok:
        raise ApiError(400, f"{name} must be {what}, got {value!r}", name)


@dataclass
class Parsed:
    """A request the engine can run: one or more prompts with the same options."""

    prompts: List[List[int]]
    options: Dict[str, Any]              # generate()'s keyword options
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    logprobs: Optional[int] = None       # top logprobs per token (0: the token's own only)
    stop: List[str] = field(default_factory=list)
    detailed: bool = False               # per-step acceptance lists in the metrics
    prompt_texts: List[Optional[str]] = field(default_factory=list)


class RequestReader:
    """Reads the fields the OpenAI endpoints share."""

    def __init__(self, vocab_size: int, tokenizer: Any, capacity: int, detailed: bool,
                 defaults: Optional[Dict[str, Any]] = None) -> None:
        self.vocab_size, self.tokenizer, self.capacity, self.detailed = vocab_size, tokenizer, capacity, detailed
        self.table = {o["name"]: o for o in _ext.request_options()}
        self.defaults = dict(defaults or {})  # the server's own request options, which a body may override

    def prompt_ids(self, value: Any, name: str) -> List[int]:
        if isinstance(value, str):
            if self.tokenizer is None:
                raise ApiError(400, f"{name} is text, but the model has no tokenizer.json: send token ids", name)
            try:
                return self.tokenizer.encode(value)
            except (TypeError, UnicodeError, ValueError) as e:
                raise ApiError(400, f"{name} cannot be encoded: {e}", name) from None
        _need(isinstance(value, list) and all(_is_int(t) for t in value), name, "text or a list of token ids", value)
        for i, t in enumerate(value):
            if not 0 <= t < self.vocab_size:
                raise ApiError(400, f"{name}[{i}] = {t} is outside the vocabulary [0, {self.vocab_size})", name)
        return list(value)

    def common(self, body: Dict[str, Any], parsed: Parsed, known: set) -> None:
        """Sampling, stopping, streaming and mtpspec's own fields; unknown fields are errors."""
        o = parsed.options
        d = self.defaults
        n = body.get("n")
        n = 1 if n is None else n
        _need(_is_int(n), "n", "an integer", n)
        if n != 1:
            raise ApiError(400, f"n = {n} is not supported: each request returns one choice (send n requests)", "n")
        # An absent or null field takes the server's default (its flags), else OpenAI's.
        def field(name: str, fallback: Any) -> Any:
            value = body.get(name)
            return d.get(name, fallback) if value is None else value

        temperature = field("temperature", 1.0)
        _need(_is_number(temperature) and temperature >= 0, "temperature", "a number >= 0", temperature)
        o["temperature"] = float(temperature)
        top_p = field("top_p", 1.0)
        _need(_is_number(top_p) and 0 < top_p <= 1, "top_p", "a number in (0, 1]", top_p)
        o["top_p"] = float(top_p)
        top_k = field("top_k", 0)
        _need(_is_int(top_k) and top_k >= -1, "top_k", "an integer >= -1 (-1 or 0: all)", top_k)
        o["top_k"] = max(0, top_k)
        min_p = field("min_p", 0.0)
        _need(_is_number(min_p) and 0 <= min_p <= 1, "min_p", "a number in [0, 1]", min_p)
        o["min_p"] = float(min_p)
        seed = field("seed", None)
        _need(seed is None or (_is_int(seed) and 0 <= seed < 2 ** 63), "seed", "an integer in [0, 2**63)", seed)
        o["seed"] = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else seed
        ignore_eos = body.get("ignore_eos")
        ignore_eos = not d.get("stop_at_eos", True) if ignore_eos is None else ignore_eos
        _need(isinstance(ignore_eos, bool), "ignore_eos", "true or false", ignore_eos)
        o["stop_at_eos"] = not ignore_eos
        stop = body.get("stop")
        stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
        _need(isinstance(stops, list) and all(isinstance(s, str) and s for s in stops), "stop",
              "a non-empty string or a list of them", stop)
        try:
            [s.encode("utf-8") for s in stops]
        except UnicodeError:
            raise ApiError(400, "stop holds text that is not valid Unicode", "stop") from None
        if stops and self.tokenizer is None:
            raise ApiError(400, "stop strings need the model's tokenizer.json; use stop_token_ids", "stop")
        parsed.stop = stops
        stream = body.get("stream")
        stream = False if stream is None else stream
        _need(isinstance(stream, bool), "stream", "true or false", stream)
        parsed.stream = stream
        stream_options = body.get("stream_options") or {}
        _need(isinstance(stream_options, dict), "stream_options", "an object", stream_options)
        include_usage = stream_options.get("include_usage", False)
        _need(isinstance(include_usage, bool), "stream_options.include_usage", "true or false", include_usage)
        parsed.include_usage = include_usage
        metrics = body.get("spec_decode_metrics", "detailed" if self.detailed else "summary")
        _need(metrics in ("summary", "detailed"), "spec_decode_metrics", "summary or detailed", metrics)
        parsed.detailed = metrics == "detailed"
        for name, neutral in NEUTRAL.items():
            value = body.get(name)
            if value is not None and value != neutral and not (neutral is None and value in ({}, "")):
                raise ApiError(400, f"{name} = {value!r} is not supported (only {neutral!r})", name)
        known = known | set(NEUTRAL) | IGNORED | {"model", "n", "temperature", "top_p", "top_k", "min_p", "seed",
                                                  "ignore_eos", "stop", "stream", "stream_options",
                                                  "spec_decode_metrics"}
        for name, value in body.items():
            if name in known:
                continue
            if name in TAKEN or name not in self.table:
                raise ApiError(400, f"unknown field {name}" + (" (use the OpenAI field)" if name in TAKEN else ""),
                               name)
            if value is not None:
                o[name] = value  # an mtpspec option: the option table checks its type and range

    def budget(self, body: Dict[str, Any], names: List[str], prompts: List[List[int]], default: Optional[int]) -> int:
        """max_tokens (or the first of `names` present), checked against the cache."""
        name, value = next(((n, body[n]) for n in names if body.get(n) is not None), (names[0], default))
        longest = max(len(p) for p in prompts)
        if value is None:
            value = max(self.capacity - longest - 1, 0)
        _need(_is_int(value) and value >= 0, name, "an integer >= 0", value)
        if longest + 1 > self.capacity:
            raise ApiError(400, f"the prompt has {longest} tokens; the server's cache holds {self.capacity} positions",
                           "prompt" if "prompt" in body else "messages")
        if value > self.capacity - longest:
            raise ApiError(400, f"{name} = {value} with a prompt of {longest} tokens passes the server's cache of "
                                f"{self.capacity} positions (at most {self.capacity - longest})", name)
        return value

    def completion(self, body: Dict[str, Any]) -> Parsed:
        if "prompt" not in body:
            raise ApiError(400, "prompt is required", "prompt")
        prompt = body["prompt"]
        many = isinstance(prompt, list) and bool(prompt) and all(isinstance(p, (str, list)) for p in prompt)
        items = prompt if many else [prompt]
        _need(bool(items) and prompt not in ("", []), "prompt", "text, token ids, or a non-empty list of either",
              prompt)
        prompts = [self.prompt_ids(p, f"prompt[{i}]" if many else "prompt") for i, p in enumerate(items)]
        if any(not p for p in prompts):
            raise ApiError(400, "prompt is empty", "prompt")
        parsed = Parsed(prompts=prompts, options=dict(self.defaults),
                        prompt_texts=[p if isinstance(p, str) else None for p in items])
        echo = body.get("echo")
        echo = False if echo is None else echo
        _need(isinstance(echo, bool), "echo", "true or false", echo)
        parsed.echo = echo
        logprobs = body.get("logprobs")
        _need(logprobs is None or (_is_int(logprobs) and 0 <= logprobs <= 20), "logprobs",
              "an integer in [0, 20] or null", logprobs)
        parsed.logprobs = logprobs
        parsed.options["max_new_tokens"] = self.budget(body, ["max_tokens"], prompts, 16)
        parsed.options["logprobs"] = logprobs is not None
        self.common(body, parsed, {"prompt", "echo", "logprobs", "max_tokens"})
        if parsed.stream and parsed.echo:
            raise ApiError(400, "echo is not supported with stream: send stream false", "echo")
        return parsed
