"""mtpspec: GLM-5.x / DeepSeek-V3.2 checkpoints on the CPU and speculative decoding with their MTP head.

The C++ library does the work (``mtpspec._ext``); this package converts arguments and results:

* :class:`Model` — ``Model.load(path)``, ``.config``, ``.tokenizer``, ``.logits``, ``.mtp_draft``,
  ``.generate``, ``.stream``, ``.time_forward``.
* :class:`Stats`, :class:`GenerateResult`, :class:`MtpDraft` — result dataclasses;
  :class:`BatchResult` and :class:`BatchStats` for ``generate([prompt, ...])``.
* :class:`AdaptiveController` — adaptive k's estimates, carried across ``generate`` calls.
* :mod:`mtpspec.bench` — acceptance and verify-cost sweeps; :mod:`mtpspec.plot` — their figures.

Errors from C++ raise :class:`Error` subclasses: :class:`NotFoundError` (also a
``FileNotFoundError``), :class:`InvalidArgumentError` (also a ``ValueError``), or :class:`Error`
itself, whose ``code`` attribute names the status code.
"""

from mtpspec import _ext
from mtpspec._ext import AdaptiveController, Error, InvalidArgumentError, NotFoundError
from mtpspec._model import Model
from mtpspec._text import Tokenizer
from mtpspec._results import BatchError, BatchResult, BatchStats, GenerateResult, MtpDraft, Stats

__version__: str = _ext.__version__
MAX_DRAFT_TOKENS: int = _ext.MAX_DRAFT_TOKENS


def set_threads(threads: int) -> None:
    """Sets the C++ thread pool size. Must come before the first model call of the process (or
    repeat the count already in use); otherwise raises :class:`Error`."""
    _ext.set_threads(int(threads))


def thread_count() -> int:
    """Threads of the C++ pool (starting it with the default count if it is not running yet)."""
    return _ext.thread_count()


__all__ = [
    "AdaptiveController",
    "BatchError",
    "BatchResult",
    "BatchStats",
    "Error",
    "GenerateResult",
    "InvalidArgumentError",
    "MAX_DRAFT_TOKENS",
    "Model",
    "MtpDraft",
    "NotFoundError",
    "Stats",
    "Tokenizer",
    "set_threads",
    "thread_count",
]
