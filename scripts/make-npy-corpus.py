#!/usr/bin/env python3
"""Writes the seed corpus of the .npy fuzz target (test/fuzz/corpus/npy) and the hostile inputs that once crashed or
misled kiln's loader (test/fuzz/crashes/npy). Python's standard library only: the files are written byte by byte
from the format's description, so no NumPy is needed.

usage: make-npy-corpus.py <repository root>
"""
import itertools
import os
import struct
import sys

DTYPES = {"b1": ("?", [True, False, True, True, False, True]), "i4": ("i", [1, -2, 3, 2**31 - 1, -2**31, 0]),
          "i8": ("q", [1, -2, 3, 2**63 - 1, -2**63, 0]), "f4": ("f", [1.5, -0.0, float("inf"), float("nan"), 1e-45, 3.25]),
          "f8": ("d", [1.5, -0.0, float("inf"), float("nan"), 5e-324, 1e300])}


def header(descr, fortran, shape, version=1, extra=""):
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, %s}" % (descr, "True" if fortran else "False",
                                                                     shape_text, extra)
    return npy_bytes(d, version)


def npy_bytes(dict_text, version=1, pad=True):
    lensize = 2 if version == 1 else 4
    prefix = 8 + lensize
    body = dict_text.encode("latin-1")
    total = prefix + len(body) + 1
    if pad:
        body += b" " * ((64 - total % 64) % 64)
    body += b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(body))
    return b"\x93NUMPY" + bytes([version, 0]) + length + body


def data(code, order, values, count):
    vals = list(itertools.islice(itertools.cycle(values), count))
    return struct.pack(order + code * count, *vals)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    corpus = os.path.join(root, "test", "fuzz", "corpus", "npy")
    crashes = os.path.join(root, "test", "fuzz", "crashes", "npy")
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    n = 0
    for kind, (code, values) in DTYPES.items():
        for shape in [(), (0,), (3,), (2, 3), (2, 0, 3), (1, 2, 1, 3)]:
            count = 1
            for s in shape:
                count *= s
            for order in "<>":
                if kind == "b1" and order == ">":
                    continue
                descr = ("|" if kind == "b1" else order) + kind
                for fortran in (False, True):
                    if fortran and len(shape) < 2:
                        continue
                    version = 1 + n % 3
                    raw = header(descr, fortran, shape, version) + data(code, "<" if order == "<" else ">", values, count)
                    name = f"{kind}_{order.replace('<', 'le').replace('>', 'be')}_{'F' if fortran else 'C'}_" \
                           f"{'x'.join(map(str, shape)) or 'scalar'}_v{version}.npy"
                    with open(os.path.join(corpus, name), "wb") as f:
                        f.write(raw)
                    n += 1
    # dtypes that kiln widens on load (int8/int16/uint8/uint16 to int32, uint32/uint64 to int64, float16 to float32)
    widened = {
        "widen_u1_le_C_2x3_v1.npy": header("|u1", False, (2, 3)) + bytes([0, 1, 2, 200, 254, 255]),
        "widen_i1_le_F_2x2_v1.npy": header("|i1", True, (2, 2)) + bytes([0x80, 0xff, 0x00, 0x7f]),
        "widen_i2_be_C_3_v1.npy": header(">i2", False, (3,)) + struct.pack(">3h", -32768, 5, 32767),
        "widen_u4_le_C_2_v1.npy": header("<u4", False, (2,)) + struct.pack("<2I", 0, 4294967295),
        "widen_u8_le_C_2_v1.npy": header("<u8", False, (2,)) + struct.pack("<2Q", 1, 2**63),
        "widen_f2_be_C_4_v1.npy": header(">f2", False, (4,)) + struct.pack(">4H", 0x3c00, 0x0001, 0x7c00, 0x7e00),
    }
    for name, raw in widened.items():
        with open(os.path.join(corpus, name), "wb") as f:
            f.write(raw)
        n += 1
    hostile = {
        # sizes that overflow or exceed the data present
        "shape_2p62_f4.npy": header("<f4", False, (2**62,)) + b"\0" * 8,
        "shape_2p32x2p32_b1.npy": header("|b1", False, (2**32, 2**32)) + b"\0" * 8,
        "shape_2p40_f8.npy": header("<f8", False, (2**40,)) + b"\0" * 8,
        "shape_huge_f4_78_bytes.npy": npy_bytes("{'descr':'<f4','fortran_order':False,'shape':(4611686018427387903,)}",
                                                pad=False),
        "shape_2p62_be_f4.npy": header(">f4", False, (2**62,)) + b"\0" * 8,
        "shape_overflow_digits.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, "
                                               "'shape': (99999999999999999999999,), }") + b"\0" * 4,
        # header syntax
        "shape_unbracketed_12.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape':12, }") + b"\0" * 48,
        "shape_unbracketed_3.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape':3, }") + b"\0" * 12,
        "shape_int_in_parens.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }") + b"\0" * 12,
        "shape_no_commas.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1  3 1), }") + b"\0" * 12,
        "shape_double_comma.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,), }") + b"\0" * 8,
        "shape_negative.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }") + b"\0" * 8,
        "shape_rank_9.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }") +
                            b"\0" * 4,
        "fortran_string.npy": npy_bytes("{'descr': '<f4', 'fortran_order': 'True', 'shape': (2, 2), }") + b"\0" * 16,
        "trailing_bytes.npy": header("<f4", False, (2,)) + b"\0" * 12,
        "missing_shape.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, }") + b"\0" * 4,
        "duplicate_key.npy": npy_bytes("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }") +
                             b"\0" * 4,
        "unknown_key.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1, }") + b"\0" * 4,
        "unterminated.npy": npy_bytes("{'descr': '<f4") + b"\0" * 4,
        "header_after_dict.npy": npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk") + b"\0" * 4,
        "bad_bool.npy": header("|b1", False, (3,)) + b"\x00\x01\x07",
        "header_len_past_end.npy": b"\x93NUMPY\x01\x00\xff\xff{'descr'",
        "header_len_v2_huge.npy": b"\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr'",
        "version_9.npy": b"\x93NUMPY\x09\x00\x10\x00" + b" " * 16,
        "dtype_u2.npy": header("<u2", False, (2,)) + b"\0" * 4,
        "truncated_data.npy": header("<f8", False, (4,)) + b"\0" * 31,
    }
    for name, raw in hostile.items():
        with open(os.path.join(crashes, name), "wb") as f:
            f.write(raw)
    print(f"make-npy-corpus: {n} seed files, {len(hostile)} hostile inputs")


if __name__ == "__main__":
    main()
