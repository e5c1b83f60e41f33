//! The FleetLock server's accept loop: it waits on nothing but the next connection (or the
//! journal's next count of refusals), so no local user can hold up the agent's. Each round takes
//! every connection already waiting (up to [`BATCH`]), reads the socket table once for all of
//! them, and hands each on without waiting: the agent's to hyper on a task of its own within the
//! agent's bound, anyone else's to a refusal (`caller.rs`, `refusals.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::caller::{self, Caller, Refused};
use super::peer;
use super::refusals::Refusals;
use super::server::{Limits, MAX_HEAD, Shared, serve_agent};

/// The most connections judged on one read of the socket table.
const BATCH: usize = 256;

/// How long the loop pauses after a failed accept (out of descriptors): the listener stays
/// valid, and the next accept most likely fails the same way at once.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the loop holds across rounds.
struct Loop {
    shared: Arc<Shared>,
    limits: Limits,
    agent: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
    log: Refusals,
}

/// Serves `listener` until the task is dropped.
pub(super) async fn serve(listener: TcpListener, shared: Arc<Shared>, limits: Limits) {
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!("the FleetLock listener has no address: {e}");
            return;
        }
    };
    let mut state = Loop {
        shared,
        limits,
        agent: Arc::new(Semaphore::new(limits.agent_connections)),
        refusing: Arc::new(Semaphore::new(limits.refusals)),
        log: Refusals::default(),
    };
    loop {
        let due = state.log.due();
        let first = tokio::select! {
            accepted = listener.accept() => accepted,
            () = until(due) => {
                for line in state.log.flush(Instant::now()) {
                    tracing::warn!("{line}");
                }
                continue;
            }
        };
        let mut batch = match first {
            Ok(accepted) => vec![accepted],
            Err(e) => {
                tracing::warn!("cannot accept a FleetLock connection on {local}: {e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        waiting(&listener, &mut batch);
        let owners = peer::read_owners(local).await.map_err(Arc::new);
        for (stream, client) in batch {
            match caller::judge(&owners, client, local, &state.shared.identity) {
                Caller::Agent => state.agent(stream, client),
                Caller::Other(refused) => state.refuse(stream, refused),
            }
        }
    }
}

/// Sleeps until `at`; never without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Adds to `batch` the connections already waiting, without waiting for one more.
fn waiting(listener: &TcpListener, batch: &mut Vec<(TcpStream, SocketAddr)>) {
    let mut cx = Context::from_waker(Waker::noop());
    while batch.len() < BATCH {
        match listener.poll_accept(&mut cx) {
            Poll::Ready(Ok(accepted)) => batch.push(accepted),
            // An error is met again, and said, by the next round's accept.
            Poll::Ready(Err(_)) | Poll::Pending => break,
        }
    }
}

impl Loop {
    /// The agent's connection: served on a task of its own within the agent's bound, else 503.
    fn agent(&mut self, stream: TcpStream, client: SocketAddr) {
        match self.agent.clone().try_acquire_owned() {
            Ok(permit) => {
                let (shared, limits) = (self.shared.clone(), self.limits);
                tokio::spawn(async move {
                    serve_agent(stream, client, shared, limits).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let refused =
                    caller::beyond_bound(&self.shared.identity, self.limits.agent_connections);
                self.refuse(stream, refused);
            }
        }
    }

    /// Another caller's connection: counted in the journal's account, and answered with its
    /// refusal after at most its request's head while a refusal slot is free, else at once.
    fn refuse(&mut self, stream: TcpStream, refused: Refused) {
        if let Some(line) = self.log.refused(&refused, Instant::now()) {
            tracing::warn!("{line}");
        }
        let response = refused.response();
        match self.refusing.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(refuse_after_head(
                    stream,
                    response,
                    self.limits.refusal_read,
                    permit,
                ));
            }
            Err(_) => {
                // Best effort: the answer fits the socket's buffer; what the client sent is
                // never read, so the kernel may answer its close with a reset.
                let _ = stream.try_write(&response);
            }
        }
    }
}

/// Reads at most the request's head (within `within`), writes `response`, and reads what the
/// client still sends until it closes (within `within` again), so its answer is not cut off by
/// a reset for unread bytes.
async fn refuse_after_head(
    mut stream: TcpStream,
    response: Vec<u8>,
    within: Duration,
    _permit: OwnedSemaphorePermit,
) {
    let mut buf = vec![0u8; 1024];
    let mut head = Vec::new();
    let _ = tokio::time::timeout(within, async {
        while head.len() < MAX_HEAD && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let _ = tokio::time::timeout(within, async {
        stream.write_all(&response).await?;
        stream.shutdown().await?;
        let mut left = MAX_HEAD;
        while left > 0 {
            match stream.read(&mut buf).await? {
                0 => break,
                n => left = left.saturating_sub(n),
            }
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
}

impl super::server::Server {
    /// Serves until dropped (the task aborted): the accept loop above.
    pub async fn run(self) {
        serve(self.listener, self.shared, self.limits).await;
    }
}
