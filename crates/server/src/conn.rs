//! The accept loop: HTTP/1.1 connections served by hyper with the limits `axum::serve` lacks. A
//! request head must arrive within the header-read timeout and its body within the body-read
//! timeout, a kept-alive connection may wait for its next request (or a response for its client
//! to read on) up to the idle timeout, and at most `max_connections` are open: past that the
//! connection waiting longest for a request or its body is closed to make room, or, when every
//! one is busy, the new one. Accept errors (EMFILE and the like) back off briefly instead of
//! ending or spinning the loop.

use crate::conn_body::WatchedBody;
use crate::conn_watch::{ConnWatch, Guarded, Watched};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// How long to wait after an accept error that is not the client's (EMFILE, ENFILE, ENOBUFS).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Accept errors are logged at most this often.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);
/// Longest the loop waits for a connection it closed to give its slot back.
const EVICT_WAIT: Duration = Duration::from_secs(1);
/// The cap's ceiling (the semaphore counts in `u32`).
const MAX_CONNECTIONS: usize = 1 << 24;

/// Limits on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Longest a client may take to send a request head, from connecting (a connection's first
    /// request) or from the head's first byte (later ones).
    pub header_read_timeout: Duration,
    /// Longest a client may take to send a request body, from the end of its head.
    pub body_read_timeout: Duration,
    /// Longest a kept-alive connection waits for its next request, and longest a response
    /// waits for its client to read.
    pub idle_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

/// Parses a duration: seconds (`10`, `0.5`) or a number with `s` or `ms` (`10s`, `500ms`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (t.strip_suffix('s').unwrap_or(t), 1.0),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("'{s}' is not a duration such as 10, 10s or 500ms"))?;
    let secs = v * scale;
    if !(secs > 0.0 && secs <= 1e9) {
        return Err(format!("'{s}': expected a duration greater than 0"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Connections open now, by id, for choosing which one to close under the cap.
#[derive(Default)]
struct Table {
    conns: Mutex<HashMap<u64, Arc<ConnWatch>>>,
    next_id: AtomicU64,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<ConnWatch>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, w: Arc<ConnWatch>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, w);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the connection that has waited longest for a request or its body; false when all
    /// are busy.
    fn close_longest_waiting(&self) -> bool {
        let mut conns = self.lock();
        let victim = conns.iter().filter_map(|(&id, w)| Some((w.waiting_since()?, id))).min();
        match victim.and_then(|(_, id)| conns.remove(&id)) {
            Some(w) => {
                w.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Serves `router` on `listener` until `stop` turns true, then stops accepting, lets every
/// connection end its response (in-flight work is cancelled by the caller) and returns once
/// all are closed.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
) {
    let permits = limits.max_connections.clamp(1, MAX_CONNECTIONS);
    let slots = Arc::new(Semaphore::new(permits));
    let table = Arc::new(Table::default());
    let mut errors = AcceptErrors::default();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.wait_for(|s| *s) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                errors.back_off(&e).await;
                continue;
            }
        };
        let Some(slot) = room(&slots, &table).await else { continue };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_one(stream, router.clone(), limits, stop.clone(), table.clone(), slot));
    }
    drop(listener);
    let _ = slots.acquire_many(permits as u32).await;
}

/// A slot for a new connection: a free one, or the one a waiting connection gives back.
async fn room(slots: &Arc<Semaphore>, table: &Table) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Some(slot);
    }
    if !table.close_longest_waiting() {
        return None;
    }
    tokio::time::timeout(EVICT_WAIT, slots.clone().acquire_owned()).await.ok()?.ok()
}

/// One connection, holding its slot under the cap until its socket is closed.
async fn serve_one(
    stream: TcpStream,
    router: Router,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    table: Arc<Table>,
    slot: OwnedSemaphorePermit,
) {
    let watch = ConnWatch::new();
    let id = table.insert(watch.clone());
    drive(stream, router, &limits, stop, watch).await; // the socket is dropped in there
    table.remove(id);
    drop(slot);
}

/// hyper's HTTP/1.1 state machine over `stream`, raced against the watch's deadline, an
/// eviction and the stop signal (which lets the response in flight end, then closes).
async fn drive(
    stream: TcpStream,
    router: Router,
    limits: &ConnLimits,
    mut stop: watch::Receiver<bool>,
    watch: Arc<ConnWatch>,
) {
    let inner = TowerToHyperService::new(router);
    let w = watch.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = w.enter();
        let req = req.map(|body| WatchedBody::new(body, w.clone()));
        let response = hyper::service::Service::call(&inner, req);
        let body_watch = w.clone();
        async move {
            let r = response.await?;
            body_watch.body_done();
            Ok::<_, Infallible>(r.map(|body| Guarded::new(body, guard)))
        }
    });
    let io = TokioIo::new(Watched::new(stream, watch.clone()));
    let mut builder = http1::Builder::new();
    // The header-read timeout is the watch's: hyper's own would also run while a kept-alive
    // connection is idle, cutting the idle timeout down to it.
    builder.timer(TokioTimer::new()).header_read_timeout(None).keep_alive(true);
    let mut conn = pin!(builder.serve_connection(io, service));
    let mut stopping = false;
    loop {
        let deadline = watch.deadline(limits);
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = sleep_until(deadline) => {
                if watch.deadline(limits).is_some_and(|d| d <= Instant::now()) {
                    return;
                }
            }
            _ = watch.wake.notified() => {}
            _ = watch.close.notified() => return,
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Back-off and rate-limited logging for accept errors.
#[derive(Default)]
struct AcceptErrors {
    last_log: Option<Instant>,
    since_log: u64,
}

impl AcceptErrors {
    async fn back_off(&mut self, e: &std::io::Error) {
        use std::io::ErrorKind::*;
        // The client's own failures (it reset before we accepted): take the next one at once.
        if matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock) {
            return;
        }
        self.since_log += 1;
        if self.last_log.is_none_or(|t| t.elapsed() >= ACCEPT_LOG_EVERY) {
            tracing::warn!("accept failed ({} times since the last report): {e}; retrying", self.since_log);
            self.last_log = Some(Instant::now());
            self.since_log = 0;
        }
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_seconds_and_milliseconds() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "0", "-1", "ten", "5m", "nan", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_cap_closes_the_connection_waiting_longest_and_never_a_busy_one() {
        let table = Table::default();
        let (a, b) = (ConnWatch::new(), ConnWatch::new());
        let _busy = a.enter();
        table.insert(a.clone());
        table.insert(b.clone());
        assert!(table.close_longest_waiting(), "b waits for a request");
        assert!(!table.close_longest_waiting(), "only the busy a is left");
        assert_eq!(table.lock().len(), 1);
    }
}
