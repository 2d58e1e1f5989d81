#!/usr/bin/env python3
"""Compares the PTX of the CUDA kernels (crates/cuda/kernels, in nvrtc.rs's order) between the
working tree and a git revision, kernel by kernel, with a local NVRTC (no GPU): a kernel refactor
whose PTX is identical cannot change bits or speed, so it needs no device run.
  scripts/ptx_diff.py [REV=HEAD] [ARCH=compute_90a] [KERNEL_REGEX=.]
Prints one line a kernel (same / differs / only in one side); exits 1 when any differs."""
import re, sys

from nvrtc_lib import compile_source, nvrtc, output, source

rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
arch = sys.argv[2] if len(sys.argv) > 2 else "compute_90a"
pick = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".")
lib = nvrtc()


def ptx(src):
    """Entry name -> PTX body of every kernel in `src`."""
    prog, rc, _ = compile_source(lib, src, [f"--gpu-architecture={arch}", "-std=c++17"])
    if rc != 0:
        sys.exit("compile failed (scripts/nvrtc_check.py shows the log)")
    text = output(lib, prog, "PTX")
    # Labels, inline-asm labels (`WAIT_%=`) and local depots are numbered by the function's place
    # in the module, and shared variables are named by the function that declares them (a kernel
    # body moved into a template has other names): drop the numbers and the names.
    def norm(body):
        body = re.sub(r"(\$L__BB|__local_depot)\d+", r"\1", body)
        body = re.sub(r"\b([A-Z]+)_\d+\b", r"\1_", body)
        body = re.sub(r"\b(smem_raw|wg_smem)(\$\d+)?", "dynamic_smem", body)
        return re.sub(r"_ZZ\w*E\d+([A-Za-z_]\w*)", r"shared_\1", body)
    return {m.group(1): norm(m.group(2)) for m in re.finditer(r"\.entry (\w+)\((.*?)\n\}\n", text, re.S)}


old, new = ptx(source(rev)), ptx(source())
differs = False
for name in sorted(set(old) | set(new)):
    if not pick.search(name):
        continue
    if name not in old or name not in new:
        print(f"{name}: only in {'the working tree' if name in new else rev}")
    elif old[name] == new[name]:
        print(f"{name}: same")
    else:
        differs = True
        print(f"{name}: differs")
sys.exit(1 if differs else 0)
