#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target (test/fuzz/corpus/safetensors): valid files of every dtype
kiln reads and hostile ones (bad lengths, offsets, JSON, UTF-8, dtypes). Python's standard library only: the files
are written byte by byte from the format's description.

usage: make-safetensors-corpus.py <repository root>
"""
import json
import os
import struct
import sys

FORMATS = {"BOOL": ("?", [True, False, True]), "I32": ("<i", [1, -2, 2**31 - 1]), "I64": ("<q", [1, -2, -2**63]),
           "F32": ("<f", [1.5, -0.0, float("inf")]), "F64": ("<d", [1.5, float("nan"), 5e-324])}


def pack(fmt, values):
    return b"".join(struct.pack(fmt, v) for v in values)


def file_bytes(header, data, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main(root):
    out = os.path.join(root, "test", "fuzz", "corpus", "safetensors")
    os.makedirs(out, exist_ok=True)
    files = {}
    # One tensor of each dtype, and all of them in one file.
    header, data = {}, b""
    for name, (fmt, vals) in FORMATS.items():
        blob = pack(fmt, vals)
        files["one_%s.safetensors" % name] = file_bytes({name: {"dtype": name, "shape": [3], "data_offsets": [0, len(blob)]}}, blob)
        header[name.lower()] = {"dtype": name, "shape": [3, 1], "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    # The dtypes kiln reads widened (core/stored_dtype.hpp), one tensor each.
    widened = {"I8": ("<b", [-128, 0, 127]), "I16": ("<h", [-32768, 1, 32767]), "U8": ("<B", [0, 200, 255]),
               "U16": ("<H", [0, 1, 65535]), "U32": ("<I", [0, 1, 2**32 - 1]), "U64": ("<Q", [0, 2**63 - 1, 2**63]),
               "F16": ("<H", [0x3c00, 0x0001, 0x7e00]), "BF16": ("<H", [0x3f80, 0x7f80, 0x8000])}
    for name, (fmt, vals) in widened.items():
        blob = pack(fmt, vals)
        files["one_%s.safetensors" % name] = file_bytes({name: {"dtype": name, "shape": [3], "data_offsets": [0, len(blob)]}}, blob)
    header["__metadata__"] = {"format": "pt", "note": "caf\u00e9"}
    files["all_dtypes.safetensors"] = file_bytes(header, data)
    files["empty_and_scalar.safetensors"] = file_bytes(
        {"e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [0, 0]}, "s": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]}},
        pack("<d", [2.5]))
    files["no_tensors.safetensors"] = file_bytes({}, b"")
    files["unpadded.safetensors"] = file_bytes({"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}, pack("<i", [7]), pad=False)
    # Hostile inputs.
    f32 = pack("<f", [1.0, 2.0])
    files["bad_length_huge.safetensors"] = struct.pack("<Q", 2**64 - 1) + b"{}"
    files["bad_length_past_end.safetensors"] = struct.pack("<Q", 64) + b"{}"
    files["bad_truncated.safetensors"] = b"\x02\x00\x00"
    files["bad_offsets_past_end.safetensors"] = file_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}, f32)
    files["bad_offsets_overlap.safetensors"] = file_bytes(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32)
    files["bad_shape_overflow.safetensors"] = file_bytes(
        {"a": {"dtype": "F32", "shape": [2**32, 2**32, 16], "data_offsets": [0, 8]}}, f32)
    files["bad_shape_huge_zero.safetensors"] = file_bytes(
        {"a": {"dtype": "F32", "shape": [2**62, 0, 2**62], "data_offsets": [0, 0]}}, b"")
    files["bad_dtype.safetensors"] = file_bytes({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}, f32)
    files["bad_duplicate.safetensors"] = file_bytes(
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32)
    files["bad_utf8.safetensors"] = file_bytes(b'{"\xc3\x28":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', f32)
    files["bad_deep.safetensors"] = file_bytes(b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}", b"")
    files["bad_bool.safetensors"] = file_bytes({"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x07")
    files["bad_rank.safetensors"] = file_bytes({"a": {"dtype": "F32", "shape": [1] * 12, "data_offsets": [0, 4]}}, f32[:4])
    files["bad_negative.safetensors"] = file_bytes({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32[:4])
    files["bad_escape.safetensors"] = file_bytes(b'{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32[:4])
    for name, blob in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
    print("make-safetensors-corpus: %d files in %s" % (len(files), out))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
