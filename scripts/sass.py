#!/usr/bin/env python3
"""Prints the SASS (machine code) of one CUDA kernel as NVRTC compiles it for sm_90a, from the
working tree or a git revision, with a summary of its inner-loop shape (MMAs, shared loads,
branches): tells whether a loop body compiled to branches or to predicated, overlapping code
without a GPU. Needs a libnvrtc (`pip install nvidia-cuda-nvrtc-cu12`) and cuobjdump with
nvdisasm beside it (`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`, or set CUOBJDUMP).
  scripts/sass.py KERNEL [REV] [ARCH=sm_90a] > kernel.sass"""
import ctypes, glob, os, re, shutil, site, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.abspath(os.path.join(here, ".."))
if len(sys.argv) < 2:
    sys.exit(__doc__)
kernel = sys.argv[1]
rev = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "wt" else None
arch = sys.argv[3] if len(sys.argv) > 3 else "sm_90a"


def read(path):
    if rev is None:
        return open(os.path.join(repo, path)).read()
    return subprocess.run(["git", "-C", repo, "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout


order = re.findall(r'include_str!\("\.\./kernels/([^"]+)"\)', read("crates/cuda/src/nvrtc.rs"))
src = "".join(read(f"crates/cuda/kernels/{f}") + "\n" for f in order)
dirs = site.getsitepackages() + [site.getusersitepackages()]
libs = [os.environ.get("NVRTC_LIB", "")] + sorted(
    p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so.*")))
lib = next((ctypes.CDLL(p) for p in libs if p and os.path.exists(p)), None)
tools = [os.environ.get("CUOBJDUMP", ""), shutil.which("cuobjdump") or ""] + sorted(
    p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "bin", "cuobjdump")))
cuobjdump = next((p for p in tools if p and os.path.exists(p)), None)
if lib is None or cuobjdump is None:
    sys.exit("needs libnvrtc and cuobjdump: pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"tensorfold.cu", 0, None, None) == 0
opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
    sys.exit("compile failed (scripts/nvrtc_check.py shows the log)")
n = ctypes.c_size_t()
lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
buf = ctypes.create_string_buffer(n.value)
lib.nvrtcGetCUBIN(prog, buf)
with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(buf.raw)
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
