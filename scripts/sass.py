#!/usr/bin/env python3
"""Prints the SASS (machine code) of one CUDA kernel as NVRTC compiles it for sm_90a, from the
working tree or a git revision, with a summary of its inner-loop shape (MMAs, shared loads,
branches): tells whether a loop body compiled to branches or to predicated, overlapping code
without a GPU. Needs a libnvrtc (`pip install nvidia-cuda-nvrtc-cu12`) and cuobjdump with
nvdisasm beside it (`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`, or set CUOBJDUMP).
  scripts/sass.py KERNEL [REV] [ARCH=sm_90a] > kernel.sass"""
import glob, os, re, shutil, subprocess, sys, tempfile

from nvrtc_lib import DIRS, compile_source, nvrtc, output, source

if len(sys.argv) < 2:
    sys.exit(__doc__)
kernel = sys.argv[1]
rev = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "wt" else None
arch = sys.argv[3] if len(sys.argv) > 3 else "sm_90a"
tools = [os.environ.get("CUOBJDUMP", ""), shutil.which("cuobjdump") or ""] + sorted(
    p for d in DIRS for p in glob.glob(os.path.join(d, "nvidia", "*", "bin", "cuobjdump")))
cuobjdump = next((p for p in tools if p and os.path.exists(p)), None)
if cuobjdump is None:
    sys.exit("no cuobjdump: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or set CUOBJDUMP")
lib = nvrtc()
prog, rc, _ = compile_source(lib, source(rev), [f"--gpu-architecture={arch}", "-std=c++17"])
if rc != 0:
    sys.exit("compile failed (scripts/nvrtc_check.py shows the log)")
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(output(lib, prog, "CUBIN"))
    f.flush()
    out = subprocess.run([cuobjdump, "-sass", "-fun", kernel, f.name], capture_output=True, text=True).stdout
if "Function" in out and len(out.splitlines()) < 4:
    sys.exit("cuobjdump printed no code: nvdisasm must sit beside it (pip install nvidia-cuda-nvdisasm)")
lines = [re.sub(r"/\*[0-9a-f]{4}\*/|/\* 0x[0-9a-f]+ \*/", "", l).rstrip() for l in out.splitlines()]
lines = [l for l in lines if l.strip()]
if not any("Function" in l for l in lines):
    sys.exit(f"no kernel {kernel!r} in the module")
print("\n".join(lines))
count = lambda pat: sum(1 for l in lines if re.search(pat, l))
print(f"# {kernel}: {len(lines)} lines, MMAs {count(r'HMMA|HGMMA')}, ldmatrix {count('LDSM')}, "
      f"shared loads {count(r'LDS[ .]')}, branches {count(r'BRA')}", file=sys.stderr)
