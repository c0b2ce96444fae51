"""model.tokenizer, text prompts and text streaming, with a byte-level tokenizer.json of exactly 256
tokens (one per byte, no merges) placed beside glm_a, whose vocabulary is 256."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import mtpspec
from conftest import GLM_A


def byte_alphabet() -> list:
    """The byte-level BPE alphabet: byte b is shown as a printable character, the printable Latin-1
    bytes as themselves and the rest as code points from 256 up, in byte order."""
    kept = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1))
    kept |= set(range(ord("®"), ord("ÿ") + 1))
    extra = 0
    chars = []
    for b in range(256):
        if b in kept:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


@pytest.fixture(scope="module")
def text_model(tmp_path_factory: pytest.TempPathFactory) -> mtpspec.Model:
    d = tmp_path_factory.mktemp("glm_a_text")
    for name in ["config.json", "model.safetensors"]:
        os.symlink(GLM_A / name, d / name)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {c: i for i, c in enumerate(byte_alphabet())}, "merges": []},
    }
    (d / "tokenizer.json").write_text(json.dumps(tokenizer))
    return mtpspec.Model.load(d)


def test_tokenizer_round_trip(text_model: mtpspec.Model) -> None:
    t = text_model.tokenizer
    assert t is not None and t.vocab_size == 256
    text = "Hello, MTP — ünïcode!"
    ids = t.encode(text)
    assert ids == list(text.encode("utf-8"))
    assert t.decode(ids) == text
    assert t.decode(ids[:-2] + [0xC3]) == text[:-2] + "\ufffd"  # a cut UTF-8 sequence does not raise


def test_text_prompt_and_text_result(text_model: mtpspec.Model) -> None:
    from_text = text_model.generate("The quick brown fox", 24, stop_at_eos=False)
    from_ids = text_model.generate(list(b"The quick brown fox"), 24, stop_at_eos=False)
    assert from_text.tokens == from_ids.tokens
    assert from_text.text == text_model.tokenizer.decode(from_text.tokens)


def test_stream_yields_text_pieces(text_model: mtpspec.Model) -> None:
    result = text_model.generate("Once upon a time", 60, k=3, stop_at_eos=False)
    pieces = list(text_model.stream("Once upon a time", 60, k=3, stop_at_eos=False))
    assert all(isinstance(p, str) for p in pieces)
    assert "".join(pieces) == result.text
    ids = list(text_model.stream("Once upon a time", 60, k=3, stop_at_eos=False, text=False))
    assert ids == result.tokens


def test_no_tokenizer_means_none(model: mtpspec.Model) -> None:
    assert model.tokenizer is None
    with pytest.raises(ValueError, match="tokenizer"):
        model.stream([1, 2], 3, text=True)
