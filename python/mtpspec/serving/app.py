"""The OpenAI-compatible HTTP server over the live batch engine (spec/batch_engine.h, _ext.Engine):
completions and chat completions, plain or streamed as SSE (one chunk per verify step), with the
per-request acceptance in vLLM's and llama.cpp's forms, Prometheus /metrics with vLLM's counter
names, the model list, health and the tokenizer endpoints. Faults are HTTP errors with OpenAI's JSON
error body; a client that goes away cancels its request."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, AsyncIterator, Dict, List, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from .. import _ext
from .._chat import ChatTemplate, ChatTemplateError
from .metrics import Metrics
from .protocol import ApiError, Parsed, RequestReader, from_library_error
from .responses import Choice, completion_logprobs, prompt_logprobs, spec_decode_metrics, timings, token_strings


class Server:
    """What the endpoints share: the model, its engine and tokenizer, the metrics, the limits."""

    def __init__(self, model: Any, engine: Any, name: str, api_key: Optional[str] = None,
                 chat_template: Optional[ChatTemplate] = None, max_body_bytes: int = 1 << 20,
                 detailed: bool = False, chat_template_hint: str = "",
                 defaults: Optional[Dict[str, Any]] = None) -> None:
        self.model, self.engine, self.name, self.api_key = model, engine, name, api_key
        self.tokenizer = model.tokenizer
        self.chat_template, self.chat_template_hint = chat_template, chat_template_hint
        self.max_body_bytes = max_body_bytes
        self.metrics = Metrics(name)
        self.reader = RequestReader(model.config["vocab_size"], self.tokenizer, engine.capacity, detailed, defaults)
        self.ending = set(model.eos_token_ids)
        self.created = int(time.time())


async def read_json(request: Request, server: Server) -> Dict[str, Any]:
    length = request.headers.get("content-length")
    limit = server.max_body_bytes
    body = b""
    received = 0
    async for chunk in request.stream():
        # Past the limit the rest is read and dropped (up to 64 times the limit), so that the client
        # can finish sending and read the 413 rather than a broken connection.
        received += len(chunk)
        if received <= limit:
            body += chunk
        elif received > 64 * limit:
            break
    if received > limit or (length is not None and length.isdigit() and int(length) > limit):
        raise ApiError(413, f"the body has {max(received, int(length or 0))} bytes or more; the limit is {limit}")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object")
    return value


def check_model(body: Dict[str, Any], server: Server) -> None:
    model = body.get("model")
    if model is not None and model != server.name:
        raise ApiError(404, f"the model {model!r} does not exist; this server serves {server.name!r}", "model",
                       "model_not_found")


class Run:
    """One HTTP request's choices on the engine: submitted, fed by the engine's callbacks through an
    asyncio queue, and cancelled if the client leaves first."""

    def __init__(self, server: Server, parsed: Parsed) -> None:
        self.server, self.parsed = server, parsed
        self.loop = asyncio.get_running_loop()
        self.queue: "asyncio.Queue[tuple]" = asyncio.Queue()
        self.choices = [Choice(i, p, server.tokenizer, parsed.stop, server.ending if parsed.options["stop_at_eos"]
                               else set()) for i, p in enumerate(parsed.prompts)]
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.checked = time.monotonic()  # when the client's connection was last checked

    def _callback(self, index: int):
        metrics = self.server.metrics

        def deliver(event: tuple) -> None:  # the engine's thread, with the GIL
            try:
                if event[2] and event[4] is not None:
                    metrics.record(event[4].stats, "error" if event[3] else event[4].stop_reason)
            finally:
                try:
                    self.loop.call_soon_threadsafe(self.queue.put_nowait, (index, event))
                except RuntimeError:  # the event loop has closed
                    pass
        return deliver

    def submit(self) -> None:
        options = self.parsed.options
        for c in self.choices:
            if options["max_new_tokens"] == 0:  # nothing to generate (an echo of the prompt's logprobs)
                c.done, c.finish_reason = True, "length"
                continue
            try:
                c.handle = self.server.engine.submit(c.prompt, self._callback(c.index), **options)
            except Exception as e:
                self.cancel()
                raise from_library_error(e) from None

    def cancel(self) -> None:
        for c in self.choices:
            if c.handle is not None and not c.done:
                self.server.engine.cancel(c.handle)

    async def next_event(self, request: Request) -> Optional[Choice]:
        """The choice the next event changed, or None if the client has gone (its requests cancelled).
        The connection is checked at least every half second, whether or not events flow."""
        while True:
            if time.monotonic() - self.checked > 0.5:
                self.checked = time.monotonic()
                if await request.is_disconnected():
                    self.cancel()
                    return None
            try:
                index, (tokens, logprobs, done, error, result) = await asyncio.wait_for(self.queue.get(), 0.5)
                break
            except asyncio.TimeoutError:
                continue
        c = self.choices[index]
        if c.feed(list(tokens), list(logprobs)) and c.handle is not None:
            self.server.engine.cancel(c.handle)  # a stop string ended it: free the seat now
        if done:
            c.end(error, result)
        return c

    def pending(self) -> bool:
        return any(not c.done for c in self.choices)

    def error(self) -> Optional[ApiError]:
        for c in self.choices:
            if c.error is not None:
                code, message = c.error
                status = 400 if code in ("INVALID_ARGUMENT", "OUT_OF_RANGE") else 500
                return ApiError(status, message, None, "invalid_request_error" if status == 400 else "internal_error")
        return None

    def usage(self) -> Dict[str, int]:
        prompt = sum(len(c.prompt) for c in self.choices)
        completion = sum(len(c.tokens) for c in self.choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def extras(self) -> Dict[str, Any]:
        stats = [c.result.stats for c in self.choices if c.result is not None]
        k = self.parsed.options.get("k", 3)
        if self.parsed.options.get("draft") == "none":
            k = 0
        k = k if isinstance(k, int) else max([0] + [d for s in stats for d in s.step_drafted])
        return {"metrics": {"speculative_decoding": spec_decode_metrics(stats, k, self.parsed.detailed)},
                "timings": timings(stats)}


async def echo_logprobs(server: Server, parsed: Parsed) -> List[Optional[tuple]]:
    """With echo and logprobs: each prompt's token logprobs and top logprobs, from its logits."""
    if not (parsed.echo and parsed.logprobs is not None):
        return [None] * len(parsed.prompts)
    out = []
    for prompt in parsed.prompts:
        logits = await asyncio.get_running_loop().run_in_executor(None, server.model.logits, prompt)
        out.append(prompt_logprobs(logits, prompt, server.tokenizer, parsed.logprobs))
    return out


