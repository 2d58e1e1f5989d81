//! A request body that tells its connection's watch when it has all arrived, so the body-read
//! timeout stops and the connection no longer counts as waiting.

use crate::conn_watch::ConnWatch;
use axum::body::{Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A request body reporting its end to its connection's watch.
pub(crate) struct WatchedBody {
    inner: Incoming,
    watch: Arc<ConnWatch>,
}

impl WatchedBody {
    /// `inner`, marking the body as arriving on `watch` unless it is already at its end.
    pub(crate) fn new(inner: Incoming, watch: Arc<ConnWatch>) -> Self {
        if !inner.is_end_stream() {
            watch.body_started();
        }
        WatchedBody { inner, watch }
    }
}

impl HttpBody for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        let ended = match &r {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            this.watch.body_done();
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
