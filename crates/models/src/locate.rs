//! What a `--model` path holds: a GGUF file (told by its magic, whatever its name) or a Hugging
//! Face checkpoint directory (one holding `config.json`); refusals say what was found instead.

use crate::error::ModelError;
use std::io::Read;
use std::path::Path;
use tf_core::safe_file::SafeFileError;

/// The kind of checkpoint at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelPath {
    /// A GGUF file.
    Gguf,
    /// A Hugging Face checkpoint directory.
    HfDir,
}

/// The first bytes of every GGUF file.
const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// Tells what `path` is, refusing anything that is neither a GGUF file nor a directory holding
/// `config.json`, with what was found.
pub fn locate(path: &Path) -> Result<ModelPath, ModelError> {
    let refuse = |msg: String| ModelError::Path { path: path.to_path_buf(), msg };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => refuse("no such file or directory".into()),
        _ => refuse(format!("cannot read: {e}")),
    })?;
    if meta.is_dir() {
        if tf_core::regular_file::present(&path.join("config.json")) {
            return Ok(ModelPath::HfDir);
        }
        return Err(refuse(directory_without_config(path)));
    }
    let mut head = Vec::with_capacity(4);
    let file = tf_core::regular_file::open_regular(path).map_err(|e| match e {
        SafeFileError::NotRegular { kind, .. } => refuse(format!("not a regular file (it is a {kind})")),
        e => refuse(format!("cannot read: {e}")),
    })?;
    file.take(4).read_to_end(&mut head).map_err(|e| refuse(format!("cannot read: {e}")))?;
    if head == GGUF_MAGIC {
        return Ok(ModelPath::Gguf);
    }
    let found = match head.len() {
        0 => "an empty file".to_string(),
        n if n < 4 => format!("{n} bytes long"),
        _ => format!("magic {}", show_magic(&head)),
    };
    let hint = match path.file_name().and_then(|n| n.to_str()) {
        Some("config.json") => "; pass the directory holding it",
        _ => "",
    };
    Err(refuse(format!("not a GGUF file ({found}), and not a directory holding config.json{hint}")))
}

/// Why a directory is not a checkpoint, naming GGUF files it holds (the user may mean one).
fn directory_without_config(dir: &Path) -> String {
    let mut ggufs: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
        .collect();
    ggufs.sort();
    match ggufs.len() {
        0 => "a directory without config.json: not a Hugging Face checkpoint (a GGUF model is given as its file)"
            .to_string(),
        n => {
            let shown = ggufs.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
            let more = if n > 3 { format!(" and {} more", n - 3) } else { String::new() };
            format!("a directory without config.json; it holds GGUF files ({shown}{more}): give one of them")
        }
    }
}

/// Four bytes as hex and as text where printable: `7f 45 4c 46 ("\x7fELF")`.
fn show_magic(bytes: &[u8]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let text: String = bytes.iter().flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    format!("{} \"{text}\"", hex.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(path: &Path) -> String {
        locate(path).unwrap_err().to_string()
    }

    #[test]
    fn gguf_files_are_told_by_their_magic_and_directories_by_config_json() {
        let dir = tempfile::tempdir().unwrap();
        let gguf = dir.path().join("model.bin");
        std::fs::write(&gguf, b"GGUF\x03\0\0\0").unwrap();
        assert_eq!(locate(&gguf).unwrap(), ModelPath::Gguf);
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        assert_eq!(locate(dir.path()).unwrap(), ModelPath::HfDir);
    }

    #[test]
    fn refusals_say_what_was_found() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope/model.gguf");
        assert_eq!(message(&missing), format!("{}: no such file or directory", missing.display()));

        let elf = dir.path().join("model.gguf");
        std::fs::write(&elf, b"\x7fELF\x02\x01").unwrap();
        let msg = message(&elf);
        assert_eq!(
            msg,
            format!(
                "{}: not a GGUF file (magic 7f 45 4c 46 \"\\x7fELF\"), and not a directory holding config.json",
                elf.display()
            )
        );
        std::fs::write(&elf, b"GG").unwrap();
        assert!(message(&elf).contains("not a GGUF file (2 bytes long)"));
        std::fs::write(&elf, b"").unwrap();
        assert!(message(&elf).contains("not a GGUF file (an empty file)"));
        let config = dir.path().join("config.json");
        std::fs::write(&config, "{}").unwrap();
        assert!(message(&config).ends_with("; pass the directory holding it"), "{}", message(&config));

        let empty = tempfile::tempdir().unwrap();
        assert!(message(empty.path()).contains("a directory without config.json: not a Hugging Face checkpoint"));
        std::fs::write(empty.path().join("b.gguf"), b"GGUF").unwrap();
        std::fs::write(empty.path().join("a.GGUF"), b"GGUF").unwrap();
        let msg = message(empty.path());
        assert!(msg.contains("it holds GGUF files (a.GGUF, b.gguf): give one of them"), "{msg}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("model.gguf");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || tx.send(message(&p)));
        let msg = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("opening a FIFO blocked");
        assert_eq!(msg, format!("{}: not a regular file (it is a FIFO)", fifo.display()));
    }
}
