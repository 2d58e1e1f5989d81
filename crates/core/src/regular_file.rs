//! Input files a model is loaded from (weights, GGUF files, configs, tokenizers, chat
//! templates): opened following links (a Hugging Face cache links each file to its blob) but
//! `O_NONBLOCK`, so a FIFO cannot hang the open, and `fstat`-checked to be a regular file
//! before any byte is read or mapped.

use crate::safe_file::{SafeFileError, kind_of};
use rustix::fs::{CWD, FileType, Mode, OFlags};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Opens `path` for reading when it is (or links to) a regular file; a FIFO, device, socket or
/// directory is refused at once as [`SafeFileError::NotRegular`] naming it.
pub fn open_regular(path: &Path) -> Result<File, SafeFileError> {
    let shown = || path.display().to_string();
    let io = |source: rustix::io::Errno| SafeFileError::Io { path: shown(), source: source.into() };
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(CWD, path, flags, Mode::empty()).map_err(io)?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd).map_err(io)?.st_mode);
    if kind != FileType::RegularFile {
        return Err(SafeFileError::NotRegular { path: shown(), kind: kind_of(kind) });
    }
    let flags = rustix::fs::fcntl_getfl(&fd).map_err(io)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK).map_err(io)?;
    Ok(File::from(fd))
}

/// Every byte of the regular file `path` ([`open_regular`]).
pub fn read_regular(path: &Path) -> Result<Vec<u8>, SafeFileError> {
    let mut f = open_regular(path)?;
    let mut out = Vec::new();
    f.read_to_end(&mut out).map_err(|source| SafeFileError::Io { path: path.display().to_string(), source })?;
    Ok(out)
}

/// Whether something is at `path` (following links): a file to open and judge, not to skip
/// as `Path::is_file` would skip a FIFO.
pub fn present(path: &Path) -> bool {
    std::fs::metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_and_links_to_them_open_and_a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.bin");
        std::fs::write(&file, b"data").unwrap();
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"data");
        assert_eq!(read_regular(&link).unwrap(), b"data");
        let fifo = dir.path().join("model.safetensors");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || tx.send(read_regular(&p).map(|_| ())));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("opening a FIFO blocked");
        let err = got.unwrap_err();
        assert!(matches!(err, SafeFileError::NotRegular { kind: "FIFO", .. }), "{err:?}");
        assert!(err.to_string().contains("model.safetensors"), "{err}");
        assert!(present(&fifo) && !present(&dir.path().join("none")));
        assert!(matches!(read_regular(dir.path()), Err(SafeFileError::NotRegular { kind: "directory", .. })));
        assert!(read_regular(&dir.path().join("none")).unwrap_err().is_not_found());
    }
}
