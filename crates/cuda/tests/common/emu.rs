//! Shared by the host emulations of kernels (`*_emu.rs`): a function cut out of a kernel source,
//! and g++ building an emulator (or a clean skip where it is missing).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The source of the `__device__` function or `__global__` kernel `name` in `src`.
pub fn cut(src: &str, name: &str) -> String {
    let start = src
        .lines()
        .scan(0, |off, l| {
            let at = *off;
            *off += l.len() + 1;
            Some((at, l))
        })
        .find(|(_, l)| {
            (l.starts_with("__device__") || l.starts_with("extern \"C\" __global__"))
                && l.contains(&format!(" {name}("))
        })
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("{name} is not in the kernel source"));
    let line_end = src[start..].find('\n').map_or(src.len(), |e| start + e);
    if src[start..line_end].trim_end().ends_with('}') {
        return src[start..line_end].to_string();
    }
    let end = src[start..].find("\n}\n").map(|e| start + e + 3).unwrap_or_else(|| panic!("{name} has no end"));
    src[start..end].to_string()
}

/// `main` built by g++ with `flags` (and `-I include` where given) into `out`; `None` (a skip)
/// without g++, a panic naming `what` when it does not build.
pub fn gxx(flags: &[&str], include: Option<&Path>, main: &Path, out: PathBuf, what: &str) -> Option<PathBuf> {
    let mut cmd = Command::new("g++");
    cmd.args(flags);
    if let Some(dir) = include {
        cmd.arg("-I").arg(dir);
    }
    match cmd.arg("-o").arg(&out).arg(main).status() {
        Ok(s) if s.success() => Some(out),
        Ok(s) => panic!("the {what} emulator did not build: {s}"),
        Err(e) => {
            eprintln!("skipped: no g++ ({e})");
            None
        }
    }
}
