//! Compiling the embedded CUDA C kernels with NVRTC for the device's architecture, with an
//! on-disk cache of the resulting cubin keyed by a hash of the source, options and NVRTC version.

use crate::error::CudaError;
use crate::options::TraceMark;
use cudarc::nvrtc::sys;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// The kernel sources, concatenated in this order into one translation unit.
const SOURCES: [&str; 20] = [
    include_str!("../kernels/common.cuh"),
    include_str!("../kernels/ops.cu"),
    include_str!("../kernels/gdn.cu"),
    include_str!("../kernels/ssd.cu"),
    include_str!("../kernels/short_conv.cu"),
    include_str!("../kernels/sample.cu"),
    include_str!("../kernels/draw.cu"),
    include_str!("../kernels/logprob.cu"),
    include_str!("../kernels/gemm.cu"),
    include_str!("../kernels/fp8.cu"),
    include_str!("../kernels/gemv_fp8.cu"),
    include_str!("../kernels/moe.cu"),
    include_str!("../kernels/gemm_wgmma.cu"),
    include_str!("../kernels/gemv_tma.cu"),
    include_str!("../kernels/gemv_m1.cu"),
    include_str!("../kernels/attention.cu"),
    include_str!("../kernels/attention_split.cu"),
    include_str!("../kernels/attention_wg.cu"),
    include_str!("../kernels/attention_mla.cu"),
    include_str!("../kernels/heads.cu"),
];

/// The whole program text.
pub fn source() -> String {
    SOURCES.join("\n")
}

/// FNV-1a 64: a hash that is stable across builds and platforms (file names depend on it).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

/// The compiled cubin for `arch` (e.g. `sm_90`), from `cache_dir` when present there; `trace`
/// builds the kernels with their timeline records (trace.rs), with the TMA GEMV's mark where the
/// inner option names it.
pub fn compile(
    arch: &str,
    include: Option<&Path>,
    cache_dir: Option<&Path>,
    trace: Option<Option<TraceMark>>,
) -> Result<Vec<u8>, CudaError> {
    // SAFETY: only probes whether the shared library can be opened.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::NoNvrtc);
    }
    let src = format!("{}{}", trace_defines(trace), source());
    let mut opts = vec![format!("--gpu-architecture={arch}"), "-std=c++17".to_string()];
    if let Some(dir) = include {
        opts.push(format!("--include-path={}", dir.display()));
    }
    let (major, minor) = nvrtc_version();
    let ver = format!("{major}.{minor}");
    let joined = opts.join(" ");
    let key = fnv1a(&[src.as_bytes(), joined.as_bytes(), ver.as_bytes()]);
    let path: Option<PathBuf> = cache_dir.map(|d| d.join(format!("tf-cuda-{key:016x}-{arch}.cubin")));
    if let Some(p) = &path
        && let Ok(bytes) = std::fs::read(p)
        && !bytes.is_empty()
    {
        return Ok(bytes);
    }
    let cubin = run_nvrtc(&src, &opts, arch)?;
    if let (Some(p), Some(dir)) = (&path, cache_dir) {
        // A cache that cannot be written only costs the next start a compile.
        let tmp = dir.join(format!(".tf-cuda-{key:016x}-{}.tmp", std::process::id()));
        if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, &cubin).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(cubin)
}

/// The defines put before the kernel sources: none by default (the default build's source is the
/// sources alone); `TF_TRACE` for a trace build, and `TF_TRACE_MARK_<NAME>` for its mark.
fn trace_defines(trace: Option<Option<TraceMark>>) -> String {
    match trace {
        None => String::new(),
        Some(None) => "#define TF_TRACE\n".to_string(),
        Some(Some(m)) => format!("#define TF_TRACE\n#define TF_TRACE_MARK_{}\n", m.define()),
    }
}

fn check(r: sys::nvrtcResult, arch: &str, what: &str) -> Result<(), CudaError> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Compile { arch: arch.to_string(), log: format!("{what}: {r:?}") })
    }
}

fn run_nvrtc(src: &str, opts: &[String], arch: &str) -> Result<Vec<u8>, CudaError> {
    let csrc = CString::new(src).map_err(|_| CudaError::Compile { arch: arch.into(), log: "NUL in source".into() })?;
    let name = c"tensorfold.cu";
    let copts: Vec<CString> = opts.iter().map(|o| CString::new(o.as_str()).unwrap_or_default()).collect();
    let ptrs: Vec<*const std::ffi::c_char> = copts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer handed to NVRTC outlives the program, destroyed before returning.
    unsafe {
        check(
            sys::nvrtcCreateProgram(&mut prog, csrc.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()),
            arch,
            "nvrtcCreateProgram",
        )?;
        let compiled = sys::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr());
        let result = if compiled == sys::nvrtcResult::NVRTC_SUCCESS {
            let mut size = 0usize;
            check(sys::nvrtcGetCUBINSize(prog, &mut size), arch, "nvrtcGetCUBINSize").and_then(|_| {
                let mut buf = vec![0u8; size];
                check(sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char), arch, "nvrtcGetCUBIN")
                    .map(|_| buf)
            })
        } else {
            Err(CudaError::Compile { arch: arch.to_string(), log: program_log(prog) })
        };
        sys::nvrtcDestroyProgram(&mut prog);
        result
    }
}

