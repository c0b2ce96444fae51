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


def clean_window(text: str, width: int, start: int) -> str:
    """A piece of ``text`` of ``width`` characters from ``start`` on with no U+FFFD in it."""
    for i in range(start, len(text) - width):
        if "\ufffd" not in text[i:i + width]:
            return text[i:i + width]
    raise AssertionError(f"no clean window of {width} characters in {text!r}")


@pytest.mark.parametrize("k", [0, 3])
def test_stop_strings_end_the_text_before_them(text_model: mtpspec.Model, k: int) -> None:
    full = text_model.generate("Once upon a time", 60, k=k, stop_at_eos=False)
    stop = clean_window(full.text, 3, 15)
    cut = full.text.find(stop)
    r = text_model.generate("Once upon a time", 60, k=k, stop_at_eos=False, stop=[stop, "\x00never\x00"])
    assert r.stop_reason == "stop_string"
    assert r.text == full.text[:cut]
    # tokens end with the one that completed the stop string: one fewer does not contain it
    assert r.tokens == full.tokens[:len(r.tokens)]
    t = text_model.tokenizer
    assert stop in t.decode(r.tokens) and stop not in t.decode(r.tokens[:-1])
    pieces = list(text_model.stream("Once upon a time", 60, k=k, stop_at_eos=False, stop=stop))
    assert "".join(pieces) == r.text
    with pytest.raises(ValueError, match="stop must be"):
        text_model.generate("Once", 5, stop=[])
    with pytest.raises(ValueError, match="stop must be"):
        text_model.generate("Once", 5, stop=["ok", ""])


def test_the_ending_id_is_in_tokens_not_in_text(text_model: mtpspec.Model) -> None:
    full = text_model.generate("Once upon a time", 40, stop_at_eos=False)
    m = 12
    ending = full.tokens[m]
    m = full.tokens.index(ending)  # its first occurrence
    t = text_model.tokenizer
    for options in [dict(stop_token_ids=[ending]), dict(eos_token_id=ending), dict(eos_token_id=[ending, 255])]:
        r = text_model.generate("Once upon a time", 40, k=3, **options)
        assert r.tokens == full.tokens[:m + 1], options
        assert r.stop_reason == ("stop_token" if "stop_token_ids" in options else "eos")
        assert r.text == t.decode(full.tokens[:m])
        assert "".join(text_model.stream("Once upon a time", 40, k=3, **options)) == r.text
    # stop_at_eos=False turns the override off too; a stop id still stops
    assert text_model.generate("Once upon a time", 40, eos_token_id=ending, stop_at_eos=False).tokens == full.tokens
    r = text_model.generate("Once upon a time", 40, stop_token_ids=[ending], stop_at_eos=False)
    assert r.stop_reason == "stop_token"


def test_special_tokens_and_lookups(tmp_path: Path) -> None:
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None,
        "added_tokens": [
            {"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": 257, "content": "<tool>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False},
        ],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                            "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    t = mtpspec.Tokenizer.load(tmp_path / "tokenizer.json")
    assert t.special_tokens == {"<|endoftext|>": 256}
    assert t.token_to_id("<|endoftext|>") == 256 and t.token_to_id("<tool>") == 257
    assert t.token_to_id("A") == ord("A") and t.token_to_id("no such token") is None
    assert t.id_to_token(256) == "<|endoftext|>" and t.id_to_token(ord("A")) == "A"
    assert t.id_to_token(100000) is None
    with pytest.raises((TypeError, ValueError), match="id"):
        t.id_to_token(2**40)
    assert t.decode([72, 105, 256]) == "Hi<|endoftext|>"
    assert t.decode([72, 105, 256], skip_special_tokens=True) == "Hi"


def test_a_tokenizer_json_that_is_not_a_file_is_an_error(tmp_path: Path) -> None:
    for name in ["config.json", "model.safetensors"]:
        os.symlink(GLM_A / name, tmp_path / name)
    (tmp_path / "tokenizer.json").mkdir()
    with pytest.raises(mtpspec.Error, match="tokenizer.json: is a directory"):
        mtpspec.Model.load(tmp_path)
