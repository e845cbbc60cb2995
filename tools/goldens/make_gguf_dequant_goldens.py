#!/usr/bin/env python3
"""Writes the GGUF goldens and fixtures kiln's GGUF reader is tested against.

Run from the repo root:  /opt/kiln-venv/bin/python tools/goldens/make_gguf_dequant_goldens.py

The reference is the `gguf` Python package (llama.cpp's gguf-py): gguf.quants implements ggml's
block formats in numpy (quantize for the types it can, dequantize for all kiln reads), and
gguf.GGUFWriter writes the files llama.cpp's converters write.

Outputs, in tests/data/gguf/:
  dequant_golden.json   for every ggml type kiln dequantizes, cases of raw block bytes and the
                        fp32 values gguf-py dequantizes them to (see its "format" field), plus
                        gguf-py's ggml type table (number, name, block size, type size).
                        Cases: "quantized" (2 rows x 256 values of a seeded normal
                        distribution with outliers, zeros and an all-zero block, quantized by
                        gguf-py: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and "random"
                        (2 rows x 256 values of random but valid block bytes: every fp16/bf16
                        field a random finite value, subnormals and negatives included, every
                        other byte uniform). gguf-py cannot quantize Q2_K..Q6_K, so those have
                        only "random" cases. Q8_1's size is ggml's 36, not gguf-py's stale 40
                        (gguf_dequant_test.cc says so).
  tiny.gguf             a GGUF v3 file with metadata of every value type, arrays, and tensors
                        of several types (the values are listed in
                        tests/compiler/import/gguf_file_test.cc).
  split/tiny-split-0000{1,2,3}-of-00003.gguf
                        the same kind of model written by GGUFWriter as a 3-part split
                        (split_max_tensors=1).
"""

import base64
import json
import os
import platform
import sys
from importlib.metadata import version

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

kRoot = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
kOut = os.path.join(kRoot, "tests", "data", "gguf")

kQuantizable = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
kRandomOnly = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
kRandomAlso = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]

