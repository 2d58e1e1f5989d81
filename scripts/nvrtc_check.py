#!/usr/bin/env python3
"""Compiles the CUDA kernels (crates/cuda/kernels, in nvrtc.rs's order) with a local NVRTC for
sm_90 and prints the log with ptxas register/spill lines: catches kernel compile errors without a
GPU. Needs a libnvrtc (e.g. `pip install nvidia-cuda-nvrtc`); NVRTC_LIB overrides the path."""
import re, sys

from nvrtc_lib import compile_source, nvrtc, source

arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
_, rc, text = compile_source(nvrtc(), source(), [f"--gpu-architecture={arch}", "-std=c++17", "--ptxas-options=-v"])
kernel = None
for line in text.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m:
        kernel = m.group(1)
    elif "registers" in line or "spill" in line and not " 0 bytes spill stores, 0 bytes spill loads" in line:
        print(f"{kernel}: {line.strip()}")
    elif "error" in line or "warning" in line or "Performance Loss" in line:
        print(line)
print("compile", "ok" if rc == 0 else f"FAILED ({rc})")
sys.exit(0 if rc == 0 else 1)
