//! `bench-serve`'s HTTP/1.1 client over tokio: loopback URLs only, one connection per request,
//! responses read as they arrive (chunked or sized), server-sent events handed out with the
//! instant their bytes were read.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Most bytes of a response head, or of a non-streamed body.
const MAX_HEAD: usize = 64 << 10;
/// Most bytes of one server-sent event.
const MAX_EVENT: usize = 16 << 20;

/// The socket address of `url` (`http://HOST:PORT`, an optional `/`); refused unless HOST is
/// `localhost` or a loopback address.
pub fn loopback(url: &str) -> Result<SocketAddr, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("'{url}' is not an http:// URL"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') {
        return Err(format!("'{url}': give the server's base URL, without a path"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, p),
        _ => return Err(format!("'{url}' has no port")),
    };
    let port: u16 = port.parse().map_err(|_| format!("'{url}': '{port}' is not a port"))?;
    let ip =
        match host {
            "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
            h => h.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().map_err(|_| {
                format!("only loopback servers are benchmarked: '{h}' is not localhost or an IP address")
            })?,
        };
    if !ip.is_loopback() {
        return Err(format!("only loopback servers are benchmarked: {ip} is not a loopback address"));
    }
    Ok(SocketAddr::new(ip, port))
}

/// How a response body ends.
enum Framing {
    Chunked,
    Length(usize),
    Close,
}

/// An open response: its status, then its body's bytes as they come.
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    reader: BufReader<TcpStream>,
    framing: Framing,
    done: bool,
}

/// Sends one request (`Connection: close`) and reads the response head.
pub async fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Result<Response, String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: */*\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    stream.write_all(&out).await.map_err(|e| format!("send: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut seen = 0;
    let mut status = None;
    let mut framing = Framing::Close;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).await.map_err(|e| format!("read head: {e}"))?;
        seen += n;
        if n == 0 || seen > MAX_HEAD {
            return Err("the response head was cut short or too long".into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        match status {
            None => status = l.split(' ').nth(1).and_then(|s| s.parse().ok()).or(Some(0)),
            Some(_) => {
                let Some((name, value)) = l.split_once(':') else { continue };
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                    framing = Framing::Chunked;
                } else if name == "content-length" {
                    framing = Framing::Length(value.parse().map_err(|_| "a bad Content-Length".to_string())?);
                }
            }
        }
    }
    Ok(Response { status: status.unwrap_or(0), reader, framing, done: false })
}

impl Response {
    /// The body's next piece as it arrives; `None` at its end.
    pub async fn next_piece(&mut self) -> Result<Option<Vec<u8>>, String> {
        if self.done {
            return Ok(None);
        }
        let io = |e: std::io::Error| format!("read body: {e}");
        match self.framing {
            Framing::Chunked => {
                let mut size_line = String::new();
                self.reader.read_line(&mut size_line).await.map_err(io)?;
                let hex = size_line.trim().split(';').next().unwrap_or("");
                let size = usize::from_str_radix(hex, 16).map_err(|_| format!("a bad chunk size '{hex}'"))?;
                if size > MAX_EVENT {
                    return Err(format!("a chunk of {size} bytes"));
                }
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).await.map_err(io)?;
                chunk.truncate(size);
                self.done = size == 0;
                Ok((!self.done).then_some(chunk))
            }
            Framing::Length(left) => {
                let mut buf = vec![0; left.min(MAX_HEAD)];
                let n = self.reader.read(&mut buf).await.map_err(io)?;
                buf.truncate(n);
                self.framing = Framing::Length(left - n);
                self.done = n == 0 || left == n;
                Ok((n > 0).then_some(buf))
            }
            Framing::Close => {
                let mut buf = vec![0; 16 << 10];
                let n = self.reader.read(&mut buf).await.map_err(io)?;
                buf.truncate(n);
                self.done = n == 0;
                Ok((n > 0).then_some(buf))
            }
        }
    }

    /// The whole body (at most 64 KiB), for the small non-streamed answers.
    pub async fn body(&mut self) -> Result<Vec<u8>, String> {
        let mut all = Vec::new();
        while let Some(p) = self.next_piece().await? {
            all.extend(p);
            if all.len() > MAX_HEAD {
                return Err("the response body is too long".into());
            }
        }
        Ok(all)
    }
}

/// Splits a body into server-sent events' `data:` payloads.
#[derive(Default)]
pub struct Events {
    buf: Vec<u8>,
}

impl Events {
    /// Takes `piece`, read at `at`; returns the payloads it completes, each with `at`.
    pub fn feed(&mut self, piece: &[u8], at: Instant) -> Result<Vec<(Vec<u8>, Instant)>, String> {
        self.buf.extend_from_slice(piece);
        let mut out = Vec::new();
        while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            for line in event.split(|&b| b == b'\n') {
                if let Some(data) = line.strip_prefix(b"data:") {
                    out.push((data.trim_ascii().to_vec(), at));
                }
            }
        }
        if self.buf.len() > MAX_EVENT {
            return Err("a server-sent event is too long".into());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_are_taken() {
        assert_eq!(loopback("http://127.0.0.1:8000").unwrap().port(), 8000);
        assert_eq!(loopback("http://localhost:9/").unwrap().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(loopback("http://[::1]:8000").unwrap().ip().is_loopback());
        assert!(loopback("http://127.8.9.1:80").is_ok());
        for bad in [
            "http://10.0.0.1:80",
            "http://example.com:80",
            "https://127.0.0.1:1",
            "http://127.0.0.1",
            "http://0.0.0.0:80",
        ] {
            assert!(loopback(bad).is_err(), "{bad}");
        }
        assert!(loopback("http://192.168.1.2:8000").unwrap_err().contains("only loopback"));
        assert!(loopback("http://127.0.0.1:80/v1").is_err());
    }

    #[test]
    fn events_split_across_pieces_come_out_whole() {
        let mut e = Events::default();
        let t = Instant::now();
        assert!(e.feed(b"data: {\"a\"", t).unwrap().is_empty());
        let got = e.feed(b":1}\n\ndata: [DONE]\n\n", t).unwrap();
        let payloads: Vec<&[u8]> = got.iter().map(|(p, _)| p.as_slice()).collect();
        assert_eq!(payloads, vec![b"{\"a\":1}".as_slice(), b"[DONE]".as_slice()]);
    }
}
