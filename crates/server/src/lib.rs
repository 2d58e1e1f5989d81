//! The OpenAI-compatible HTTP server (axum + tokio): routes, SSE, request checks at the trust
//! boundary, chat templates, metrics. It owns JSON, templates and tokenization; the engine
//! thread only sees checked native requests (DESIGN.md, "Layers").

mod api;
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

/// Where to listen.
#[derive(Debug, Clone)]
pub struct Listen {
    /// Host name or address.
    pub host: String,
    /// Port; 0 picks a free one.
    pub port: u16,
}

/// Serves until SIGINT or SIGTERM, then stops accepting, cancels in-flight work through the
/// engine and returns. `on_ready` gets the bound address once the socket listens.
pub fn run(
    engine: EngineHandle,
    model: ModelInfo,
    template: Option<ChatTemplate>,
    limits: Limits,
    listen: &Listen,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tensorfold-http").build()?;
    let state = Arc::new(AppState::new(engine, model, template, limits));
    let result = rt.block_on(serve(state, listen, on_ready));
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(state: Arc<AppState>, listen: &Listen, on_ready: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind((listen.host.as_str(), listen.port)).await?;
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
