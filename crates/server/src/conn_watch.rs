//! What one connection is doing, for its timeouts and for choosing which connection to close
//! when the cap is reached: reading a request head, idle between requests, or busy with a
//! request (and, while busy, whether its body is still arriving and whether its writes have
//! stalled). The socket wrapper and the
//! response body wrapper report to it; the connection's task asks it for its deadline.

use crate::conn::ConnLimits;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

#[derive(Debug)]
struct State {
    /// Requests whose response has not been sent to its end.
    busy: usize,
    /// Not busy, and a request head is being read (from connecting, or from the first byte
    /// after the connection went idle).
    reading_head: bool,
    /// When the head or idle phase began.
    since: Instant,
    /// When writes began to wait for the client to read, while they still do.
    write_blocked: Option<Instant>,
    /// When the request's head was read, while its body is still arriving.
    body_since: Option<Instant>,
}

/// One connection's phase, shared by its socket, its response bodies and its task.
#[derive(Debug)]
pub(crate) struct ConnWatch {
    state: Mutex<State>,
    /// The deadline may have come nearer: the task recomputes it.
    pub(crate) wake: Notify,
    /// Chosen to make room under the cap: the task drops the connection.
    pub(crate) close: Notify,
}

impl ConnWatch {
    /// A connection just accepted: reading its first request head.
    pub(crate) fn new() -> Arc<ConnWatch> {
        let state = State { busy: 0, reading_head: true, since: Instant::now(), write_blocked: None, body_since: None };
        Arc::new(ConnWatch { state: Mutex::new(state), wake: Notify::new(), close: Notify::new() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the connection must be closed if nothing changes: the header-read timeout while a
    /// head is read, the idle timeout between requests and while a response's writes stall,
    /// the body-read timeout while a body arrives, none while a request runs.
    pub(crate) fn deadline(&self, limits: &ConnLimits) -> Option<Instant> {
        let s = self.lock();
        match (s.busy, s.reading_head) {
            (0, true) => Some(s.since + limits.header_read_timeout),
            (0, false) => Some(s.since + limits.idle_timeout),
            _ => {
                let write = s.write_blocked.map(|t| t + limits.idle_timeout);
                let body = s.body_since.map(|t| t + limits.body_read_timeout);
                write.into_iter().chain(body).min()
            }
        }
    }

    /// Since when the connection has waited for a request (head or idle) or for its body;
    /// `None` while a request runs.
    pub(crate) fn waiting_since(&self) -> Option<Instant> {
        let s = self.lock();
        if s.busy == 0 { Some(s.since) } else { s.body_since }
    }

    /// A request's body began to arrive (its head was read).
    pub(crate) fn body_started(&self) {
        self.lock().body_since = Some(Instant::now());
        self.wake.notify_one();
    }

    /// The request's body has arrived (or its response is ready, which reads no more of it).
    pub(crate) fn body_done(&self) {
        self.lock().body_since = None;
    }

    /// Bytes arrived: an idle connection starts reading a head.
    fn on_read(&self) {
        let mut s = self.lock();
        if s.busy == 0 && !s.reading_head {
            s.reading_head = true;
            s.since = Instant::now();
            drop(s);
            self.wake.notify_one();
        }
    }

    /// A write could not go on (`blocked`) or went on.
    fn on_write(&self, blocked: bool) {
        let mut s = self.lock();
        match (blocked, s.write_blocked.is_some()) {
            (true, false) => {
                s.write_blocked = Some(Instant::now());
                drop(s);
                self.wake.notify_one();
            }
            (false, true) => s.write_blocked = None,
            _ => {}
        }
    }

    /// A request's head was read: busy until the guard (held by its response body) drops.
    pub(crate) fn enter(self: &Arc<Self>) -> BusyGuard {
        self.lock().busy += 1;
        BusyGuard(self.clone())
    }
}

/// Keeps a connection busy while a request runs and its response is sent.
#[derive(Debug)]
pub(crate) struct BusyGuard(Arc<ConnWatch>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.busy = s.busy.saturating_sub(1);
        if s.busy == 0 {
            s.reading_head = false;
            s.since = Instant::now();
            s.write_blocked = None;
            s.body_since = None;
            drop(s);
            self.0.wake.notify_one();
        }
    }
}

/// A socket that reports reads and stalled writes to its connection's watch.
pub(crate) struct Watched<T> {
    io: T,
    watch: Arc<ConnWatch>,
}

impl<T> Watched<T> {
    /// `io` reporting to `watch`.
    pub(crate) fn new(io: T, watch: Arc<ConnWatch>) -> Self {
        Watched { io, watch }
    }

    fn written<R>(&self, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        self.watch.on_write(r.is_pending());
        r
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.watch.on_read();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.written(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.written(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.written(r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A response body that keeps its connection busy until it has been sent to its end.
pub(crate) struct Guarded {
    inner: Body,
    guard: Option<BusyGuard>,
}

impl Guarded {
    /// `inner`, releasing `guard` at its end.
    pub(crate) fn new(inner: Body, guard: BusyGuard) -> Self {
        Guarded { inner, guard: Some(guard) }
    }
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) {
            this.guard = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_secs(2),
            body_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(50),
            max_connections: 8,
        }
    }

    #[test]
    fn phases_set_the_deadline() {
        let w = ConnWatch::new();
        let head = w.deadline(&limits()).unwrap();
        assert!(head <= Instant::now() + Duration::from_secs(2), "a new connection reads a head");
        let guard = w.enter();
        assert_eq!(w.deadline(&limits()), None, "no deadline while a request runs");
        assert_eq!(w.waiting_since(), None);
        w.on_write(true);
        assert!(w.deadline(&limits()).is_some(), "a stalled write has one");
        w.on_write(false);
        assert_eq!(w.deadline(&limits()), None);
        drop(guard);
        let idle = w.deadline(&limits()).unwrap();
        assert!(idle > Instant::now() + Duration::from_secs(40), "idle after the response");
        assert!(w.waiting_since().is_some());
        w.on_read();
        assert!(w.deadline(&limits()).unwrap() <= Instant::now() + Duration::from_secs(2), "a byte starts a head");
    }

    #[test]
    fn a_body_still_arriving_has_a_deadline_and_counts_as_waiting() {
        let w = ConnWatch::new();
        let guard = w.enter();
        w.body_started();
        let d = w.deadline(&limits()).unwrap();
        assert!(d <= Instant::now() + Duration::from_secs(5), "the body-read timeout runs");
        assert!(d > Instant::now() + Duration::from_secs(3));
        assert!(w.waiting_since().is_some(), "closable under the cap");
        w.body_done();
        assert_eq!(w.deadline(&limits()), None, "the request runs");
        assert_eq!(w.waiting_since(), None);
        w.body_started();
        drop(guard);
        assert!(w.deadline(&limits()).unwrap() > Instant::now() + Duration::from_secs(40), "idle after the response");
    }
}
