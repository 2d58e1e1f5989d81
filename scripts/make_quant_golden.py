#!/usr/bin/env python3
"""Writes crates/formats/tests/fixtures/quant_golden.bin: random GGML blocks of each quantized
type TensorFold reads, with the `gguf` Python package's dequantization of them, so the Rust
reference (crates/formats/src/quant.rs) is checked bit for bit.

    pip install gguf numpy
    python3 scripts/make_quant_golden.py            # rewrites the fixture
    python3 scripts/make_quant_golden.py --real F > crates/formats/tests/fixtures/gguf_gemma3_270m_dequant.json

File layout (little endian): b"TFQG", u32 version (1), u32 records; each record is u32 ggml
type, u32 n_bytes, the block bytes, u32 n_floats, the f32 values.
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, dequantize

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates/formats/tests/fixtures/quant_golden.bin"
N_BLOCKS = 8
SEED = 20260301

# Byte offsets of the f16 scale fields in each block (d, and dmin / m where present).
SCALE_FIELDS = {
    T.Q4_0: (18, [0]),
    T.Q4_1: (20, [0, 2]),
    T.Q5_0: (22, [0]),
    T.Q5_1: (24, [0, 2]),
    T.Q8_0: (34, [0]),
    T.Q2_K: (84, [80, 82]),
    T.Q3_K: (110, [108]),
    T.Q4_K: (144, [0, 2]),
    T.Q5_K: (176, [0, 2]),
    T.Q6_K: (210, [208]),
}

# A few chosen scales (zero, negative, subnormal, the largest f16), then random ones.
SPECIAL = [0.0, -0.75, 6.0e-8, 65504.0]


def blocks_for(qtype, rng):
    size, fields = SCALE_FIELDS[qtype]
    raw = rng.integers(0, 256, size=(N_BLOCKS, size), dtype=np.uint8)
    for b in range(N_BLOCKS):
        for k, off in enumerate(fields):
            if b < len(SPECIAL) and k == 0:
                v = SPECIAL[b]
            else:
                v = float(rng.normal(0.0, 0.05)) * (10.0 ** rng.integers(-3, 1))
            raw[b, off:off + 2] = np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)
    return raw.reshape(-1)


def write_golden():
    rng = np.random.default_rng(SEED)
    records = []
    for qtype in SCALE_FIELDS:
        data = blocks_for(qtype, rng)
        values = dequantize(data, qtype).astype(np.float32).reshape(-1)
        assert np.isfinite(values).all(), qtype
        records.append(struct.pack("<II", int(qtype), data.size) + data.tobytes()
                       + struct.pack("<I", values.size) + values.astype("<f4").tobytes())
    blob = b"TFQG" + struct.pack("<II", 1, len(records)) + b"".join(records)
    OUT.write_bytes(blob)
    print(f"wrote {OUT} ({len(blob)} bytes, {len(records)} types)")


def fingerprint(values):
    """Order-sensitive wrapping sum over the f32 bit patterns (matches gguf_real.rs)."""
    bits = np.ascontiguousarray(values, dtype="<f4").reshape(-1).view(np.uint32).astype(np.uint64)
    idx = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        weights = idx * np.uint64(0x9E3779B97F4A7C15) | np.uint64(1)
        return int(np.sum((bits + np.uint64(1)) * weights, dtype=np.uint64))


def real_fingerprints(path):
    reader = GGUFReader(path)
    out = {}
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type)
        out[t.name] = {"type": t.tensor_type.name.lower(), "fingerprint": f"{fingerprint(values):016x}",
                       "first": [float(v) for v in np.asarray(values, dtype=np.float32).reshape(-1)[:4]]}
    lines = [f"{json.dumps(k)}: {json.dumps(out[k], sort_keys=True)}" for k in sorted(out)]
    print("{\n" + ",\n".join(lines) + "\n}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", help="print dequantization fingerprints of every tensor of this GGUF file")
    args = ap.parse_args()
    if args.real:
        real_fingerprints(args.real)
    else:
        write_golden()
