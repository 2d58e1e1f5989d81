//! The hash a file must have before it enters the cache: sha256 for LFS files, the git blob id
//! (sha1 of `"blob {len}\0"` then the bytes) for plain git files.

use crate::api::Digest;
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

/// A running hash of one file's bytes, of the kind its listing gives.
#[derive(Clone)]
pub enum Hasher {
    /// sha256 of the bytes.
    Sha256(Sha256),
    /// git's blob sha1.
    GitSha1(Sha1),
}

impl Hasher {
    /// A fresh hasher for a file of `size` bytes whose listed hash is `digest`.
    pub fn new(digest: &Digest, size: u64) -> Hasher {
        match digest {
            Digest::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Digest::GitSha1(_) => {
                let mut h = Sha1::new();
                h.update(format!("blob {size}\0").as_bytes());
                Hasher::GitSha1(h)
            }
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::GitSha1(h) => h.update(bytes),
        }
    }

    /// The name of the hash, for messages.
    pub fn algo(&self) -> &'static str {
        match self {
            Hasher::Sha256(_) => "sha256",
            Hasher::GitSha1(_) => "git blob sha1",
        }
    }

    /// The lowercase hex digest.
    pub fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::GitSha1(h) => hex(&h.finalize()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_id_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let mut h = Hasher::new(&Digest::GitSha1(String::new()), 6);
        h.update(b"hello\n");
        assert_eq!(h.finish(), "ce013625030ba8dba906f756967f9e9ca394464a");
    }

    #[test]
    fn sha256_of_empty() {
        let h = Hasher::new(&Digest::Sha256(String::new()), 0);
        assert_eq!(h.finish(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
