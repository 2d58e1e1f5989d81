//! `pull`: the listing first (every name checked before a byte is fetched), the choice of files,
//! the free space against their sizes, then each file verified into `blobs/`, linked from
//! `snapshots/<commit>/`, and last the revision's `refs/` entry.

use crate::api::{self, Listing, RemoteFile};
use crate::cache::RepoCache;
use crate::config::HubConfig;
use crate::error::{HubError, Result};
use crate::http::{Client, encode};
use crate::lock;
use crate::progress::Progress;
use crate::select::{self, Choice, INDEX};
use crate::space;
use crate::spec::Spec;
use crate::transfer::{self, Transfer};
use std::fs;
use std::path::PathBuf;

/// What a pull left in the cache.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The snapshot directory, or the GGUF file in it.
    pub path: PathBuf,
    /// The commit pulled.
    pub commit: String,
    /// The files now in the snapshot, by path in the repo.
    pub files: Vec<String>,
    /// Bytes fetched over the network (files already cached excluded).
    pub fetched: u64,
}

/// Pulls what the engine needs of `spec` into `cfg.cache_dir`.
pub fn pull(spec: &Spec, cfg: &HubConfig, progress: &mut dyn Progress) -> Result<Pulled> {
    if cfg.offline {
        return Err(HubError::NotCached { repo: spec.to_string(), dir: cfg.cache_dir.clone() });
    }
    let client = Client::new(cfg)?;
    let listing = api::fetch(&client, &spec.repo, &spec.revision, &cfg.limits)?;
    let store =
        Store { client: &client, cache: RepoCache::new(&cfg.cache_dir, &spec.repo), spec, listing: &listing, cfg };
    let names: Vec<&str> = listing.files.iter().map(|f| f.path.as_str()).collect();
    let choice = select::choose(&spec.repo, &names, &spec.pick)?;
    let (mut wanted, path) = match &choice {
        Choice::Gguf(f) => (select::gguf_set(&spec.repo, &names, f)?, store.cache.snapshot(&listing.commit).join(f)),
        Choice::Checkpoint { files, .. } => (files.clone(), store.cache.snapshot(&listing.commit)),
    };
    let mut fetched = 0;
    if matches!(choice, Choice::Checkpoint { sharded: true, .. }) {
        let index = store.remote(INDEX)?;
        if index.size > cfg.limits.max_listing_bytes {
            return Err(store.bad(&format!("{INDEX} is over {} bytes", cfg.limits.max_listing_bytes)));
        }
        fetched += store.file(index, progress)?;
        let bytes = fs::read(store.cache.blob(index.digest.blob_name())).map_err(|e| HubError::io(INDEX, e))?;
        wanted.retain(|f| f != INDEX);
        wanted.extend(select::shards(&spec.repo, &bytes, &names)?);
    }
    let files = wanted.iter().map(|w| store.remote(w)).collect::<Result<Vec<_>>>()?;
    let needed: u64 = files.iter().filter(|f| !store.present(f)).map(|f| f.size).sum();
    space::ensure(&cfg.cache_dir, needed)?;
    progress.plan(&files.iter().map(|f| (f.path.clone(), f.size)).collect::<Vec<_>>());
    for f in &files {
        fetched += store.file(f, progress)?;
    }
    store.cache.write_ref(&spec.revision, &listing.commit)?;
    let mut files: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    if matches!(choice, Choice::Checkpoint { sharded: true, .. }) {
        files.push(INDEX.to_string());
    }
    Ok(Pulled { path, commit: listing.commit.clone(), files, fetched })
}

/// One pull's context for storing files.
struct Store<'a> {
    client: &'a Client,
    cache: RepoCache,
    spec: &'a Spec,
    listing: &'a Listing,
    cfg: &'a HubConfig,
}

impl Store<'_> {
    /// The listed file at `path`.
    fn remote(&self, path: &str) -> Result<&RemoteFile> {
        self.listing.file(path).ok_or_else(|| self.bad(&format!("the listing lacks {path:?}")))
    }

    fn bad(&self, what: &str) -> HubError {
        HubError::BadListing { repo: self.spec.repo.to_string(), what: what.to_string() }
    }

    /// Whether `f`'s blob is in the cache with the listed size.
    fn present(&self, f: &RemoteFile) -> bool {
        fs::metadata(self.cache.blob(f.digest.blob_name())).is_ok_and(|m| m.is_file() && m.len() == f.size)
    }

    /// Makes `f` present in the snapshot (fetching its blob under its lock when missing);
    /// returns the bytes fetched.
    fn file(&self, f: &RemoteFile, progress: &mut dyn Progress) -> Result<u64> {
        let name = f.digest.blob_name();
        let mut fetched = 0;
        if self.present(f) {
            progress.cached(&f.path, f.size);
        } else {
            let blob = self.cache.blob(name);
            let blobs = blob.parent().unwrap_or(self.cache.dir());
            fs::create_dir_all(blobs).map_err(|e| HubError::io(blobs, e))?;
            let _lock = lock::lock(&self.cache.lock_path(name))?;
            if self.present(f) {
                progress.cached(&f.path, f.size);
            } else {
                let _ = fs::remove_file(&blob);
                let url = format!(
                    "{}/{}/resolve/{}/{}",
                    self.client.endpoint(),
                    self.spec.repo,
                    self.listing.commit,
                    encode(&f.path, true)
                );
                let incomplete = self.cache.incomplete(name);
                let what = format!("{}: {}", self.spec.repo, f.path);
                let t = Transfer { url, file: f, incomplete: &incomplete, blob: &blob, what };
                transfer::fetch(self.client, &t, self.cfg.limits.max_attempts, progress)?;
                progress.finished(&f.path);
                fetched = f.size;
            }
        }
        self.cache.link(&self.listing.commit, &f.path, name)?;
        Ok(fetched)
    }
}
