//! A loopback stand-in for the Hugging Face hub: model info and tree listings, `resolve`
//! downloads (LFS files redirected to a second "CDN" origin), `Range`, and faults a test can
//! switch on per file (a flipped byte, a cut or long body, redirect loops, unsafe names).

#![allow(dead_code)]

use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One file of a fake repo.
#[derive(Clone)]
pub struct FakeFile {
    pub path: String,
    pub bytes: Vec<u8>,
    pub lfs: bool,
}

/// A fake repo at one commit.
#[derive(Clone)]
pub struct FakeRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<FakeFile>,
}

impl FakeRepo {
    pub fn new(id: &str, files: &[(&str, &[u8], bool)]) -> FakeRepo {
        let commit = hex(&Sha1::digest(id.as_bytes()));
        let files =
            files.iter().map(|(p, b, lfs)| FakeFile { path: p.to_string(), bytes: b.to_vec(), lfs: *lfs }).collect();
        FakeRepo { id: id.to_string(), commit, files }
    }
}

/// What the stand-in does wrong for one file.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The served bytes differ from the listed hash in one byte.
    FlipByte,
    /// The first `times` responses end after this many bytes (the header says the full length).
    Cut { after: usize, times: usize },
    /// Extra bytes after the file (Content-Length says so too).
    Longer(usize),
    /// Extra bytes after the file and no Content-Length (the body ends when the connection does).
    LongerNoLength(usize),
    /// Redirects forever.
    RedirectLoop,
    /// Redirects to a file:// URL.
    RedirectFile,
}

/// A request the stand-in saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub cdn: bool,
    pub path: String,
    pub authorization: Option<String>,
    pub range: Option<String>,
}

#[derive(Default)]
struct State {
    repos: Vec<FakeRepo>,
    faults: HashMap<String, Fault>,
    served: HashMap<String, usize>,
    extra_names: Vec<String>,
    listing_padding: usize,
    page_size: Option<usize>,
    log: Vec<Seen>,
}

/// The running stand-in (two loopback listeners: the hub and its CDN).
pub struct HubServer {
    state: Arc<Mutex<State>>,
    hub: String,
    cdn: String,
}

impl HubServer {
    pub fn start(repos: Vec<FakeRepo>) -> HubServer {
        let state = Arc::new(Mutex::new(State { repos, ..State::default() }));
        let cdn = listen(&state, None);
        let hub = listen(&state, Some(cdn.clone()));
        HubServer { state, hub, cdn }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// The hub's base URL (`HF_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        self.hub.clone()
    }

    /// Makes `path` misbehave.
    pub fn fault(&self, path: &str, f: Fault) {
        self.with(|s| s.faults.insert(path.to_string(), f));
    }

    /// Adds a name to every tree listing.
    pub fn extra_name(&self, name: &str) {
        self.with(|s| s.extra_names.push(name.to_string()));
    }

    /// Pads every tree listing with this many bytes of whitespace.
    pub fn pad_listing(&self, bytes: usize) {
        self.with(|s| s.listing_padding = bytes);
    }

