#!/usr/bin/env python3
"""Each CUDA kernel's code size (its cubin `.text` section, bytes) from a local NVRTC build of
crates/cuda/kernels, largest first: a block runs cold on a TPC whose instructions another kernel
evicted (docs/perf.md, decode GEMV, 2026-12-03), so code size is a speed figure here.

usage: kernel_sizes.py [ARCH=sm_90a] [DEFINE ...] [--grep SUBSTR]
  e.g. kernel_sizes.py sm_90a TF_TRACE --grep gemv     (needs a libnvrtc, see nvrtc_check.py)"""
import struct
import sys

from nvrtc_lib import compile_source, nvrtc, output, source


def text_sizes(cubin):
    """{kernel: bytes} of an ELF64 cubin's .text.<kernel> sections."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = secs[shstrndx][4]

    def name(off):
        end = cubin.index(b"\0", names_at + off)
        return cubin[names_at + off:end].decode()

    return {name(s[0])[6:]: s[5] for s in secs if name(s[0]).startswith(".text.")}


args = sys.argv[1:]
pattern = ""
if "--grep" in args:
    i = args.index("--grep")
    pattern = args[i + 1] if i + 1 < len(args) else ""
    del args[i:i + 2]
arch = args[0] if args and args[0].startswith("sm_") else "sm_90a"
defines = [a for a in args if not a.startswith("sm_")]
lib = nvrtc()
src = "".join(f"#define {d}\n" for d in defines) + source()
prog, rc, log = compile_source(lib, src, [f"--gpu-architecture={arch}", "-std=c++17"])
if rc != 0:
    sys.exit(f"compile failed ({rc}):\n{log}")
for kernel, size in sorted(text_sizes(output(lib, prog, "CUBIN")).items(), key=lambda kv: -kv[1]):
    if pattern in kernel:
        print(f"{size:8d} {kernel}")