/// # Safety
/// `prog` must be a live program.
unsafe fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: the caller guarantees `prog` is live; the buffer has the size NVRTC reported.
    unsafe {
        if sys::nvrtcGetProgramLogSize(prog, &mut size) != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
            return String::from("(no log)");
        }
        let mut buf = vec![0u8; size];
        sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut std::ffi::c_char);
        CStr::from_bytes_until_nul(&buf).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_separates_parts() {
        assert_eq!(fnv1a(&[b"abc"]), fnv1a(&[b"abc"]));
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }

    /// The source without its comments.
    fn uncommented(src: &str) -> String {
        let mut out = String::with_capacity(src.len());
        let mut rest = src;
        while let Some(i) = rest.find('/') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            if rest.starts_with("//") {
                rest = rest.find('\n').map_or("", |j| &rest[j..]);
            } else if rest.starts_with("/*") {
                rest = rest.find("*/").map_or("", |j| &rest[j + 2..]);
            } else {
                out.push('/');
                rest = &rest[1..];
            }
        }
        out.push_str(rest);
        out
    }

    /// Each top-level definition with a parameter list: its name, whether it is a kernel, and
    /// its body.
    fn definitions(src: &str) -> Vec<(String, bool, String)> {
        let (mut out, mut depth, mut head, mut body) = (Vec::new(), 0usize, String::new(), String::new());
        for c in src.chars() {
            match (c, depth) {
                ('{', 0) => depth = 1,
                (';', 0) | ('}', 0) => head.clear(),
                (c, 0) => head.push(c),
                ('{', _) => {
                    depth += 1;
                    body.push(c);
                }
                ('}', 1) => {
                    depth = 0;
                    if let Some(open) = head.rfind('(') {
                        let name: String = head[..open]
                            .trim_end()
                            .chars()
                            .rev()
                            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '#')
                            .collect::<Vec<_>>()
                            .into_iter()
                            .rev()
                            .collect();
                        out.push((name, head.contains("__global__"), std::mem::take(&mut body)));
                    }
                    head.clear();
                    body.clear();
                }
                ('}', _) => {
                    depth -= 1;
                    body.push(c);
                }
                (c, _) => body.push(c),
            }
        }
        out
    }

    #[test]
    fn every_kernel_waits_for_the_kernel_before_it() {
        // Kernels launch with programmatic stream serialization on sm_90 (device.rs `launch`): one
        // that reads memory before `griddepcontrol.wait` races the kernel before it.
        let defs = definitions(&uncommented(&source()));
        let waits = |body: &str| body.contains("tf_pdl_");
        let helpers: Vec<&str> = defs.iter().filter(|(_, k, b)| !k && waits(b)).map(|(n, _, _)| n.as_str()).collect();
        let kernels: Vec<&(String, bool, String)> = defs.iter().filter(|(_, k, _)| *k).collect();
        assert!(kernels.len() > 60, "found {} kernels", kernels.len());
        assert!(kernels.iter().any(|(n, _, _)| n == "head_matmul"));
        let calls = |body: &str, f: &str| {
            body.match_indices(f).any(|(i, _)| {
                let before = body[..i].chars().next_back();
                let after = body[i + f.len()..].trim_start().chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && matches!(after, Some('(' | '<'))
            })
        };
        let bad: Vec<&str> = kernels
            .iter()
            .filter(|(_, _, b)| !waits(b) && !helpers.iter().any(|h| calls(b, h)))
            .map(|(n, _, _)| n.as_str())
            .collect();
        assert!(bad.is_empty(), "kernels that never wait for the kernel before them: {bad:?}");
    }

    #[test]
    fn kernels_compile_when_nvrtc_is_present() {
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { sys::is_culib_present() } {
            eprintln!("skipped: NVRTC not found");
            return;
        }
        for arch in ["sm_90", "sm_90a"] {
            let cubin = compile(arch, None, None, None).unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert!(cubin.len() > 1000);
        }
        // The timeline build (trace.rs) compiles too, and differs.
        let plain = compile("sm_90a", None, None, None).unwrap_or_else(|e| panic!("{e}"));
        let traced = compile("sm_90a", None, None, Some(None)).unwrap_or_else(|e| panic!("traced: {e}"));
        assert_ne!(plain, traced);
    }
}
