//! Reasons a checkpoint is refused at load; each names the file and, where known, the tensor.

use std::path::PathBuf;
use thiserror::Error;

/// A checkpoint could not be loaded or failed validation.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The model path is neither a GGUF file nor a Hugging Face checkpoint directory.
    #[error("{}: {msg}", path.display())]
    Path {
        /// The path given.
        path: PathBuf,
        /// What was found there instead.
        msg: String,
    },
    /// A weights file is malformed.
    #[error(transparent)]
    Format(#[from] tf_formats::FormatError),
    /// The tokenizer is malformed or disagrees with the embedding table.
    #[error(transparent)]
    Tokenizer(#[from] tf_tokenize::TokenizeError),
    /// A config file is missing, malformed or nonsensical.
    #[error("{}: {msg}", file.display())]
    Config {
        /// The config file.
        file: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A tensor the family needs is absent.
    #[error("{}: tensor '{tensor}' is missing", dir.display())]
    Missing {
        /// The checkpoint.
        dir: PathBuf,
        /// The tensor name.
        tensor: String,
    },
    /// The checkpoint holds tensors the config never reads (another architecture or layer count?).
    #[error("{}: {} tensor(s) the config does not use: {}", dir.display(), tensors.len(), unused_list(tensors))]
    Unused {
        /// The checkpoint.
        dir: PathBuf,
        /// Their names, sorted.
        tensors: Vec<String>,
    },
    /// A tensor has the wrong shape.
    #[error("{}: tensor '{tensor}' has shape {found:?}, expected {expected:?}", file.display())]
    Shape {
        /// The file holding it.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor has a dtype this backend cannot use.
    #[error("{}: tensor '{tensor}': {msg}", file.display())]
    Dtype {
        /// The file holding it.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// An FP8 weight's scales disagree with it or with the quantization config.
    #[error("{}: tensor '{tensor}': {msg}", file.display())]
    Scale {
        /// The file holding the scales.
        file: PathBuf,
        /// The scale tensor's name.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// The architecture is not one TensorFold implements.
    #[error("{}: unsupported architecture '{}' (supported: {supported})", file.display(), tf_formats::show(arch))]
    Architecture {
        /// The config file.
        file: PathBuf,
        /// `architectures[0]` or `model_type`.
        arch: String,
        /// The known ones.
        supported: String,
    },
    /// The backend refused a tensor or an allocation.
    #[error("{0}")]
    Backend(#[from] tf_backend::BackendError),
}

/// The first few names, escaped, and how many more.
fn unused_list(names: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut list: Vec<String> = names.iter().take(SHOWN).map(|n| format!("'{}'", tf_formats::show(n))).collect();
    if names.len() > SHOWN {
        list.push(format!("and {} more", names.len() - SHOWN));
    }
    list.join(", ")
}