def completion_choice(server: Server, parsed: Parsed, c: Choice, echoed: Optional[tuple]) -> Dict[str, Any]:
    text = c.text()
    logprobs = None
    if parsed.logprobs is not None:
        logprobs = completion_logprobs(server.tokenizer, c.tokens, list(c.logprobs[:len(c.tokens)]))
    if parsed.echo:
        prompt_text = server.tokenizer.decode(c.prompt) if server.tokenizer is not None else ""
        text = prompt_text + text
        if logprobs is not None and echoed is not None:
            head = completion_logprobs(server.tokenizer, c.prompt, echoed[0], echoed[1])
            logprobs = {key: head[key] + logprobs[key] for key in ("tokens", "token_logprobs", "top_logprobs")}
            logprobs["text_offset"] = completion_logprobs(server.tokenizer, c.prompt + c.tokens, [])["text_offset"]
    return {"index": c.index, "text": text, "token_ids": c.tokens, "logprobs": logprobs,
            "finish_reason": c.finish_reason, "stop_reason": None}


def sse(payload: Any) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def finite(value: Optional[float]) -> Optional[float]:
    """A log-probability JSON can carry: -inf becomes -9999.0, as vLLM writes it."""
    if value is None:
        return None
    return value if value == value and abs(value) != float("inf") else -9999.0


