#!/usr/bin/env python3
"""Compiles the CUDA kernels (crates/cuda/kernels, in nvrtc.rs's order) with a local NVRTC for
sm_90 and prints the log with ptxas register/spill lines: catches kernel compile errors without a
GPU. Needs a libnvrtc (e.g. `pip install nvidia-cuda-nvrtc`); NVRTC_LIB overrides the path."""
import ctypes, glob, os, re, site, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "cuda")
order = re.findall(r'include_str!\("\.\./kernels/([^"]+)"\)', open(os.path.join(root, "src", "nvrtc.rs")).read())
src = "".join(open(os.path.join(root, "kernels", f)).read() + "\n" for f in order)
dirs = site.getsitepackages() + [site.getusersitepackages()]
libs = [os.environ.get("NVRTC_LIB", "")] + sorted(
    p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so.*")))
lib = next((ctypes.CDLL(p) for p in libs if p and os.path.exists(p)), None)
if lib is None:
    sys.exit("no libnvrtc found: pip install nvidia-cuda-nvrtc, or set NVRTC_LIB")
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"tensorfold.cu", 0, None, None) == 0
arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"--ptxas-options=-v"]
rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
size = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
lib.nvrtcGetProgramLog(prog, log)
text = log.value.decode(errors="replace")
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
