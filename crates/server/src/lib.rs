//! The OpenAI-compatible HTTP server (axum + tokio): routes, SSE, request checks at the trust
//! boundary, chat templates, metrics. It owns JSON, templates and tokenization; the engine
//! thread only sees checked native requests (DESIGN.md, "Layers").

mod access_log;
mod api;
pub mod auth;
mod body;
mod chat_ids;
mod conn;
mod conn_watch;
pub mod error;
mod fields;
mod generation;
pub mod metrics;
pub mod options;
pub mod request;
mod respond;
mod routes;
mod sessions;
pub mod state;
pub mod template;

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

/// Serves on `listener` (bound before the model loaded) until SIGINT or SIGTERM, then stops
/// accepting, cancels in-flight work through the engine and returns. `on_ready` gets the bound
/// address once requests are answered.
pub fn run(
    engine: EngineHandle,
    model: ModelInfo,
    template: Option<ChatTemplate>,
    limits: Limits,
    listener: std::net::TcpListener,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tensorfold-http").build()?;
    listener.set_nonblocking(true)?;
    let state = Arc::new(AppState::new(engine, model, template, limits));
    let (listener, report) = {
        let _entered = rt.enter();
        (tokio::net::TcpListener::from_std(listener)?, shutdown_report(state.clone())?)
    };
    rt.spawn(report);
    let result = rt.block_on(serve(state, listener, on_ready));
    rt.shutdown_timeout(Duration::from_secs(1));
    tracing::info!("stopped");
    result
}

/// Logs, on SIGINT or SIGTERM, how many requests the shutdown cancels. The handlers are
/// installed here, before the server starts, so no signal comes unseen.
fn shutdown_report(state: Arc<AppState>) -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutting down: {} requests in flight cancelled", state.requests_in_flight());
    })
}

async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    on_ready(listener.local_addr()?);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut connections =
        std::pin::pin!(conn::serve_connections(listener, routes::router(state.clone()), state.limits.conn, stopped));
    tokio::select! {
        _ = connections.as_mut() => return Ok(()),
        _ = shutdown_signal() => {}
    }
    state.shutting_down.store(true, Ordering::Relaxed);
    state.engine.shutdown();
    let _ = stop.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, connections).await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
