//! Files opened by name without following links or blocking: every component below a folder is
//! opened with `O_NOFOLLOW` relative to its parent's descriptor, a file is opened `O_NONBLOCK`
//! (so a FIFO cannot hang the open) and `fstat`-checked to be a regular file before any read,
//! and writes go through a temporary created exclusively in the target's folder, synced, then
//! renamed over the target. Linux/Unix only (rustix).

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use std::fs::File;
use std::hash::{BuildHasher, Hash, Hasher};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use thiserror::Error;

/// A file could not be opened or written safely.
#[derive(Debug, Error)]
pub enum SafeFileError {
    /// A component of the path is a symbolic link.
    #[error("'{0}' is a symbolic link")]
    Symlink(String),
    /// The file is not a regular file (a FIFO, device, socket or directory).
    #[error("'{path}' is not a regular file (it is a {kind})")]
    NotRegular {
        /// The file.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// The path is not a plain relative path below the folder (`..`, absolute, empty).
    #[error("'{0}' is not a plain path below its folder")]
    BadPath(String),
    /// The operating system refused.
    #[error("'{path}': {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl SafeFileError {
    /// Whether the file (or a folder on its way) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SafeFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// An open folder whose descriptor anchors every later open, so that renaming or relinking its
/// path afterwards cannot redirect them.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

const DIR_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::NONBLOCK).union(OFlags::CLOEXEC);

/// What a file of type `t` is, in words.
pub(crate) fn kind_of(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

impl Dir {
    /// Opens the folder `path`, refusing it when its last component is a symbolic link.
    pub fn open(path: &Path) -> Result<Dir, SafeFileError> {
        let shown = path.display().to_string();
        let at = if path.as_os_str().is_empty() { Path::new(".") } else { path };
        let fd = open_at(CWD, at, DIR_FLAGS, &shown)?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    /// The folder's path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` for reading: a plain relative path, no component of which is a link, naming a
    /// regular file (checked on the opened descriptor); never blocks on a FIFO.
    pub fn open_read(&self, rel: &Path) -> Result<File, SafeFileError> {
        let (parent, name) = self.walk(rel)?;
        let shown = self.path.join(rel).display().to_string();
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = open_at(parent.as_ref().map_or(self.fd.as_fd(), |d| d.as_fd()), &name, flags, &shown)?;
        let io = |source: rustix::io::Errno| SafeFileError::Io { path: shown.clone(), source: source.into() };
        let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd).map_err(io)?.st_mode);
        if kind != FileType::RegularFile {
            return Err(SafeFileError::NotRegular { path: shown, kind: kind_of(kind) });
        }
        let flags = rustix::fs::fcntl_getfl(&fd).map_err(io)?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK).map_err(io)?;
        Ok(File::from(fd))
    }

    /// Replaces `rel` with what `fill` writes: into a temporary of a random name created
    /// exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`) beside it, synced, then renamed over it; an
    /// existing `rel` that is a link or not a regular file is refused and left alone.
    pub fn write_atomic<F>(&self, rel: &Path, fill: F) -> Result<(), SafeFileError>
    where
        F: FnOnce(&mut File) -> std::io::Result<()>,
    {
        let (parent, name) = self.walk(rel)?;
        let dir = parent.as_ref().map_or(self.fd.as_fd(), |d| d.as_fd());
        let shown = self.path.join(rel).display().to_string();
        let io = |source: std::io::Error| SafeFileError::Io { path: shown.clone(), source };
        match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => {}
                FileType::Symlink => return Err(SafeFileError::Symlink(shown)),
                other => return Err(SafeFileError::NotRegular { path: shown, kind: kind_of(other) }),
            },
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(io(e.into())),
        }
        let (tmp_name, mut tmp) = create_temp(dir, &name).map_err(io)?;
        let written = fill(&mut tmp).and_then(|()| tmp.flush()).and_then(|()| tmp.sync_all());
        let renamed = written.and_then(|()| rustix::fs::renameat(dir, &tmp_name, dir, &name).map_err(Into::into));
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(dir, &tmp_name, AtFlags::empty());
            return Err(io(e));
        }
        // The rename is durable once the folder is synced.
        rustix::fs::fsync(dir).map_err(|e| io(e.into()))
    }

    /// Opens every folder of `rel` but its last component without following links; returns the
    /// innermost folder (`None`: this one) and the last component.
    fn walk(&self, rel: &Path) -> Result<(Option<OwnedFd>, PathBuf), SafeFileError> {
        let bad = || SafeFileError::BadPath(rel.display().to_string());
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(p) => parts.push(p),
                Component::CurDir => {}
                _ => return Err(bad()),
            }
        }
        let Some((last, folders)) = parts.split_last() else { return Err(bad()) };
        let mut cur: Option<OwnedFd> = None;
        let mut shown = self.path.clone();
        for part in folders {
            shown.push(part);
            let at = cur.as_ref().map_or(self.fd.as_fd(), |d| d.as_fd());
            cur = Some(open_at(at, Path::new(part), DIR_FLAGS, &shown.display().to_string())?);
        }
        Ok((cur, PathBuf::from(last)))
    }
}

/// `openat` that names a refused link as [`SafeFileError::Symlink`].
fn open_at<Fd: AsFd>(dir: Fd, name: &Path, flags: OFlags, shown: &str) -> Result<OwnedFd, SafeFileError> {
    match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let is_link = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            if is_link {
                Err(SafeFileError::Symlink(shown.to_string()))
            } else {
                Err(SafeFileError::Io { path: shown.to_string(), source: e.into() })
            }
        }
    }
}

