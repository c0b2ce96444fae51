"""Which transformers the fixtures were made with: the version gate and the record in golden.json."""

from __future__ import annotations

import sys

import numpy as np
import torch

import transformers


MIN_TRANSFORMERS = (5, 23)
NOTE_READ_FROM = "5.23.0"  # the README conventions note quotes this version's source lines


def parse_version(text: str) -> tuple[int, ...]:
    numbers = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def check_versions() -> None:
    found = parse_version(transformers.__version__)
    if found[:2] < MIN_TRANSFORMERS:
        sys.exit(
            f"make_golden.py: transformers {transformers.__version__} is too old; need >= "
            f"{'.'.join(map(str, MIN_TRANSFORMERS))} (indexer RoPE / IndexShare fixes)."
        )
    if transformers.__version__ != NOTE_READ_FROM:
        print(
            f"WARNING: transformers {transformers.__version__} != {NOTE_READ_FROM}; the README conventions "
            "note may be stale. The asserts below still guard the indexer RoPE style.",
            file=sys.stderr,
        )


def environment_record(probes: dict) -> dict:
    return {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "python_version": sys.version.split()[0],
        "indexer_rope_probe": probes,
    }
