"""What scripts/nvrtc_check.py, ptx_diff.py and sass.py share: the CUDA kernels' source as NVRTC
compiles it (crates/cuda/kernels, in nvrtc.rs's order; from the working tree or a git revision),
a local libnvrtc, and one compile of that source."""
import ctypes, glob, os, re, site, subprocess, sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DIRS = site.getsitepackages() + [site.getusersitepackages()]


def read(path, rev=None):
    """The file's text in the working tree (rev None) or at git revision `rev`."""
    if rev is None:
        return open(os.path.join(REPO, path)).read()
    return subprocess.run(["git", "-C", REPO, "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout


def source(rev=None):
    """Every kernel file concatenated in the order crates/cuda/src/nvrtc.rs embeds them."""
    order = re.findall(r'include_str!\("\.\./kernels/([^"]+)"\)', read("crates/cuda/src/nvrtc.rs", rev))
    return "".join(read(f"crates/cuda/kernels/{f}", rev) + "\n" for f in order)


def nvrtc():
    """A loaded libnvrtc (NVRTC_LIB, else one from pip's nvidia packages); exits when none is found."""
    libs = [os.environ.get("NVRTC_LIB", "")] + sorted(
        p for d in DIRS for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnvrtc.so.*")))
    lib = next((ctypes.CDLL(p) for p in libs if p and os.path.exists(p)), None)
    if lib is None:
        sys.exit("no libnvrtc found: pip install nvidia-cuda-nvrtc-cu12, or set NVRTC_LIB")
    return lib


def compile_source(lib, src, opts):
    """Compiles `src` with the option strings `opts`: (program handle, return code, log text)."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"tensorfold.cu", 0, None, None) == 0
    raw = [o.encode() for o in opts]
    rc = lib.nvrtcCompileProgram(prog, len(raw), (ctypes.c_char_p * len(raw))(*raw))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    return prog, rc, log.value.decode(errors="replace")


def output(lib, prog, kind):
    """The compiled program's "PTX" (text) or "CUBIN" (bytes)."""
    n = ctypes.c_size_t()
    getattr(lib, f"nvrtcGet{kind}Size")(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    getattr(lib, f"nvrtcGet{kind}")(prog, buf)
    return buf.value.decode() if kind == "PTX" else buf.raw
