//! One file from the hub into the cache, verified first: streamed into `blobs/<hash>.incomplete`
//! while it is hashed, cut at the listed size (a longer body is refused), resumed with `Range`
//! after a cut (a bounded number of requests), then checked whole against the listed hash and
//! only then renamed to `blobs/<hash>`. Whatever fails deletes the partial file.

use crate::api::RemoteFile;
use crate::error::{HubError, Result};
use crate::http::Client;
use crate::progress::Progress;
use crate::verify::Hasher;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Where one file comes from and goes to.
pub struct Transfer<'a> {
    /// The resolve URL of the file at the pulled commit.
    pub url: String,
    /// The file as listed.
    pub file: &'a RemoteFile,
    /// `blobs/<hash>.incomplete`.
    pub incomplete: &'a Path,
    /// `blobs/<hash>`.
    pub blob: &'a Path,
    /// `ORG/NAME: path`, for messages.
    pub what: String,
}

/// Fetches, verifies and stores `t`'s file; at most `max_attempts` requests.
pub fn fetch(client: &Client, t: &Transfer, max_attempts: usize, progress: &mut dyn Progress) -> Result<()> {
    let result = fetch_into(client, t, max_attempts, progress);
    if result.is_err() {
        let _ = fs::remove_file(t.incomplete);
    }
    result
}

fn fetch_into(client: &Client, t: &Transfer, max_attempts: usize, progress: &mut dyn Progress) -> Result<()> {
    let size = t.file.size;
    let io = |e| HubError::io(t.incomplete, e);
    let mut out =
        OpenOptions::new().create(true).truncate(false).read(true).write(true).open(t.incomplete).map_err(io)?;
    let (mut pos, mut hasher) = resume_point(&mut out, t)?;
    progress.position(&t.file.path, size, pos);
    let mut attempts = 0;
    let mut last_error = None;
    while attempts < max_attempts && (pos < size || (size == 0 && attempts == 0)) {
        attempts += 1;
        let mut reply = match client.get(&t.url, Some(pos), &t.what) {
            Ok(r) => r,
            Err(e @ HubError::Network { .. }) => {
                last_error = Some(e.to_string());
                continue;
            }
            Err(e) => return Err(e),
        };
        match reply.response.status().as_u16() {
            200 => {
                if pos > 0 {
                    (pos, hasher) = (0, Hasher::new(&t.file.digest, size));
                    out.set_len(0).map_err(io)?;
                    out.seek(SeekFrom::Start(0)).map_err(io)?;
                    progress.position(&t.file.path, size, 0);
                }
            }
            206 => check_content_range(&reply.response, pos, t)?,
            status => return Err(HubError::Status { what: t.what.clone(), host: reply.origin, status }),
        }
        let mut body = reply.response.body_mut().as_reader();
        match copy_capped(&mut body, &mut out, &mut hasher, &mut pos, size, t, progress) {
            Ok(()) => {}
            Err(Cut::Io(e)) => return Err(io(e)),
            Err(Cut::Read(why)) => last_error = Some(why),
            Err(Cut::Overlong) => {
                return Err(HubError::Length {
                    file: t.what.clone(),
                    why: format!("the body is longer than the {size} bytes listed"),
                });
            }
        }
    }
    if pos < size {
        let why = last_error.map(|e| format!(" (last: {e})")).unwrap_or_default();
        return Err(HubError::Length {
            file: t.what.clone(),
            why: format!("{pos} of {size} listed bytes arrived in {attempts} requests{why}"),
        });
    }
    out.sync_data().map_err(io)?;
    drop(out);
    let algo = hasher.algo();
    let found = hasher.finish();
    let expected = t.file.digest.blob_name();
    if found != expected {
        return Err(HubError::HashMismatch { file: t.what.clone(), algo, expected: expected.to_string(), found });
    }
    fs::rename(t.incomplete, t.blob).map_err(|e| HubError::io(t.blob, e))
}

/// The bytes already in `out` from an earlier, interrupted run (hashed again), or 0 when it
/// holds more than the listing says.
fn resume_point(out: &mut File, t: &Transfer) -> Result<(u64, Hasher)> {
    let io = |e| HubError::io(t.incomplete, e);
    let mut hasher = Hasher::new(&t.file.digest, t.file.size);
    let have = out.metadata().map_err(io)?.len();
    if have > t.file.size {
        out.set_len(0).map_err(io)?;
        return Ok((0, hasher));
    }
    let mut buf = vec![0u8; 1 << 16];
    let mut read = 0u64;
    while read < have {
        let n = out.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        read += n as u64;
    }
    out.seek(SeekFrom::Start(read)).map_err(io)?;
    out.set_len(read).map_err(io)?;
    Ok((read, hasher))
}

/// A 206 must start exactly where the partial file ends.
fn check_content_range(r: &ureq::http::Response<ureq::Body>, pos: u64, t: &Transfer) -> Result<()> {
    let range = r.headers().get("content-range").and_then(|v| v.to_str().ok()).unwrap_or("");
    if range.strip_prefix("bytes ").and_then(|s| s.split('-').next()) == Some(pos.to_string().as_str()) {
        Ok(())
    } else {
        Err(HubError::Network {
            what: t.what.clone(),
            why: format!("asked for bytes from {pos}, the server sent {:?}", range.escape_debug().to_string()),
        })
    }
}

enum Cut {
    /// Writing the partial file failed.
    Io(std::io::Error),
    /// The body stopped early (the connection was cut, a read timed out).
    Read(String),
    /// More bytes than listed.
    Overlong,
}

/// Copies a body into `out`, never past `size` bytes in all.
fn copy_capped(
    body: &mut impl Read,
    out: &mut File,
    hasher: &mut Hasher,
    pos: &mut u64,
    size: u64,
    t: &Transfer,
    progress: &mut dyn Progress,
) -> std::result::Result<(), Cut> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Cut::Read(e.to_string())),
        };
        if *pos + n as u64 > size {
            return Err(Cut::Overlong);
        }
        out.write_all(&buf[..n]).map_err(Cut::Io)?;
        hasher.update(&buf[..n]);
        *pos += n as u64;
        progress.position(&t.file.path, size, *pos);
    }
}