/// Creates `.NAME.<random>.tmp` in `dir` exclusively, retrying on a name already taken.
fn create_temp(dir: std::os::fd::BorrowedFd<'_>, name: &Path) -> std::io::Result<(PathBuf, File)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut last = std::io::Error::other("no temporary name was free");
    for _ in 0..16 {
        let tmp = PathBuf::from(format!(".{}.{:016x}.tmp", name.display(), random_u64()));
        match rustix::fs::openat(dir, &tmp, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((tmp, File::from(fd))),
            Err(rustix::io::Errno::EXIST) => last = std::io::Error::from(rustix::io::Errno::EXIST),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last)
}

/// 64 unpredictable bits: std's per-process random hash keys over the time and the thread.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    std::thread::current().id().hash(&mut h);
    h.finish()
}

/// Opens `path` for reading as [`Dir::open_read`] does, relative to its parent folder (itself
/// refused when its last component is a link).
pub fn open_read(path: &Path) -> Result<File, SafeFileError> {
    let (dir, name) = split(path)?;
    Dir::open(dir)?.open_read(name)
}

/// Replaces `path` as [`Dir::write_atomic`] does, the temporary beside it.
pub fn write_atomic<F>(path: &Path, fill: F) -> Result<(), SafeFileError>
where
    F: FnOnce(&mut File) -> std::io::Result<()>,
{
    let (dir, name) = split(path)?;
    Dir::open(dir)?.write_atomic(name, fill)
}

/// The parent folder (`.` when none) and the file name of `path`.
fn split(path: &Path) -> Result<(&Path, &Path), SafeFileError> {
    let name = path.file_name().ok_or_else(|| SafeFileError::BadPath(path.display().to_string()))?;
    Ok((path.parent().unwrap_or(Path::new("")), Path::new(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn read(path: &Path) -> Result<Vec<u8>, SafeFileError> {
        let mut out = Vec::new();
        open_read(path)?.read_to_end(&mut out).map_err(|source| SafeFileError::Io { path: String::new(), source })?;
        Ok(out)
    }

    #[test]
    fn reads_and_replaces_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.bin");
        write_atomic(&p, |f| f.write_all(b"one")).unwrap();
        write_atomic(&p, |f| f.write_all(b"two")).unwrap();
        assert_eq!(read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["a.bin"], "no temporary is left behind");
        assert!(read(&dir.path().join("missing")).unwrap_err().is_not_found());
    }

    #[test]
    fn a_failed_write_leaves_the_target_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.bin");
        std::fs::write(&p, b"old").unwrap();
        let err = write_atomic(&p, |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(err.unwrap_err().to_string().contains("disk full"));
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn links_are_refused_at_every_component() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, b"secret").unwrap();
        // The file itself a link: refused for reading and writing; the outside file unchanged.
        let link = dir.path().join("link.bin");
        symlink(&secret, &link).unwrap();
        assert!(matches!(read(&link), Err(SafeFileError::Symlink(_))));
        assert!(matches!(write_atomic(&link, |f| f.write_all(b"x")), Err(SafeFileError::Symlink(_))));
        // A folder below the root a link.
        let root = Dir::open(dir.path()).unwrap();
        symlink(outside.path(), dir.path().join("sub")).unwrap();
        assert!(matches!(root.open_read(Path::new("sub/secret")), Err(SafeFileError::Symlink(_))));
        let w = root.write_atomic(Path::new("sub/new"), |f| f.write_all(b"x"));
        assert!(matches!(w, Err(SafeFileError::Symlink(_))));
        assert!(!outside.path().join("new").exists());
        // The folder itself a link.
        let linked_dir = dir.path().join("linked");
        symlink(outside.path(), &linked_dir).unwrap();
        assert!(matches!(read(&linked_dir.join("secret")), Err(SafeFileError::Symlink(_))));
        assert!(matches!(write_atomic(&linked_dir.join("new"), |f| f.write_all(b"x")), Err(SafeFileError::Symlink(_))));
        assert_eq!(std::fs::read(&secret).unwrap(), b"secret");
        assert!(!outside.path().join("new").exists());
        for bad in ["../x", "/etc/passwd", "", "."] {
            assert!(matches!(root.open_read(Path::new(bad)), Err(SafeFileError::BadPath(_))), "{bad}");
        }
    }

    #[test]
    fn a_planted_temporary_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, b"secret").unwrap();
        for planted in ["a.bin.tmp", ".a.bin.tmp", "a.tmp"] {
            symlink(&secret, dir.path().join(planted)).unwrap();
        }
        write_atomic(&dir.path().join("a.bin"), |f| f.write_all(b"data")).unwrap();
        assert_eq!(std::fs::read(&secret).unwrap(), b"secret");
        assert_eq!(std::fs::read(dir.path().join("a.bin")).unwrap(), b"data");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || tx.send(read(&p).map(|_| ())));
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("opening a FIFO blocked");
        assert!(matches!(got, Err(SafeFileError::NotRegular { kind: "FIFO", .. })), "{got:?}");
        assert!(matches!(write_atomic(&fifo, |f| f.write_all(b"x")), Err(SafeFileError::NotRegular { .. })));
        assert!(matches!(read(dir.path()), Err(SafeFileError::NotRegular { kind: "directory", .. })));
    }
}
