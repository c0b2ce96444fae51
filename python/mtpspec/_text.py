"""Tokenizer, and the text bookkeeping of streams and stop strings, around mtpspec._ext."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Union, cast

import numpy as np

from mtpspec import _ext
from mtpspec._results import GenerateResult

if TYPE_CHECKING:
    from mtpspec._model import Model

PathLike = Union[str, "os.PathLike[str]"]
TokenIds = Union[Sequence[int], np.ndarray]


def _ids(ids: TokenIds) -> List[int]:
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"token ids must be a 1-D sequence, got an array of shape {ids.shape}")
        return cast(List[int], ids.tolist())  # float arrays stay floats and are rejected
    if isinstance(ids, (str, bytes)):
        raise TypeError("token ids must be a sequence of ints (pass text to generate/stream, or use model.tokenizer)")
    return list(ids)


def _is_batch(prompts: Any) -> bool:
    """A list (or tuple) of prompts: texts or id sequences. A flat list of ints is one prompt."""
    if isinstance(prompts, np.ndarray):
        return prompts.ndim == 2
    return (isinstance(prompts, (list, tuple)) and len(prompts) > 0
            and all(isinstance(p, (str, list, tuple, np.ndarray)) for p in prompts))


class _TextPieces:
    """The text a stream shows of one request as its tokens arrive. A result's text leaves out the
    id that ended it and anything from a stop string on, so the pieces hold those back (and a
    trailing partial UTF-8 sequence) until later tokens or the result say how it ended."""

    def __init__(self, model: "Model", options: Dict[str, Any]) -> None:
        assert model._tokenizer is not None
        self._tokenizer = model._tokenizer
        self._ending = set(options.get("stop_token_ids") or [])
        if options.get("stop_at_eos", True):
            eos = options.get("eos_token_id")
            self._ending |= set(model.eos_token_ids if eos is None else [eos] if isinstance(eos, int) else eos)
        stop = options.get("stop")
        self._stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
        self._hold_back = max((len(x) for x in self._stops if isinstance(x, str)), default=1) - 1
        self._tokens: List[int] = []
        self._emitted = ""

    def feed(self, tokens: List[int]) -> str:
        self._tokens.extend(tokens)
        ids = self._tokens[:-1] if self._tokens and self._tokens[-1] in self._ending else self._tokens
        decoded = self._tokenizer.decode(ids).rstrip("\ufffd")
        found = [i for i in (decoded.find(x) for x in self._stops if isinstance(x, str) and x) if i >= 0]
        if found:  # the text ends before the stop string
            decoded = decoded[:min(found)]
        else:
            decoded = decoded[:max(len(self._emitted), len(decoded) - self._hold_back)]
        piece = decoded[len(self._emitted):]
        self._emitted = max(self._emitted, decoded, key=len)
        return piece

    def finish(self, result: Optional[GenerateResult]) -> str:
        if result is None or result.text is None or len(result.text) <= len(self._emitted):
            return ""
        return result.text[len(self._emitted):]


class Tokenizer:
    """A ``tokenizer.json`` tokenizer (tokenizer/tokenizer.h)."""

    def __init__(self, handle: _ext.Tokenizer) -> None:
        self._t = handle

    @classmethod
    def load(cls, path: PathLike) -> "Tokenizer":
        return cls(_ext.Tokenizer.load(os.fspath(path)))

    @property
    def vocab_size(self) -> int:
        return int(self._t.vocab_size)

    def encode(self, text: str) -> List[int]:
        return list(self._t.encode(text))

    def decode(self, ids: TokenIds, skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; bytes that do not form valid UTF-8 (yet) come back as U+FFFD."""
        return self._t.decode(_ids(ids), skip_special_tokens)

    @property
    def special_tokens(self) -> Dict[str, int]:
        """The added tokens flagged special (BOS, EOS, chat markers): content -> id."""
        return dict(self._t.special_tokens)

    def token_to_id(self, token: str) -> Optional[int]:
        """The id of ``token`` (an added token or a vocabulary entry, as written in the file), or None."""
        return self._t.token_to_id(token)

    def id_to_token(self, id: int) -> Optional[str]:
        """The token string of ``id`` as written in the file, or None."""
        return self._t.id_to_token(id)


class _StopStrings:
    """An ``on_tokens`` wrapper that ends the request once the decoded text contains a stop string,
    then forwards the batch (cut after the completing token) to the caller's own ``on_tokens``. The
    search is the library's (pipeline/stop_strings.h), the one every front end uses."""

    def __init__(self, tokenizer: Tokenizer, stop: Union[str, Sequence[str]],
                 inner: Optional[Callable[[List[int]], Optional[bool]]], skip_special_tokens: bool = False) -> None:
        stops = [stop] if isinstance(stop, str) else list(stop)
        if not stops or any(not isinstance(x, str) or not x for x in stops):
            raise ValueError(f"stop must be a non-empty string or a sequence of them, got {stop!r}")
        self._watch = _ext.StopStrings(tokenizer._t, stops, skip_special_tokens)
        self._inner = inner

    @property
    def hit(self) -> Optional[str]:
        """The text before the first stop string, once found."""
        return self._watch.hit

    @property
    def hit_tokens(self) -> int:
        """The tokens up to the one that completed it."""
        return self._watch.hit_tokens

    def __call__(self, batch: List[int]) -> bool:
        if self._watch.hit is not None:
            return False
        before = self._watch.fed
        if self._watch.feed(list(batch)):
            return self._forward(batch)
        self._forward(batch[:self._watch.hit_tokens - before])
        return False

    def _forward(self, batch: List[int]) -> bool:
        if self._inner is None:
            return True
        keep_going = self._inner(batch)
        return keep_going is None or bool(keep_going)
