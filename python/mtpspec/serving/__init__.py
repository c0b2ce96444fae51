"""mtpspec's OpenAI-compatible server: `mtpspec-serve MODEL_DIR` (or `python -m mtpspec.serving`).

It serves one loaded checkpoint through the live batch engine: requests join free seats as they
arrive, each verify step streams its tokens, and every request's tokens equal the same request run
alone. It listens on 127.0.0.1 unless --host says otherwise. The request options of
`mtpspec generate` (pipeline/options.h) are its flags, which set every request's defaults, and its
JSON fields, which set one request's."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from .. import _ext
from .app import Server, create_app
from .._chat import load_chat_template

# The options a server's seats share: set for the whole server, and a request may only repeat them.
SLOT_OPTIONS = ("draft", "mtp_hidden", "mtp_chain", "mtp_index_share", "ngram", "kv_cache", "device",
                "device_weights")


def option_value(option: Dict[str, str], text: str) -> Any:
    """A flag's text as a value of the option's type (the table's, pipeline/options.h)."""
    kind = option["type"]
    if kind == "bool":
        if text not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{option['flag']} must be true or false, got {text!r}")
        return text == "true"
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "int | str":
            return int(text) if text.lstrip("-").isdigit() else text
        if kind == "list[int]":
            return [int(x) for x in text.split(",") if x]
        if kind == "list[float]":
            return [float(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{option['flag']} must be of type {kind}, got {text!r}") from None
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mtpspec-serve", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--batch", type=int, default=8, help="seats: requests that run at once (default 8)")
    p.add_argument("--max-waiting", type=int, default=64,
                   help="requests that may wait for a seat; past that a request gets 503 (default 64)")
    p.add_argument("--capacity", type=int, default=None,
                   help="cache positions per seat: prompt plus new tokens (default min(max_position_embeddings, 4096))")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY on /v1 and the tokenizer")
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the folder's)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--weights", default=None, help="stored, f32, bf16 or fp8 (as mtpspec generate --weights)")
    p.add_argument("--activations", default="f32")
    p.add_argument("--index-keys", default="f32")
    p.add_argument("--chat-template", type=Path, default=None, help="a Jinja chat template in place of the model's")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20)
    p.add_argument("--spec-decode-metrics", choices=("summary", "detailed"), default="summary",
                   help="per-request acceptance: vLLM's summary, or with per-step lists")
    p.add_argument("--drain-seconds", type=float, default=30.0,
                   help="on SIGTERM, how long running requests may take to finish")
    p.add_argument("--log-level", default="warning")
    group = p.add_argument_group("request options (each request's defaults; a request may set its own)")
    for option in _ext.request_options():
        if option["name"] in ("max_new_tokens", "stop_at_eos", "logprobs"):
            continue  # OpenAI's max_tokens, ignore_eos and logprobs set them per request
        group.add_argument(option["flag"], dest=option["name"], default=None,
                           type=lambda text, o=option: option_value(o, text),
                           help=f"{option['help']} (default {option['default']})")
    return p


def build(args: argparse.Namespace):
    """The loaded model, its engine and the app, from the parsed flags."""
    from .._model import Model

    model = Model.load(args.model_dir, threads=args.threads, dtype=args.weights, index_keys=args.index_keys,
                       activations=args.activations)
    defaults = {o["name"]: getattr(args, o["name"]) for o in _ext.request_options()
                if getattr(args, o["name"], None) is not None}
    slots = {name: defaults[name] for name in SLOT_OPTIONS if name in defaults}
    capacity = args.capacity or min(model.config["max_position_embeddings"], 4096)
    engine = _ext.Engine(model._m, batch=args.batch, max_waiting=args.max_waiting, capacity=capacity, **slots)
    template = load_chat_template(args.model_dir, args.chat_template)
    server = Server(model, engine, args.served_model_name or args.model_dir.resolve().name, args.api_key, template,
                    args.max_body_bytes, args.spec_decode_metrics == "detailed",
                    "give one with --chat-template FILE", defaults)
    return model, engine, create_app(server)


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        import jinja2  # noqa: F401  (chat templates)
        import uvicorn
    except ImportError as e:
        print(f"mtpspec-serve: {e.name} is missing: pip install 'mtpspec[serve]' (fastapi, uvicorn, jinja2)",
              file=sys.stderr)
        return 2
    try:
        model, engine, app = build(args)
    except (ValueError, TypeError, OSError, _ext.Error) as e:
        print(f"mtpspec-serve: {e}", file=sys.stderr)
        return 2
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=int(max(args.drain_seconds, 1)))
    # uvicorn handles SIGTERM itself (it stops listening and lets running requests finish), then
    # raises the signal again for the handler it found: this one, so that the engine drains below
    # and the process exits with status 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        uvicorn.Server(config).run()
    finally:
        engine.drain(0.0)
        engine.close()
    return 0
