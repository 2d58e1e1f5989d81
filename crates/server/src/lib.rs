//! The OpenAI-compatible HTTP server (axum + tokio): routes, SSE, request checks at the trust
//! boundary, chat templates, metrics. It owns JSON, templates and tokenization; the engine
//! thread only sees checked native requests (docs/architecture.md).

mod access_log;
mod allowed;
mod api;
pub mod auth;
mod body;
pub mod chat_ids;
mod conn;
mod conn_body;
mod conn_watch;
pub mod constraint;
pub mod cors;
pub mod error;
mod fields;
mod generation;
mod harmony;
mod histogram;
mod loading;
mod messages;
pub mod metrics;
mod noop;
pub mod openapi;
mod openapi_close;
pub mod options;
pub mod reasoning;
pub mod request;
mod respond;
mod responses;
mod responses_reply;
mod routes;
mod sessions;
pub mod state;
mod structured;
pub mod template;
mod tool_formats;
mod tools;
pub mod wire;

pub use conn::{ConnLimits, parse_duration};
pub use error::ApiError;
pub use options::{ServeArgs, options_table};
pub use state::{AppState, Limits, ModelInfo};
pub use template::ChatTemplate;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tf_engine::engine::EngineHandle;

/// How long in-flight responses get to end after a shutdown signal before the server exits.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often the server looks whether the engine stopped on its own (its fault ends the server).
const FAULT_POLL: Duration = Duration::from_millis(200);

/// A server that answers on its listener while the model loads (`/health` 503 with the load's
/// progress, other routes 503), then serves the model once [`Starting::serve`] gets it.
pub struct Starting {
    rt: tokio::runtime::Runtime,
    gate: Arc<loading::Gate>,
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    connections: tokio::task::JoinHandle<()>,
}

/// Starts answering on `listener` (bound before the model loads) with the loading answers, under
/// the connection limits `conn`; `progress` is what `/health` reports meanwhile.
pub fn start(
    listener: std::net::TcpListener,
    conn: ConnLimits,
    progress: Arc<tf_core::LoadProgress>,
) -> std::io::Result<Starting> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tensorfold-http").build()?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = {
        let _entered = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    let (router, gate) = loading::gated(progress);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let connections = rt.spawn(conn::serve_connections(listener, router, conn, stopped));
    Ok(Starting { rt, gate, addr, stop, connections })
}

impl Starting {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves the model until SIGINT or SIGTERM, then stops accepting, cancels in-flight work
    /// through the engine and returns. `on_ready` gets the bound address once requests are
    /// answered.
    pub fn serve(
        self,
        engine: EngineHandle,
        model: ModelInfo,
        template: Option<ChatTemplate>,
        limits: Limits,
        on_ready: impl FnOnce(SocketAddr),
    ) -> std::io::Result<()> {
        let Starting { rt, gate, addr, stop, connections } = self;
        let state = Arc::new(AppState::new(engine, model, template, limits));
        let signals = {
            let _entered = rt.enter();
            shutdown_signals()?
        };
        let _ = gate.ready.set(routes::router(state.clone()));
        on_ready(addr);
        let result = rt.block_on(serve(state, connections, stop, signals));
        rt.shutdown_timeout(Duration::from_secs(1));
        tracing::info!("stopped");
        result
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed here, before the server starts, so
/// no signal comes unseen.
fn shutdown_signals() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

async fn serve(
    state: Arc<AppState>,
    mut connections: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
    signals: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let stats = state.engine.stats.clone();
    let fault = async move {
        loop {
            if let Some(why) = stats.fault() {
                return why;
            }
            tokio::time::sleep(FAULT_POLL).await;
        }
    };
    let mut failed = None;
    tokio::select! {
        _ = &mut connections => return Ok(()),
        _ = signals => {}
        why = fault => failed = Some(why),
    }
    // Logged before the engine cancels them, and before the runtime can stop.
    tracing::info!("shutting down: {} requests in flight cancelled", state.requests_in_flight());
    state.shutting_down.store(true, Ordering::Relaxed);
    state.engine.shutdown();
    let _ = stop.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, connections).await;
    match failed {
        Some(why) => Err(std::io::Error::other(format!("the engine stopped: {why}"))),
        None => Ok(()),
    }
}