async def respond(server: Server, request: Request, parsed: Parsed, chat: bool) -> Response:
    run = Run(server, parsed)
    echoed = await echo_logprobs(server, parsed)
    run.submit()
    if parsed.stream:
        return StreamingResponse(stream_events(run, request, chat), media_type="text/event-stream")
    while run.pending():
        if await run.next_event(request) is None:
            return Response(status_code=499)
    if (error := run.error()) is not None:
        raise error
    body: Dict[str, Any] = {"id": run.id, "created": run.created, "model": server.name, "usage": run.usage()}
    if chat:
        body["object"] = "chat.completion"
        body["choices"] = [{"index": c.index, "message": {"role": "assistant", "content": c.text()},
                            "token_ids": c.tokens, "logprobs": chat_logprobs(server, c, parsed),
                            "finish_reason": c.finish_reason} for c in run.choices]
    else:
        body["object"] = "text_completion"
        body["choices"] = [completion_choice(server, parsed, c, e) for c, e in zip(run.choices, echoed)]
    body.update(run.extras())
    return JSONResponse(body)


def chat_logprobs(server: Server, c: Choice, parsed: Parsed) -> Optional[Dict[str, Any]]:
    if not parsed.options.get("logprobs"):
        return None
    return chat_logprobs_of(server, c.tokens, c.logprobs)


def chat_logprobs_of(server: Server, ids: List[int], logprobs: List[float]) -> Dict[str, Any]:
    """Chat's logprobs object: each token with its own log-probability (no alternatives)."""
    strings = token_strings(server.tokenizer, ids)
    return {"content": [{"token": s, "logprob": finite(lp), "bytes": list(s.encode()), "top_logprobs": []}
                        for s, lp in zip(strings, logprobs)]}


async def stream_events(run: Run, request: Request, chat: bool) -> AsyncIterator[str]:
    """One chunk per verify step as it commits; the last chunk (the usage chunk when asked for)
    carries the request's acceptance metrics and timings."""
    server, parsed = run.server, run.parsed
    kind = "chat.completion.chunk" if chat else "text_completion"
    head = {"id": run.id, "object": kind, "created": run.created, "model": server.name}
    started = set()
    try:
        while run.pending():
            c = await run.next_event(request)
            if c is None:
                return
            piece = c.piece()
            first = c.streamed
            new_ids = c.tokens[first:]
            c.streamed = len(c.tokens)
            if not piece and not new_ids and not c.done and c.index in started:
                continue
            logprobs = None
            if parsed.options.get("logprobs") and new_ids:
                new_logprobs = c.logprobs[first:first + len(new_ids)]
                logprobs = (chat_logprobs_of(server, new_ids, new_logprobs) if chat
                            else completion_logprobs(server.tokenizer, new_ids, new_logprobs))
            if chat:
                delta: Dict[str, Any] = {"content": piece}
                if c.index not in started:
                    delta["role"] = "assistant"
                choice = {"index": c.index, "delta": delta, "token_ids": new_ids, "logprobs": logprobs,
                          "finish_reason": c.finish_reason}
            else:
                choice = {"index": c.index, "text": piece, "token_ids": new_ids, "logprobs": logprobs,
                          "finish_reason": c.finish_reason}
            started.add(c.index)
            chunk = {**head, "choices": [choice]}
            if not run.pending() and not parsed.include_usage and run.error() is None:
                chunk.update(run.extras())  # the last chunk
            yield sse(chunk)
        if (error := run.error()) is not None:
            yield sse(error.body())
        elif parsed.include_usage:
            yield sse({**head, "choices": [], "usage": run.usage(), **run.extras()})
        yield "data: [DONE]\n\n"
    finally:
        run.cancel()


