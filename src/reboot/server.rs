//! The FleetLock server zincati asks before it reboots (`[fleetlock] listen`): HTTP/1.1 over
//! loopback, one request per connection, answering `POST /v1/pre-reboot` and
//! `/v1/steady-state` (`fleetlock.rs` reads them). It never decides: each valid request from
//! the agent about this node becomes a [`Question`] on a channel, and the daemon's loop sends the
//! [`Answer`] back (from its phase table, `Phase::answer_agent`).
//!
//! Who may ask. Loopback is not an identity: any local user can connect to 127.0.0.1 and
//! POST pre-reboot, which would have the node drained and rebooted. The server answers only
//! connections whose client socket is owned by the agent's user (`[fleetlock] agent_user`,
//! `zincati` by default), read from the kernel's socket table when the connection is accepted,
//! before a byte of it is read (`peer.rs`, `caller.rs`); any other caller gets 403
//! `caller_not_update_agent`, written at once, and nothing is asked. Chosen over a secret path
//! segment in zincati's `base_url` because the kernel's uid needs nothing generated, stored or
//! rotated at install, cannot leak through a log line or a world-readable drop-in (zincati prints
//! its base URL), and names the caller in the refusal. It needs a user namespace that maps the
//! agent's uid (`userns.rs`: the server does not start otherwise). root passes only when
//! `agent_user` is root (the tests); root can reboot the node anyway.
//!
//! Which node. Requests name a node by `client_params.id`; this server answers for one node,
//! whose id is zincati's for this machine (`zincati_id.rs`). Another id gets 403
//! `not_this_node` without a question, so no request changes another node. The group is passed
//! on as the client sent it.
//!
//! No local user delays the agent (`accept.rs`). The accept loop waits on nothing but the next
//! connection: it takes every connection already waiting, reads the socket table once for them
//! all, and hands each on without waiting: the agent's to a task of its own while fewer than
//! [`Limits::agent_connections`] of the agent's are open (beyond it 503 `no_answer` at once);
//! anyone else's to a refusal that reads at most the request's head for at most
//! [`Limits::refusal_read`] before its 403, while fewer than [`Limits::refusals`] are being
//! refused (beyond it the 403 is written unread and the connection closed). A refused caller is
//! said in the journal once a minute with a count (`refusals.rs`).
//!
//! The agent's connections: headers within [`Limits::header_timeout`] and 8 KiB; a body over
//! `fleetlock::MAX_BODY` refused from its `Content-Length` unread, or cut off as it is read; each
//! connection closed after [`Limits::connection_timeout`] whatever it does; the daemon's answer
//! awaited at most [`Limits::answer_timeout`] (then 503 `no_answer`, which zincati retries).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::fleetlock::{self, Kind, MAX_BODY, Operation, Refusal, Request};

/// One request for the daemon to answer.
#[derive(Debug)]
pub struct Question {
    pub request: Request,
    pub answer: oneshot::Sender<Answer>,
}

/// The daemon's answer to a [`Question`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// pre-reboot: the node holds its slot, inside a window, drained; zincati may reboot.
    Granted,
    /// steady-state: the node is restored and holds no slot.
    Released,
    /// Not now: `kind` says why for zincati's metrics, `why` for people (409).
    Refused { kind: Kind, why: String },
    /// The daemon cannot answer now (starting, stopping): 503 `no_answer`, said why.
    Unavailable(String),
}

/// The server's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The agent's connections served at once; zincati makes one at a time.
    pub agent_connections: usize,
    /// Other callers' connections whose request head is awaited before their 403, at once.
    pub refusals: usize,
    /// How long a refused connection's request head, and then its reading of the 403, are
    /// awaited.
    pub refusal_read: Duration,
    /// How long the request's headers may take to arrive (hyper's `header_read_timeout`).
    pub header_timeout: Duration,
    /// How long one connection may last, from accept to the last byte of the answer.
    pub connection_timeout: Duration,
    /// How long the daemon's answer is awaited.
    pub answer_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            agent_connections: 4,
            refusals: 16,
            refusal_read: Duration::from_secs(1),
            header_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(30),
            answer_timeout: Duration::from_secs(10),
        }
    }
}

/// hyper's smallest read buffer: the longest head accepted.
pub(super) const MAX_HEAD: usize = 8192;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen for FleetLock requests on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the FleetLock agent user {user:?} is not a user of this system")]
    NoSuchUser { user: String },
    #[error("cannot look up the FleetLock agent user {user:?}: {source}")]
    UserLookup { user: String, source: nix::Error },
    #[error(transparent)]
    Unseen(#[from] super::userns::Unseen),
}

impl StartError {
    /// An error of the system's or the unit's configuration: restarting cannot fix it.
    pub fn is_config(&self) -> bool {
        matches!(self, StartError::NoSuchUser { .. } | StartError::Unseen(_))
    }
}