# Byte offsets of the fp16 fields (d, m, dmin) in each block (ggml-common.h block_* structs).
kHalfFields = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def sampleValues(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[0, 5] = 9.5      # outliers, so blocks have one large and many small values
    x[1, 40] = -31.0
    x[0, 100:110] = 0  # zeros inside a block
    x[1, 224:256] = 0  # an all-zero block: a zero scale
    x[0, 300 % cols] = 1e-6
    return x


def randomFiniteHalves(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random fp16 bit patterns, all finite (exponent 31 is Inf/NaN: cleared to 30)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    infOrNan = (bits & 0x7C00) == 0x7C00
    bits[infOrNan] &= np.uint16(0xFBFF)
    return bits


def randomFiniteBf16(rng: np.random.Generator, n: int) -> np.ndarray:
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    infOrNan = (bits & 0x7F80) == 0x7F80
    bits[infOrNan] &= np.uint16(0xFF7F)
    return bits


def randomBlocks(rng: np.random.Generator, qtype: T, count: int) -> np.ndarray:
    blockSize, typeSize = gguf.GGML_QUANT_SIZES[qtype]
    if qtype == T.F16:
        return randomFiniteHalves(rng, count).view(np.uint8)
    if qtype == T.BF16:
        return randomFiniteBf16(rng, count).view(np.uint8)
    blocks = rng.integers(0, 256, size=(count // blockSize, typeSize), dtype=np.uint32)
    blocks = blocks.astype(np.uint8)
    for offset in kHalfFields[qtype]:
        halves = randomFiniteHalves(rng, blocks.shape[0]).view(np.uint8).reshape(-1, 2)
        blocks[:, offset:offset + 2] = halves
    return blocks.reshape(-1)


def b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def makeCase(qtype: T, kind: str, raw: np.ndarray, rows: int) -> dict:
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(rows, -1)
    expected = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)
    assert np.all(np.isfinite(expected)), (qtype.name, kind)
    return {"type": int(qtype), "name": qtype.name, "case": kind, "count": int(expected.size),
            "bytes": b64(raw), "expected": b64(expected)}


def dequantGoldens() -> dict:
    rng = np.random.default_rng(17)
    values = sampleValues(rng, 2, 256)
    cases = []
    for qtype in kQuantizable:
        raw = np.asarray(quantize(values, qtype)).view(np.uint8)
        cases.append(makeCase(qtype, "quantized", raw, rows=2))
    for qtype in kRandomAlso + kRandomOnly:
        cases.append(makeCase(qtype, "random", randomBlocks(rng, qtype, 512), rows=2))
    types = [[int(t), t.name, *gguf.GGML_QUANT_SIZES[t]] for t in T if t in gguf.GGML_QUANT_SIZES]
    return {
        "format": "cases[i]: ggml type number and name, element count, `bytes` the raw blocks "
                  "(base64), `expected` the little-endian fp32 values gguf-py dequantizes them "
                  "to (base64). types: [number, name, block size, type size] from "
                  "gguf.GGML_QUANT_SIZES.",
        "versions": {"gguf": version("gguf"), "numpy": np.__version__,
                     "python": platform.python_version()},
        "generator": "tools/goldens/make_gguf_dequant_goldens.py",
        "cases": cases,
        "types": types,
    }


def addMetadata(writer: gguf.GGUFWriter) -> None:
    V = gguf.GGUFValueType
    writer.add_name("kiln tiny")
    writer.add_uint8("test.uint8", 200)
    writer.add_int8("test.int8", -100)
    writer.add_uint16("test.uint16", 60000)
    writer.add_int16("test.int16", -30000)
    writer.add_uint32("test.uint32", 4000000000)
    writer.add_int32("test.int32", -2000000000)
    writer.add_float32("test.float32", 1.25)
    writer.add_bool("test.bool", True)
    writer.add_string("test.string", "h\u00e9llo")
    writer.add_uint64("test.uint64", 1 << 62)
    writer.add_int64("test.int64", -(1 << 62))
    writer.add_float64("test.float64", 0.1)
    writer.add_key_value("test.array.int32", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    writer.add_key_value("test.array.uint8", [0, 255], V.ARRAY, sub_type=V.UINT8)
    writer.add_key_value("test.array.float32", [0.5, -1.5], V.ARRAY, sub_type=V.FLOAT32)
    writer.add_key_value("test.array.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    writer.add_key_value("test.array.string", ["a", "bc", ""], V.ARRAY, sub_type=V.STRING)
    writer.add_context_length(64)


def writeTiny(path: str) -> None:
    rng = np.random.default_rng(18)
    writer = gguf.GGUFWriter(path, "llama")
    addMetadata(writer)
    writer.add_tensor("f32", (np.arange(6, dtype=np.float32) * 0.5 - 1).reshape(2, 3))
    writer.add_tensor("f16", np.array([1, -2, 0.5, 65504], dtype=np.float16))
    bf16 = np.asarray(quantize(rng.standard_normal((2, 8)).astype(np.float32), T.BF16))
    writer.add_tensor("bf16", bf16, raw_dtype=T.BF16)
    for name, qtype, shape in [("q8_0", T.Q8_0, (2, 32)), ("q4_0", T.Q4_0, (1, 64)),
                               ("q5_1", T.Q5_1, (1, 32))]:
        raw = np.asarray(quantize(rng.standard_normal(shape).astype(np.float32), qtype))
        writer.add_tensor(name, raw, raw_dtype=qtype)
    for name, qtype in [("q4_k", T.Q4_K), ("q6_k", T.Q6_K)]:
        raw = randomBlocks(rng, qtype, 256).reshape(1, -1)
        writer.add_tensor(name, raw, raw_dtype=qtype)
    writer.add_tensor("i8", np.array([1, -2, 3, -4, 5], dtype=np.int8))
    finish(writer)


def writeSplit(path: str) -> None:
    writer = gguf.GGUFWriter(path, "llama", split_max_tensors=1)
    writer.add_name("kiln tiny split")
    writer.add_context_length(64)
    for i in range(3):
        writer.add_tensor(f"t{i}", np.full((2, 4), i + 1, dtype=np.float32))
    finish(writer)


def finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    os.makedirs(os.path.join(kOut, "split"), exist_ok=True)
    with open(os.path.join(kOut, "dequant_golden.json"), "w") as f:
        json.dump(dequantGoldens(), f, indent=1)
        f.write("\n")
    writeTiny(os.path.join(kOut, "tiny.gguf"))
    writeSplit(os.path.join(kOut, "split", "tiny-split.gguf"))
    written = ["dequant_golden.json", "tiny.gguf"] + [
        f"split/tiny-split-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    for name in written:
        path = os.path.join(kOut, name)
        print(f"{os.path.relpath(path, kRoot)}: {os.path.getsize(path)} bytes")
    print(f"gguf {version('gguf')}, numpy {np.__version__}, python {platform.python_version()}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