def create_app(server: Server) -> FastAPI:
    app = FastAPI(title="mtpspec", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        error = ApiError(500, f"internal error: {type(e).__name__}: {e}", None, "internal_error")
        return JSONResponse(error.body(), status_code=500)

    @app.middleware("http")
    async def authorise(request: Request, call_next: Any) -> Response:
        protected = request.url.path.startswith("/v1") or request.url.path in ("/tokenize", "/detokenize",
                                                                                "/tokenizer_info")
        if server.api_key is not None and protected:
            if request.headers.get("authorization") != f"Bearer {server.api_key}":
                e = ApiError(401, "a wrong or missing API key (Authorization: Bearer KEY)", None,
                             "authentication_error")
                return JSONResponse(e.body(), status_code=401)
        return await call_next(request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await read_json(request, server)
        check_model(body, server)
        return await respond(server, request, server.reader.completion(body), chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await read_json(request, server)
        check_model(body, server)
        return await respond(server, request, read_chat(server, body), chat=True)

    @app.get("/v1/models")
    async def models() -> Dict[str, Any]:
        return {"object": "list", "data": [{"id": server.name, "object": "model", "created": server.created,
                                            "owned_by": "mtpspec", "max_model_len": server.engine.capacity}]}

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(server.metrics.text(server.engine.running, server.engine.waiting),
                                 media_type="text/plain; version=0.0.4")

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Dict[str, Any]:
        body = await read_json(request, server)
        tokens = server.reader.prompt_ids(body.get("prompt", ""), "prompt") if "prompt" in body else None
        if tokens is None:
            raise ApiError(400, "prompt is required", "prompt")
        return {"tokens": tokens, "count": len(tokens), "max_model_len": server.engine.capacity}

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Dict[str, Any]:
        body = await read_json(request, server)
        tokens = server.reader.prompt_ids(body.get("tokens"), "tokens")
        if server.tokenizer is None:
            raise ApiError(400, "the model has no tokenizer.json", "tokens")
        return {"prompt": server.tokenizer.decode(tokens)}

    @app.get("/tokenizer_info")
    async def tokenizer_info() -> Dict[str, Any]:
        if server.tokenizer is None:
            raise ApiError(404, "the model has no tokenizer.json")
        return {"tokenizer_class": "PreTrainedTokenizerFast", "vocab_size": server.tokenizer.vocab_size,
                "model_max_length": server.engine.capacity, "eos_token_ids": sorted(server.ending),
                "special_tokens": server.tokenizer.special_tokens,
                "chat_template": None if server.chat_template is None else server.chat_template.origin}

    return app


def read_chat(server: Server, body: Dict[str, Any]) -> Parsed:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "messages must be a non-empty list of objects", "messages")
    if server.chat_template is None:
        raise ApiError(400, f"the model has no chat template (chat_template.jinja, or chat_template in "
                            f"tokenizer_config.json); {server.chat_template_hint}", "messages")
    kwargs = dict(body.get("chat_template_kwargs") or {})
    if not isinstance(body.get("chat_template_kwargs") or {}, dict) or "messages" in kwargs:
        raise ApiError(400, "chat_template_kwargs must be an object of template variables (not messages)",
                       "chat_template_kwargs")
    generation_prompt = kwargs.pop("add_generation_prompt", True)
    try:
        text = server.chat_template.render(messages, add_generation_prompt=bool(generation_prompt), **kwargs)
    except ChatTemplateError as e:
        raise ApiError(400, str(e), "messages") from None
    prompt = server.reader.prompt_ids(text, "messages")
    parsed = Parsed(prompts=[prompt], options=dict(server.reader.defaults))
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise ApiError(400, f"logprobs must be true or false, got {logprobs!r}", "logprobs")
    parsed.options["logprobs"] = logprobs
    parsed.options["max_new_tokens"] = server.reader.budget(body, ["max_completion_tokens", "max_tokens"], [prompt],
                                                            None)
    server.reader.common(body, parsed, {"messages", "chat_template_kwargs", "logprobs", "top_logprobs",
                                        "max_completion_tokens", "max_tokens"})
    return parsed