/// The uid of `user`, looked up once when the server starts.
pub fn agent_uid(user: &str) -> Result<u32, StartError> {
    match nix::unistd::User::from_name(user) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(StartError::NoSuchUser {
            user: user.to_string(),
        }),
        Err(source) => Err(StartError::UserLookup {
            user: user.to_string(),
            source,
        }),
    }
}

/// Whom the server answers for and whom it listens to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The only `client_params.id` answered: zincati's id for this machine.
    pub node_id: String,
    /// The agent's user name (for messages) and uid (for the check).
    pub agent_user: String,
    pub agent_uid: u32,
}

/// A bound, not yet running, server.
pub struct Server {
    pub(super) listener: TcpListener,
    pub(super) shared: Arc<Shared>,
    pub(super) limits: Limits,
}

/// What every connection reads.
pub(super) struct Shared {
    pub(super) identity: Identity,
    questions: mpsc::Sender<Question>,
    answer_timeout: Duration,
}

impl Server {
    /// Listens on `addr`; the questions go to `questions`.
    pub async fn bind(
        addr: SocketAddr,
        identity: Identity,
        limits: Limits,
        questions: mpsc::Sender<Question>,
    ) -> Result<Server, StartError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Listen { addr, source })?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                identity,
                questions,
                answer_timeout: limits.answer_timeout,
            }),
            limits,
        })
    }

    /// The address it listens on (the port, when bound to port 0 in tests).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Serves one connection of the agent with hyper, within the connection's timeout.
pub(super) async fn serve_agent(
    stream: tokio::net::TcpStream,
    client: SocketAddr,
    shared: Arc<Shared>,
    limits: Limits,
) {
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(request, &shared).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(limits.connection_timeout, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!("fleetlock connection from {client}: {e}"),
        Err(_) => tracing::debug!(
            "fleetlock connection from {client} closed after {:?}",
            limits.connection_timeout
        ),
    }
}

/// One request of the agent's: the checks in order, then the question.
async fn answer(request: http::Request<Incoming>, shared: &Shared) -> Reply {
    let (head, body) = request.into_parts();
    let operation = match fleetlock::head(&head.method, head.uri.path(), &head.headers) {
        Ok(op) => op,
        Err(refusal) => return refused(&refusal),
    };
    let length = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if length.is_some_and(|n| n > MAX_BODY as u64) {
        return refused(&fleetlock::too_large(length));
    }
    let bytes = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return refused(&fleetlock::too_large(None));
        }
        Err(e) => {
            return refused(&Refusal::new(
                StatusCode::BAD_REQUEST,
                Kind::BadBody,
                format!("the body could not be read: {e}"),
            ));
        }
    };
    let request = match fleetlock::body(operation, &bytes) {
        Ok(r) => r,
        Err(refusal) => return refused(&refusal),
    };
    let node_id = &shared.identity.node_id;
    if request.id != *node_id {
        return refused(&Refusal::new(
            StatusCode::FORBIDDEN,
            Kind::NotThisNode,
            format!(
                "`client_params.id` {:?} is not this node's: this server answers only for \
                 {node_id:?}, zincati's id for this machine",
                request.id
            ),
        ));
    }
    ask(request, shared).await
}

/// Asks the daemon, within the answer timeout.
async fn ask(request: Request, shared: &Shared) -> Reply {
    let (operation, id) = (request.operation, request.id.clone());
    let (tx, rx) = oneshot::channel();
    let question = Question {
        request,
        answer: tx,
    };
    let asked = async {
        shared.questions.send(question).await.ok()?;
        rx.await.ok()
    };
    let answer = tokio::time::timeout(shared.answer_timeout, asked).await;
    match answer {
        Ok(Some(Answer::Granted | Answer::Released)) => {
            tracing::info!(
                "FleetLock {} for node id {id}: answered 200",
                operation.path()
            );
            reply(StatusCode::OK, Bytes::new())
        }
        Ok(Some(Answer::Refused { kind, why })) => {
            tracing::info!(
                "FleetLock {}: refused ({}): {why}",
                operation.path(),
                kind.as_str()
            );
            refused(&Refusal::new(StatusCode::CONFLICT, kind, why))
        }
        Ok(Some(Answer::Unavailable(why))) => refused(&Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Kind::NoAnswer,
            why,
        )),
        Ok(None) => refused(&Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Kind::NoAnswer,
            "the daemon is not answering FleetLock requests now; ask again later",
        )),
        Err(_) => refused(&Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Kind::NoAnswer,
            format!(
                "the daemon did not answer {} within {:?}; ask again later",
                operation_name(operation),
                shared.answer_timeout
            ),
        )),
    }
}

fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::PreReboot => "pre-reboot",
        Operation::SteadyState => "steady-state",
    }
}

type Reply = Response<Full<Bytes>>;

fn refused(refusal: &Refusal) -> Reply {
    let mut r = reply(refusal.status, Bytes::from(refusal.body()));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn reply(status: StatusCode, body: Bytes) -> Reply {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r
}
