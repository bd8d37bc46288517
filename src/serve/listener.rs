//! The HTTP/1.1 accept loop of `nanollm serve` (hyper, as axum's own `serve` runs it), with
//! what `axum::serve` does not let us set: a time limit on reading request headers, so a
//! client that sends half its headers cannot hold a connection forever.
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;

/// Longest a client may take to send a request's headers (s); the connection then closes.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve `app` on `listener` until `shutdown` completes; then stop accepting and wait for
/// open connections to finish their requests (keep-alive off).
///
/// Errors: none (a failed accept, e.g. out of file descriptors, is retried after 50 ms).
pub async fn serve(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    graceful.shutdown().await;
}
