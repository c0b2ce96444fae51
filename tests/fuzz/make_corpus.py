#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/. Standard library only; rerun after changing.

Seeds are small valid files (so the fuzzer starts from deep inside the parser) plus a few broken
ones that stop at each validation step.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def safetensors_bytes(tensors, metadata=None, data=None, pad=True):
    """tensors: {name: (dtype, shape, (begin, end))}; data defaults to a byte ramp."""
    header = {name: {"dtype": d, "shape": s, "data_offsets": list(o)} for name, (d, s, o) in tensors.items()}
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    if data is None:
        end = max([o[1] for _, _, o in tensors.values()] + [0])
        data = bytes(i * 37 % 256 for i in range(end))
    return struct.pack("<Q", len(text)) + text + data


def npy_bytes(descr, shape, data_bytes, fortran=False, major=1):
    shape_text = "(%s,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    prefix_len = 10 if major == 1 else 12
    header += " " * (-(prefix_len + len(header) + 1) % 64) + "\n"
    length = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header.encode() + bytes(data_bytes)


def small_tokenizer():
    """A byte-level BPE tokenizer.json with the structure of the releases' (split regex, added
    special tokens, merges), over a vocabulary of the 256 byte characters plus a few merges."""
    kept = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    chars, extra = [], 0
    for b in range(256):
        if b in kept:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    vocab = {c: i + 2 for i, c in enumerate(chars)}
    merges = [["\u0120", "t"], ["h", "e"], ["\u0120t", "he"]]
    for a, b in merges:
        vocab[a + b] = len(vocab) + 2
    split = {"type": "Split", "pattern": {"Regex": "(?i:'s|'t)|\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
             "behavior": "Isolated", "invert": False}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in enumerate(["<|endoftext|>", "<|pad|>"])]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def write(corpus, name, payload):
    directory = os.path.join(HERE, "corpus", corpus)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(payload)


def main():
    st = "safetensors"
    write(st, "valid_mixed.safetensors", safetensors_bytes({
        "w.f32": ("F32", [2, 3], (0, 24)),
        "w.bf16": ("BF16", [4], (24, 32)),
        "w.f16": ("F16", [1, 2], (32, 36)),
        "w.f8": ("F8_E4M3", [2, 2], (36, 40)),
        "scalar.i64": ("I64", [], (40, 48)),
        "flags": ("BOOL", [3], (48, 51)),
        "empty": ("U8", [0, 5], (51, 51)),
    }, metadata={"format": "pt"}))
    write(st, "valid_all_dtypes.safetensors", safetensors_bytes({
        "a": ("F64", [1], (0, 8)), "b": ("I64", [1], (8, 16)), "c": ("I32", [1], (16, 20)),
        "d": ("F32", [1], (20, 24)), "e": ("F16", [1], (24, 26)), "f": ("BF16", [1], (26, 28)),
        "g": ("I8", [1], (28, 29)), "h": ("U8", [1], (29, 30)), "i": ("BOOL", [1], (30, 31)),
        "j": ("F8_E4M3", [1], (31, 32)),
    }))
    write(st, "valid_misaligned.safetensors", safetensors_bytes({
        "byte": ("U8", [1], (0, 1)), "f": ("F32", [2], (1, 9)), "d": ("F64", [1], (9, 17)),
    }, pad=False))
    write(st, "valid_empty.safetensors", safetensors_bytes({}, metadata={}))
    write(st, "valid_4d.safetensors", safetensors_bytes({"x": ("BF16", [1, 2, 2, 2], (0, 16))}))
    write(st, "bad_overlap.safetensors", safetensors_bytes({
        "a": ("F32", [2], (0, 8)), "b": ("F32", [2], (4, 12))}))
    write(st, "bad_gap.safetensors", safetensors_bytes({
        "a": ("F32", [1], (0, 4)), "b": ("F32", [1], (8, 12))}))
    write(st, "bad_size.safetensors", safetensors_bytes({"a": ("F32", [3], (0, 8))}))
    write(st, "bad_dtype.safetensors", safetensors_bytes({"a": ("F4", [2], (0, 1))}))
    write(st, "bad_shape.safetensors", safetensors_bytes(
        {"a": ("U8", [4294967296, 4294967296], (0, 0))}))
    write(st, "bad_header_length.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    write(st, "bad_json.safetensors", struct.pack("<Q", 10) + b'{"a": [1, ')
    write(st, "truncated.safetensors", b"\x08\x00\x00")

    write("npy", "f32_2x3.npy", npy_bytes("<f4", [2, 3], 24))
    write("npy", "i64_scalar.npy", npy_bytes("<i8", [], 8))
    write("npy", "i32_empty.npy", npy_bytes("<i4", [0, 4], 0))
    write("npy", "f32_v2.npy", npy_bytes("<f4", [4], 16, major=2))
    write("npy", "bad_fortran.npy", npy_bytes("<f4", [2, 2], 16, fortran=True))
    write("npy", "bad_truncated.npy", npy_bytes("<i8", [3], 16))

    ix = "index"
    write(ix, "valid.json", json.dumps({"metadata": {"total_size": 64}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}).encode())
    write(ix, "valid_subdir.json", b'{"weight_map": {"a": "shards/x.safetensors"}}')
    write(ix, "bad_parent.json", b'{"weight_map": {"a": "../x.safetensors"}}')
    write(ix, "bad_absolute.json", b'{"weight_map": {"a": "/x.safetensors"}}')
    write(ix, "bad_value.json", b'{"weight_map": {"a": 3}}')
    write(ix, "bad_missing.json", b'{"metadata": {}}')

    write("tokenizer", "byte_level_small.json", json.dumps(small_tokenizer()).encode())
    roundtrip = "tokenizer_roundtrip"
    write(roundtrip, "ascii.txt", b"It is a truth universally acknowledged, that a single man\n")
    write(roundtrip, "unicode.txt", "caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001f600 '\u0301s".encode())
    write(roundtrip, "special.txt", b"<|endoftext|>def f(x):\r\n\treturn x  <|pad|>  123456")
    write(roundtrip, "bad_utf8.txt", b"abc\xff\xc3")

    ps = "prompt_set"
    write(ps, "mt_bench.jsonl", b'{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]}\n')
    write(ps, "mixed.jsonl", b'{"category": "coding", "messages": [{"role": "user", "content": "def f"}]}\n\n'
          b'{"task_id": "HumanEval/0", "prompt": "def add(a, b):"}\n{"prompt": "x", "id": [1]}\n')
    write(ps, "bad_turn.jsonl", b'{"category": "x", "turns": ["ok", " "]}\n')


if __name__ == "__main__":
    main()