    /// Splits tree listings into pages of `n` entries, linked by `Link: rel="next"`.
    pub fn paginate(&self, n: usize) {
        self.with(|s| s.page_size = Some(n));
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Seen> {
        self.with(|s| s.log.clone())
    }
}

/// Starts a listener: the hub (redirecting LFS files to `cdn`) or, without `cdn`, the CDN.
fn listen(state: &Arc<Mutex<State>>, cdn: Option<String>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state = state.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let state = state.clone();
            let cdn = cdn.clone();
            std::thread::spawn(move || {
                let _ = serve(conn, &state, cdn.as_deref());
            });
        }
    });
    url
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn sha256(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

pub fn git_oid(b: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", b.len()).as_bytes());
    h.update(b);
    hex(&h.finalize())
}

struct Request {
    path: String,
    query: String,
    headers: HashMap<String, String>,
}

fn read_request(conn: &mut TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let target = line.split_whitespace().nth(1)?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    Some(Request { path: path.to_string(), query: query.to_string(), headers })
}

fn respond(conn: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8], length: Option<usize>) {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(n) = length {
        head.push_str(&format!("Content-Length: {n}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body);
    let _ = conn.flush();
}

fn serve(mut conn: TcpStream, state: &Arc<Mutex<State>>, cdn_url: Option<&str>) -> Option<()> {
    let req = read_request(&mut conn)?;
    let cdn = cdn_url.is_none();
    let mut st = state.lock().unwrap();
    st.log.push(Seen {
        cdn,
        path: req.path.clone(),
        authorization: req.headers.get("authorization").cloned(),
        range: req.headers.get("range").cloned(),
    });
    let Some(cdn_url) = cdn_url else {
        return serve_blob(&mut conn, &mut st, req.path.strip_prefix("/blobs/")?, &req);
    };
    if let Some(rest) = req.path.strip_prefix("/api/models/") {
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let id = format!("{}/{}", parts.first()?, parts.get(1)?);
        let Some(repo) = st.repos.iter().find(|r| r.id == id).cloned() else {
            respond(&mut conn, "404 Not Found", &[], b"{\"error\":\"Repository not found\"}", Some(31));
            return Some(());
        };
        return match *parts.get(2)? {
            "revision" => {
                let siblings: Vec<_> = repo.files.iter().map(|f| serde_json::json!({"rfilename": f.path})).collect();
                let body = serde_json::json!({"id": repo.id, "sha": repo.commit, "siblings": siblings}).to_string();
                respond(&mut conn, "200 OK", &[], body.as_bytes(), Some(body.len()));
                Some(())
            }
            "tree" => serve_tree(&mut conn, &st, &repo, &req),
            _ => None,
        };
    }
    let parts: Vec<&str> = req.path.trim_start_matches('/').splitn(5, '/').collect();
    let id = format!("{}/{}", parts.first()?, parts.get(1)?);
    let file_path = parts.get(4)?.replace("%20", " ");
    let Some(repo) = st.repos.iter().find(|r| r.id == id).cloned() else {
        respond(&mut conn, "404 Not Found", &[], b"", Some(0));
        return Some(());
    };
    let Some(file) = repo.files.iter().find(|f| f.path == file_path).cloned() else {
        respond(&mut conn, "404 Not Found", &[], b"", Some(0));
        return Some(());
    };
    let commit = ("X-Repo-Commit", repo.commit.clone());
    match st.faults.get(&file.path) {
        Some(Fault::RedirectLoop) => {
            respond(&mut conn, "302 Found", &[("Location", req.path.clone())], b"", Some(0));
            return Some(());
        }
        Some(Fault::RedirectFile) => {
            respond(&mut conn, "302 Found", &[("Location", "file:///etc/passwd".into())], b"", Some(0));
            return Some(());
        }
        _ => {}
    }
    if file.lfs {
        let sha = sha256(&file.bytes);
        let loc = format!("{cdn_url}/blobs/{sha}?path={}", file.path);
        let headers = [
            commit,
            ("Location", loc),
            ("X-Linked-Etag", format!("\"{sha}\"")),
            ("X-Linked-Size", file.bytes.len().to_string()),
        ];
        respond(&mut conn, "302 Found", &headers, b"", Some(0));
        Some(())
    } else {
        serve_bytes(&mut conn, &mut st, &file, &req)
    }
}

fn serve_tree(conn: &mut TcpStream, st: &State, repo: &FakeRepo, req: &Request) -> Option<()> {
    let mut entries: Vec<serde_json::Value> = Vec::new();
    for f in &repo.files {
        let mut e =
            serde_json::json!({"type": "file", "path": f.path, "size": f.bytes.len(), "oid": git_oid(&f.bytes)});
        if f.lfs {
            e["lfs"] = serde_json::json!({"oid": sha256(&f.bytes), "size": f.bytes.len(), "pointerSize": 134});
            e["oid"] = serde_json::json!(git_oid(format!("pointer {}", f.path).as_bytes()));
        }
        entries.push(e);
    }
    for n in &st.extra_names {
        entries.push(serde_json::json!({"type": "file", "path": n, "size": 1, "oid": git_oid(b"x")}));
    }
    let start: usize =
        req.query.split('&').find_map(|kv| kv.strip_prefix("cursor=")).and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut headers = Vec::new();
    if let Some(n) = st.page_size {
        let end = (start + n).min(entries.len());
        if end < entries.len() {
            headers.push((
                "Link",
                format!("<http://{}{}?recursive=true&cursor={end}>; rel=\"next\"", req.headers.get("host")?, req.path),
            ));
        }
        entries = entries[start..end].to_vec();
    }
    let mut body = serde_json::Value::Array(entries).to_string();
    body.push_str(&" ".repeat(st.listing_padding));
    respond(conn, "200 OK", &headers, body.as_bytes(), Some(body.len()));
    Some(())
}

fn serve_blob(conn: &mut TcpStream, st: &mut State, sha: &str, req: &Request) -> Option<()> {
    let file = st.repos.iter().flat_map(|r| r.files.iter()).find(|f| f.lfs && sha256(&f.bytes) == sha).cloned()?;
    serve_bytes(conn, st, &file, req)
}

fn serve_bytes(conn: &mut TcpStream, st: &mut State, file: &FakeFile, req: &Request) -> Option<()> {
    let mut bytes = file.bytes.clone();
    let fault = st.faults.get(&file.path).cloned();
    let served = st.served.entry(file.path.clone()).or_insert(0);
    *served += 1;
    let nth = *served;
    match fault {
        Some(Fault::FlipByte) => {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x01
        }
        Some(Fault::Longer(n)) | Some(Fault::LongerNoLength(n)) => bytes.extend(std::iter::repeat_n(b'!', n)),
        _ => {}
    }
    let etag = ("ETag", format!("\"{}\"", if file.lfs { sha256(&file.bytes) } else { git_oid(&file.bytes) }));
    let from: usize = req
        .headers
        .get("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let total = bytes.len();
    let body = bytes.get(from..)?.to_vec();
    let (status, mut headers) = if from > 0 {
        ("206 Partial Content", vec![etag, ("Content-Range", format!("bytes {from}-{}/{total}", total - 1))])
    } else {
        ("200 OK", vec![etag])
    };
    headers.push(("Accept-Ranges", "bytes".into()));
    match fault {
        Some(Fault::Cut { after, times }) if nth <= times => {
            let cut = after.min(body.len());
            respond(conn, status, &headers, &body[..cut], Some(body.len()));
        }
        Some(Fault::LongerNoLength(_)) => respond(conn, status, &headers, &body, None),
        _ => respond(conn, status, &headers, &body, Some(body.len())),
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let mut sink = [0u8; 1];
    let _ = conn.read(&mut sink);
    Some(())
}
