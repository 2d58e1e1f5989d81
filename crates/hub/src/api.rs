//! The hub's listing of a repo at a revision: the commit (`/api/models/{repo}/revision/{rev}`)
//! and every file with its size and hash (`/api/models/{repo}/tree/{commit}?recursive=true`,
//! paginated by `Link: <...>; rel="next"`). The listing is input from outside: its size, page
//! count and file count are bounded and every name is checked before anything is fetched.

use crate::config::Limits;
use crate::error::{HubError, Result};
use crate::http::{Client, Reply, encode};
use crate::names::{RepoId, check_path, is_hex};
use serde::Deserialize;
use std::collections::HashSet;

/// What a file's bytes must hash to, as the listing gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Digest {
    /// An LFS file: the sha256 of its bytes (also its blob name in the cache).
    Sha256(String),
    /// A plain git file: its git blob id, the sha1 of `"blob {len}\0"` and its bytes.
    GitSha1(String),
}

impl Digest {
    /// The blob's name in the cache, as the Python client names it (the ETag it would get).
    pub fn blob_name(&self) -> &str {
        match self {
            Digest::Sha256(h) | Digest::GitSha1(h) => h,
        }
    }
}

/// One file of the listing.
#[derive(Debug, Clone)]
pub struct RemoteFile {
    /// Its path in the repo (checked).
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its hash.
    pub digest: Digest,
}

/// A repo at one commit.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The commit the revision points to (40 hex digits).
    pub commit: String,
    /// Every file.
    pub files: Vec<RemoteFile>,
}

impl Listing {
    /// The file at `path`, if listed.
    pub fn file(&self, path: &str) -> Option<&RemoteFile> {
        self.files.iter().find(|f| f.path == path)
    }
}

#[derive(Deserialize)]
struct Info {
    sha: Option<String>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    oid: Option<String>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    oid: String,
    size: u64,
}

/// Fetches and checks the listing of `repo` at `revision`.
pub fn fetch(client: &Client, repo: &RepoId, revision: &str, limits: &Limits) -> Result<Listing> {
    let base = format!("{}/api/models/{}", client.endpoint(), repo);
    let url = format!("{base}/revision/{}", encode(revision, false));
    let info: Info = read_json(client, repo, &url, "the repo's info", limits)?;
    let commit = info.sha.filter(|s| is_hex(s, 40)).ok_or_else(|| bad(repo, "the hub's answer has no commit hash"))?;
    let mut next = Some(format!("{base}/tree/{commit}?recursive=true"));
    let (mut files, mut paths, mut pages) = (Vec::new(), HashSet::new(), 0);
    while let Some(url) = next.take() {
        pages += 1;
        if pages > limits.max_pages {
            return Err(bad(repo, &format!("the listing has more than {} pages", limits.max_pages)));
        }
        let (entries, link): (Vec<Entry>, _) = read_json_link(client, repo, &url, limits)?;
        for e in entries {
            check_path(repo, &e.path)?;
            if e.kind != "file" {
                continue;
            }
            if files.len() >= limits.max_files {
                return Err(bad(repo, &format!("the listing has more than {} files", limits.max_files)));
            }
            if !paths.insert(e.path.clone()) {
                return Err(bad(repo, &format!("the listing names {:?} twice", e.path)));
            }
            files.push(remote_file(repo, e)?);
        }
        next = link;
    }
    Ok(Listing { commit, files })
}

/// One listed file with its hash checked for form.
fn remote_file(repo: &RepoId, e: Entry) -> Result<RemoteFile> {
    let (size, digest) = match e.lfs {
        Some(lfs) if is_hex(&lfs.oid, 64) => (lfs.size, Digest::Sha256(lfs.oid)),
        Some(_) => return Err(bad(repo, &format!("{:?}: the listing's sha256 is not 64 hex digits", e.path))),
        None => match e.oid {
            Some(oid) if is_hex(&oid, 40) => (e.size, Digest::GitSha1(oid)),
            _ => return Err(bad(repo, &format!("{:?}: the listing's git blob id is not 40 hex digits", e.path))),
        },
    };
    Ok(RemoteFile { path: e.path, size, digest })
}

fn bad(repo: &RepoId, what: &str) -> HubError {
    HubError::BadListing { repo: repo.to_string(), what: what.to_string() }
}

/// GETs `url` as JSON of at most `max_listing_bytes`, mapping 401/403/404 to their errors.
fn read_json<T: serde::de::DeserializeOwned>(
    client: &Client,
    repo: &RepoId,
    url: &str,
    what: &str,
    limits: &Limits,
) -> Result<T> {
    let mut reply = get_ok(client, repo, url, what)?;
    parse_body(repo, &mut reply, what, limits)
}

/// Like `read_json`, also returning the `Link` header's `rel="next"` URL.
fn read_json_link<T: serde::de::DeserializeOwned>(
    client: &Client,
    repo: &RepoId,
    url: &str,
    limits: &Limits,
) -> Result<(T, Option<String>)> {
    let what = "the repo's file listing";
    let mut reply = get_ok(client, repo, url, what)?;
    let link = reply.response.headers().get("link").and_then(|v| v.to_str().ok()).and_then(next_link);
    Ok((parse_body(repo, &mut reply, what, limits)?, link))
}

fn get_ok(client: &Client, repo: &RepoId, url: &str, what: &str) -> Result<Reply> {
    let reply = client.get(url, None, &format!("{repo}: {what}"))?;
    let endpoint = client.endpoint().to_string();
    match reply.response.status().as_u16() {
        200 => Ok(reply),
        404 => Err(HubError::NotFound {
            repo: repo.to_string(),
            endpoint,
            hint: " (check the name and the revision; a private repo needs HF_TOKEN)",
        }),
        status @ (401 | 403) => Err(HubError::Denied { repo: repo.to_string(), endpoint, status }),
        status => Err(HubError::Status { what: format!("{repo}: {what}"), host: reply.origin, status }),
    }
}

fn parse_body<T: serde::de::DeserializeOwned>(
    repo: &RepoId,
    reply: &mut Reply,
    what: &str,
    limits: &Limits,
) -> Result<T> {
    let max = limits.max_listing_bytes;
    let bytes = reply.response.body_mut().with_config().limit(max).read_to_vec().map_err(|e| match e {
        ureq::Error::BodyExceedsLimit(_) => bad(repo, &format!("{what} is over {max} bytes")),
        e => HubError::Network { what: format!("{repo}: {what}"), why: e.to_string() },
    })?;
    serde_json::from_slice(&bytes).map_err(|e| bad(repo, &format!("{what} is not the JSON the hub sends: {e}")))
}

/// The `rel="next"` target of a `Link` header.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let rel_next = params.split(';').any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"));
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        rel_next.then(|| target.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_header_next() {
        let h = r#"<https://h/api/models/a/b/tree/c?cursor=x>; rel="next", <https://h/p>; rel="prev""#;
        assert_eq!(next_link(h).as_deref(), Some("https://h/api/models/a/b/tree/c?cursor=x"));
        assert_eq!(next_link(r#"<https://h/p>; rel="prev""#), None);
    }
}
