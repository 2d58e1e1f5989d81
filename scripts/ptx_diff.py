#!/usr/bin/env python3
"""Compares the PTX of the CUDA kernels (crates/cuda/kernels, in nvrtc.rs's order) between the
working tree and a git revision, kernel by kernel, with a local NVRTC (no GPU): a kernel refactor
whose PTX is identical cannot change bits or speed, so it needs no device run.
  scripts/ptx_diff.py [REV=HEAD] [ARCH=compute_90a] [KERNEL_REGEX=.]
Prints one line a kernel (same / differs / only in one side); exits 1 when any differs."""
import ctypes, glob, os, re, site, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.abspath(os.path.join(here, ".."))
rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
arch = sys.argv[2] if len(sys.argv) > 2 else "compute_90a"
pick = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".")


def read(path, at):
    """The file's text in the working tree (at None) or at revision `at`."""
    if at is None:
        return open(os.path.join(repo, path)).read()
    return subprocess.run(["git", "-C", repo, "show", f"{at}:{path}"], check=True, capture_output=True, text=True).stdout


def source(at):
    order = re.findall(r'include_str!\("\.\./kernels/([^"]+)"\)', read("crates/cuda/src/nvrtc.rs", at))
    return "".join(read(f"crates/cuda/kernels/{f}", at) + "\n" for f in order)


dirs = site.getsitepackages() + [site.getusersitepackages()]
libs = [os.environ.get("NVRTC_LIB", "")] + sorted(
    p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so.*")))
lib = next((ctypes.CDLL(p) for p in libs if p and os.path.exists(p)), None)
if lib is None:
    sys.exit("no libnvrtc found: pip install nvidia-cuda-nvrtc-cu12, or set NVRTC_LIB")


def ptx(src):
    """Entry name -> PTX body of every kernel in `src`."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"tensorfold.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    if lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) != 0:
        sys.exit("compile failed (scripts/nvrtc_check.py shows the log)")
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, buf)
    text = buf.value.decode()
    # Labels and local depots are numbered by the function's place in the module: drop the number.
    norm = lambda body: re.sub(r"(\$L__BB|__local_depot)\d+", r"\1", body)
    return {m.group(1): norm(m.group(2)) for m in re.finditer(r"\.entry (\w+)\((.*?)\n\}\n", text, re.S)}


old, new = ptx(source(rev)), ptx(source(None))
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
