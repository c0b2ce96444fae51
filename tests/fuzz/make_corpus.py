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


if __name__ == "__main__":
    main()
