//! The HTTP side: listener, connections, routing of API requests to the store, watches,
//! Status answers, identities and the fault knobs on every request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::auth::{self, Attributes, Identity};
use crate::discovery;
use crate::faults::{Action, Faults};
use crate::patch::PatchType;
use crate::rbac::{Denial, Policy};
use crate::recorder::{RecordedRequest, Recorder};
use crate::resources::{self, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{
    self, ChangeKind, DeleteOptions, EvictOutcome, ListQuery, Store, StoreError, WatchStart,
};

pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Default watch length when the client gives no `timeoutSeconds` (the apiserver picks
/// between 30 and 60 minutes).
const DEFAULT_WATCH_SECONDS: u64 = 1800;

/// Everything a request handler needs.
pub(crate) struct App {
    pub store: Store,
    pub recorder: Recorder,
    pub faults: Faults,
    pub port: u16,
    pub listener: Mutex<ListenerState>,
    /// The RBAC objects ServiceAccount identities are authorized by.
    pub rbac: Mutex<Arc<Policy>>,
    /// Every request and access review RBAC denied, in order.
    pub denials: Mutex<Vec<Denial>>,
}

impl App {
    fn policy(&self) -> Arc<Policy> {
        self.rbac.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Authorizes `attrs` for `identity`; an RBAC denial (of a ServiceAccount) is recorded as
    /// `kind` (`request` or `review`).
    fn authorize(
        &self,
        kind: &'static str,
        identity: &Identity,
        attrs: &Attributes,
        field_node: Option<&str>,
    ) -> Result<(), String> {
        let graph = |node: &str, a: &Attributes| crate::node_graph::decide(&self.store, node, a);
        let decision = auth::authorize(identity, attrs, field_node, &graph, &self.policy());
        if decision.is_err() && matches!(identity, Identity::ServiceAccount { .. }) {
            self.denials
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Denial {
                    kind,
                    user: identity.user(),
                    message: attrs.denial(identity),
                });
        }
        decision
    }
}

pub(crate) struct ListenerState {
    accept: Option<JoinHandle<()>>,
    /// A duplicate of the listening socket, to shut it down at once on stop (aborting the
    /// accept task closes its copy only when the runtime next polls it).
    control: Option<std::net::TcpListener>,
    /// Bumped to drop every open connection (the listener going down).
    epoch: watch::Sender<u64>,
}

impl ListenerState {
    pub(crate) fn new() -> Self {
        ListenerState {
            accept: None,
            control: None,
            epoch: watch::channel(0).0,
        }
    }
}

impl App {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Binds 127.0.0.1:`port` and serves connections until `stop_listener`.
/// Synchronous on purpose: the control endpoint calls it from a task the server spawned.
/// Must run inside the tokio runtime.
pub(crate) fn start_listener(app: &Arc<App>, port: u16) -> std::io::Result<u16> {
    if app
        .listener
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .control
        .is_some()
    {
        // Already listening: nothing to do.
        return Ok(app.port);
    }
    let std_listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))?;
    serve_listener(app, std_listener)
}

/// Serves connections from an already bound listener until `stop_listener`.
pub(crate) fn serve_listener(
    app: &Arc<App>,
    std_listener: std::net::TcpListener,
) -> std::io::Result<u16> {
    let mut state = app.listener.lock().unwrap_or_else(|e| e.into_inner());
    std_listener.set_nonblocking(true)?;
    let control = std_listener.try_clone()?;
    let listener = TcpListener::from_std(std_listener)?;
    let port = listener.local_addr()?.port();
    if let Some(old) = state.accept.take() {
        old.abort();
    }
    state.control = Some(control);
    let epoch = state.epoch.subscribe();
    let app2 = app.clone();
    state.accept = Some(tokio::spawn(accept_loop(app2, listener, epoch)));
    Ok(port)
}

/// Closes the listening socket and every open connection (watches included).
pub(crate) fn stop_listener(app: &App) {
    let mut state = app.listener.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(control) = state.control.take() {
        // shutdown(2) on a listening socket stops it listening right away (Linux moves it to
        // CLOSE), so the port refuses connections before this returns.
        if let Err(e) = socket2::SockRef::from(&control).shutdown(std::net::Shutdown::Read) {
            tracing::warn!(port = app.port, error = %e, "could not shut down the listening socket 127.0.0.1:{}", app.port);
        }
    }
    if let Some(accept) = state.accept.take() {
        accept.abort();
    }
    state.epoch.send_modify(|e| *e += 1);
}

async fn accept_loop(app: Arc<App>, listener: TcpListener, epoch: watch::Receiver<u64>) {
    let mut stopped = epoch.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(port = app.port, error = %e, "accept failed on 127.0.0.1:{}", app.port);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Headers and body may go out in separate writes; without TCP_NODELAY each answer
        // would wait ~40 ms for the client's delayed ACK (see the reference's trap).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY on the connection from {peer}");
        }
        let app = app.clone();
        let mut epoch = epoch.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let app = app.clone();
                async move { handle(app, req).await }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = epoch.changed() => {}
            }
        });
    }
}

pub(crate) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed_unsync()
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// An answer with any body (a fault's HTML page); an unknown content type reads as text.
fn raw_response(code: u16, content_type: &str, body: String) -> Response<Body> {
    let mut resp = Response::new(full(body.into_bytes()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("text/plain")),
    );
    resp
}

fn value_response(status: StatusCode, value: &Value) -> Response<Body> {
    json_response(status, serde_json::to_vec(value).unwrap_or_default())
}

#[derive(Serialize)]
struct Cause {
    reason: String,
    message: String,
}

#[derive(Serialize, Default)]
struct Details {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    causes: Vec<Cause>,
    #[serde(rename = "retryAfterSeconds", skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<u32>,
}

/// metav1.Status, fields in the order the real apiserver writes them.
#[derive(Serialize)]
struct Status {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: serde_json::Map<String, Value>,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    code: u16,
}

fn status_body(
    code: u16,
    reason: Option<&'static str>,
    message: Option<String>,
    details: Option<Details>,
) -> Vec<u8> {
    let status = Status {
        kind: "Status",
        api_version: "v1",
        metadata: serde_json::Map::new(),
        status: if code < 300 { "Success" } else { "Failure" },
        message,
        reason,
        details,
        code,
    };
    serde_json::to_vec(&status).unwrap_or_default()
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

fn failure(code: u16, message: impl Into<String>, details: Option<Details>) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(
        status,
        status_body(code, Some(reason_for(code)), Some(message.into()), details),
    )
}

fn object_details(rt: &ResourceType, name: &str) -> Details {
    Details {
        name: Some(name.to_string()),
        group: (!rt.group.is_empty()).then(|| rt.group.to_string()),
        kind: Some(rt.plural.to_string()),
        ..Details::default()
    }
}

fn store_failure(rt: Option<&ResourceType>, err: &StoreError) -> Response<Body> {
    use crate::patch::PatchError;
    let details = |name: &str| rt.map(|rt| object_details(rt, name));
    match err {
        StoreError::UnknownKind { .. } => failure(404, err.to_string(), None),
        StoreError::NotFound { name, .. } => failure(404, err.to_string(), details(name)),
        StoreError::AlreadyExists { name, .. } => {
            let mut r = failure(409, err.to_string(), details(name));
            set_reason(&mut r, 409, "AlreadyExists", err.to_string(), details(name));
            r
        }
        StoreError::Conflict { name, .. } => failure(409, err.to_string(), details(name)),
        StoreError::Invalid { name, .. } => failure(422, err.to_string(), details(name)),
        StoreError::Forbidden { name, .. } => failure(403, err.to_string(), details(name)),
        StoreError::BadRequest { .. } => failure(400, err.to_string(), None),
        StoreError::Expired { .. } => failure(410, err.to_string(), None),
        StoreError::Patch { source, .. } => match source {
            PatchError::JsonPatch(e) => failure(422, e.to_string(), None),
            PatchError::ContentType(_) => failure(415, source.to_string(), None),
            _ => failure(400, source.to_string(), None),
        },
        StoreError::Pdb(_) => failure(500, format!("Internal error occurred: {err}"), None),
    }
}

fn set_reason(
    resp: &mut Response<Body>,
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Details>,
) {
    *resp.body_mut() = full(status_body(code, Some(reason), Some(message), details));
}

/// Query string pairs, percent-decoded (`+` is a space).
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// A path segment (a namespace, a name) as the apiserver reads it: percent-decoded (Go's
/// `net/url` unescapes the path; `+` stays a `+` there).
fn segment_decode(s: &str) -> String {
    percent_decode(s, false)
}

fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], decoded) {
            (_, Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', None) if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            (b, None) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A parsed request.
struct Call {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: String,
    identity: Identity,
    user_agent: String,
    body: Bytes,
}

impl Call {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true" | "1"))
    }
}

/// What an API path names.
struct Target {
    rt: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

async fn handle(app: Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, std::io::Error> {
    let arrived = SystemTime::now();
    let elapsed = app.recorder.since_start().as_secs_f64();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let raw_query = req.uri().query().unwrap_or("").to_string();
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header(CONTENT_TYPE);
    let accept = header(ACCEPT);
    let user_agent = header(hyper::header::USER_AGENT);
    let identity = Identity::from_headers(
        header(AUTHORIZATION).as_deref(),
        header(hyper::header::HeaderName::from_static("impersonate-user")).as_deref(),
    );
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Err(std::io::Error::other(e)),
    };

    if path.starts_with("/_fake/") || path == "/_fake" {
        return Ok(crate::control::handle(
            &app, &method, &path, &raw_query, &body,
        ));
    }

    // A real kube-apiserver finishes a request whose client went away (the write lands); hyper
    // drops this future with the connection. With the knob on, the rest runs in a task of its
    // own, which the connection's end does not stop.
    let rest = answer(
        app.clone(),
        Asked {
            arrived,
            elapsed,
            method,
            path,
            raw_query,
            content_type,
            accept,
            user_agent,
            identity,
            body,
        },
    );
    if app.faults.finish_abandoned() {
        tokio::spawn(rest).await.map_err(std::io::Error::other)?
    } else {
        rest.await
    }
}

/// What a request asked, once its body is read.
struct Asked {
    arrived: SystemTime,
    elapsed: f64,
    method: Method,
    path: String,
    raw_query: String,
    content_type: Option<String>,
    accept: Option<String>,
    user_agent: Option<String>,
    identity: Identity,
    body: Bytes,
}

/// The faults, the route and the record of one request.
async fn answer(app: Arc<App>, asked: Asked) -> Result<Response<Body>, std::io::Error> {
    let Asked {
        arrived,
        elapsed,
        method,
        path,
        raw_query,
        content_type,
        accept,
        user_agent,
        identity,
        body,
    } = asked;
    let uri = if raw_query.is_empty() {
        path.clone()
    } else {
        format!("{path}?{raw_query}")
    };
    let mut record = RecordedRequest {
        method: method.to_string(),
        path: path.clone(),
        query: raw_query.clone(),
        content_type: content_type.clone(),
        accept,
        user: identity.user(),
        user_agent: user_agent.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
        body_len: body.len(),
        status: 0,
        retry_after: None,
        response: String::new(),
        response_len: None,
        at: arrived,
        elapsed,
    };
    let mut response = match app.faults.apply(method.as_str(), &uri).await {
        Action::Close => {
            app.recorder.push(record);
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "fault: connection closed",
            ));
        }
        Action::Fail {
            status,
            retry_after,
            body,
        } => {
            // A Retry-After comes in the Status too, as the apiserver writes a 429 or 5xx of
            // `errors.NewTooManyRequests` / `NewServerTimeout` (details.retryAfterSeconds, and
            // the header set from it).
            let details = retry_after.map(|secs| Details {
                retry_after_seconds: Some(secs),
                ..Details::default()
            });
            let mut resp = match body {
                None => failure(
                    status,
                    format!("fake-apiserver: injected fault {status}"),
                    details,
                ),
                Some((content_type, body)) => raw_response(status, &content_type, body),
            };
            if let Some(secs) = retry_after {
                resp.headers_mut()
                    .insert("Retry-After", HeaderValue::from(secs));
            }
            resp
        }
        Action::Throttle { retry_after } => crate::flowcontrol::rejection(retry_after),
        Action::Proceed => {
            let call = Call {
                method: method.clone(),
                path: path.clone(),
                query: query_pairs(&raw_query),
                content_type: content_type.unwrap_or_default(),
                identity,
                user_agent: user_agent.unwrap_or_default(),
                body,
            };
            route(&app, call).await
        }
    };
    crate::flowcontrol::classify(&mut response);
    record.status = response.status().as_u16();
    record.retry_after = response
        .headers()
        .get("Retry-After")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Error answers are small and never streamed: keep their body for tests to compare.
    let response = if record.status >= 300 {
        let (parts, body) = response.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        record.response = String::from_utf8_lossy(&bytes).into_owned();
        Response::from_parts(parts, full(bytes))
    } else {
        response
    };
    record.response_len = hyper::body::Body::size_hint(response.body()).exact();
    tracing::debug!("answered {} {uri} with {}", record.method, record.status);
    app.recorder.push(record);
    Ok(response)
}

async fn route(app: &Arc<App>, call: Call) -> Response<Body> {
    let segs: Vec<&str> = call.path.split('/').filter(|s| !s.is_empty()).collect();
    if call.method == Method::GET {
        match segs.as_slice() {
            ["version"] => return value_response(StatusCode::OK, &discovery::version()),
            ["healthz"] | ["readyz"] | ["livez"] => {
                let mut r = Response::new(full("ok"));
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                return r;
            }
            ["api"] => return value_response(StatusCode::OK, &discovery::api_versions(&app.url())),
            ["apis"] => return value_response(StatusCode::OK, &discovery::api_group_list()),
            ["api", "v1"] => {
                if let Some(doc) = discovery::resource_list("", "v1") {
                    return value_response(StatusCode::OK, &doc);
                }
            }
            ["apis", group] => {
                if let Some(doc) = discovery::api_group(group) {
                    return value_response(StatusCode::OK, &doc);
                }
            }
            ["apis", group, version] => {
                if let Some(doc) = discovery::resource_list(group, version) {
                    return value_response(StatusCode::OK, &doc);
                }
            }
            _ => {}
        }
    }
    if call.method == Method::POST
        && segs.as_slice()
            == [
                "apis",
                "authorization.k8s.io",
                "v1",
                "selfsubjectaccessreviews",
            ]
    {
        return self_subject_access_review(app, &call);
    }
    if call.method == Method::POST
        && segs.as_slice() == ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]
    {
        return self_subject_review(&call);
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return not_found_path(),
    };
    let target = match parse_target(group, version, rest) {
        Some(t) => t,
        None => return not_found_path(),
    };
    serve_resource(app, call, target).await
}

fn not_found_path() -> Response<Body> {
    failure(
        404,
        "the server could not find the requested resource",
        Some(Details::default()),
    )
}

fn parse_target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let namespaced_plural =
        |p: &str| resources::by_path(group, version, p).filter(|r| r.namespaced);
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if namespaced_plural(plural).is_some() => {
            (Some(segment_decode(ns)), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(segment_decode(name)), None),
        [plural, name, sub] => (*plural, Some(segment_decode(name)), Some(sub.to_string())),
        _ => return None,
    };
    let rt = resources::by_path(group, version, plural)?;
    if !rt.namespaced && namespace.is_some() {
        return None;
    }
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target {
        rt,
        namespace,
        name,
        sub,
    })
}

fn verb_of(call: &Call, target: &Target) -> &'static str {
    match (&call.method, target.name.is_some()) {
        (&Method::GET, false) if call.flag("watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::GET, true) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, false) => "deletecollection",
        (&Method::DELETE, true) => "delete",
        _ => "unknown",
    }
}

async fn serve_resource(app: &Arc<App>, call: Call, t: Target) -> Response<Body> {
    let attrs = Attributes {
        verb: verb_of(&call, &t).to_string(),
        group: t.rt.group.to_string(),
        resource: t.rt.plural.to_string(),
        subresource: t.sub.clone().unwrap_or_default(),
        namespace: t.namespace.clone().unwrap_or_default(),
        name: t.name.clone().unwrap_or_default(),
    };
    let field_node = (t.rt.key == "pods")
        .then(|| call.param("fieldSelector"))
        .flatten()
        .and_then(|f| FieldSelector::parse(f, |name| t.rt.accepts_field(name)).ok())
        .and_then(|f| f.required("spec.nodeName").map(str::to_owned));
    if let Err(reason) = app.authorize("request", &call.identity, &attrs, field_node.as_deref()) {
        let what = if attrs.name.is_empty() {
            t.rt.qualified()
        } else {
            format!("{} \"{}\"", t.rt.qualified(), attrs.name)
        };
        return failure(
            403,
            auth::forbidden_message(&what, &call.identity, &attrs, &reason),
            Some(object_details(t.rt, &attrs.name)),
        );
    }
    let ns = t.namespace.as_deref();
    let sub = t.sub.as_deref();
    // `?dryRun=All`: every check and the answer as usual, nothing stored.
    let store = if call.param("dryRun") == Some("All") {
        app.store.dry_run()
    } else {
        app.store.clone()
    };
    let store = if matches!(call.method, Method::POST | Method::PUT | Method::PATCH) {
        store.as_manager(crate::managed::manager_for(
            call.param("fieldManager"),
            &call.user_agent,
        ))
    } else {
        store
    };
    let store = &store;
    match (&call.method, t.name.as_deref(), sub) {
        (&Method::GET, None, None) if call.flag("watch") => watch(app, &call, &t).await,
        (&Method::GET, None, None) => list(app, &call, &t),
        (&Method::GET, Some(name), None | Some("status")) => match app.store.get_rt(t.rt, ns, name)
        {
            Ok(obj) => value_response(StatusCode::OK, &obj),
            Err(e) => store_failure(Some(t.rt), &e),
        },
        (&Method::POST, None, None) => create(store, &call, &t),
        (&Method::POST, Some(name), Some("eviction")) if t.rt.key == "pods" => {
            evict(app, store, &call, ns.unwrap_or("default"), name)
        }
        (&Method::PUT, Some(name), None | Some("status")) => replace(store, &call, &t, name),
        (&Method::PATCH, Some(name), None | Some("status")) => patch(store, &call, &t, name),
        (&Method::DELETE, Some(name), None) => delete(store, &call, &t, name),
        _ => failure(
            405,
            format!(
                "the server does not allow this method on the requested resource ({} {})",
                call.method, call.path
            ),
            None,
        ),
    }
}

fn node_check<'a>(
    identity: &'a Identity,
    rt: &'a ResourceType,
) -> impl Fn(&Value, &Value) -> Result<(), StoreError> + 'a {
    move |old, new| {
        if let (Identity::Node(node), "nodes") = (identity, rt.key) {
            auth::node_may_write_node(node, old, new).map_err(|message| StoreError::Forbidden {
                resource: rt.qualified(),
                name: new
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                message,
            })?;
        }
        Ok(())
    }
}

fn pod_removal_check<'a>(
    identity: &'a Identity,
    verb: &'a str,
) -> impl Fn(&Value) -> Result<(), StoreError> + 'a {
    move |pod| {
        if let Identity::Node(node) = identity {
            auth::node_may_remove_pod(node, pod, verb).map_err(|message| {
                StoreError::Forbidden {
                    resource: "pods".into(),
                    name: pod
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    message,
                }
            })?;
        }
        Ok(())
    }
}

fn parse_body(call: &Call) -> Result<Value, Box<Response<Body>>> {
    let ct = call.content_type.to_ascii_lowercase();
    if ct.contains("protobuf") {
        return Err(Box::new(failure(
            415,
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {})",
                call.content_type
            ),
            None,
        )));
    }
    let parsed = if ct.contains("yaml") {
        serde_yaml::from_slice::<Value>(&call.body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<Value>(&call.body).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| {
        Box::new(failure(
            400,
            format!("the request body is not valid: {e}"),
            None,
        ))
    })
}

fn list(app: &Arc<App>, call: &Call, t: &Target) -> Response<Body> {
    let labels = match call
        .param("labelSelector")
        .map(LabelSelector::parse)
        .transpose()
    {
        Ok(l) => l,
        Err(e) => return failure(400, e.to_string(), None),
    };
    let fields = match call
        .param("fieldSelector")
        .map(|f| FieldSelector::parse(f, |name| t.rt.accepts_field(name)))
        .transpose()
    {
        Ok(f) => f,
        Err(e) => return failure(400, e.to_string(), None),
    };
    let limit = match call.param("limit").map(str::parse::<usize>).transpose() {
        Ok(l) => l.filter(|l| *l > 0),
        Err(_) => return failure(400, "limit must be a non-negative integer", None),
    };
    if call.param("resourceVersionMatch") == Some("Exact")
        && let Some(rv) = call.param("resourceVersion").and_then(|v| v.parse().ok())
        && let Some(oldest) = app.store.is_expired(rv)
    {
        return failure(
            410,
            format!("too old resource version: {rv} ({oldest})"),
            None,
        );
    }
    let query = ListQuery {
        namespace: t.namespace.as_deref(),
        labels: labels.as_ref(),
        fields: fields.as_ref(),
        limit,
        continue_token: call.param("continue").filter(|c| !c.is_empty()),
    };
    let page = match app.store.list_rt(t.rt, &query) {
        Ok(p) => p,
        Err(e) => return store_failure(Some(t.rt), &e),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(
        "resourceVersion".into(),
        json!(page.resource_version.to_string()),
    );
    if let Some(token) = &page.continue_token {
        meta.insert("continue".into(), json!(token));
    }
    if let Some(n) = page.remaining {
        meta.insert("remainingItemCount".into(), json!(n));
    }
    // Written by hand so a 5,000-pod list is serialised once, without building a big Value.
    let mut out = Vec::with_capacity(256 + page.items.len() * 1024);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":",
            t.rt.list_kind(),
            t.rt.api_version()
        )
        .as_bytes(),
    );
    let _ = serde_json::to_writer(&mut out, &meta);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, item.as_ref());
    }
    out.extend_from_slice(b"]}");
    json_response(StatusCode::OK, out)
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

async fn watch(app: &Arc<App>, call: &Call, t: &Target) -> Response<Body> {
    let labels = match call
        .param("labelSelector")
        .map(LabelSelector::parse)
        .transpose()
    {
        Ok(l) => l.unwrap_or_default(),
        Err(e) => return failure(400, e.to_string(), None),
    };
    let fields = match call
        .param("fieldSelector")
        .map(|f| FieldSelector::parse(f, |name| t.rt.accepts_field(name)))
        .transpose()
    {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => return failure(400, e.to_string(), None),
    };
    let rv = match call.param("resourceVersion").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => return failure(400, format!("invalid resource version: {v}"), None),
        },
    };
    let timeout = call
        .param("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(DEFAULT_WATCH_SECONDS);
    let namespace = t.namespace.clone();
    let matches = move |obj: &Value| {
        namespace.as_deref().is_none_or(|ns| {
            obj.get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                == Some(ns)
        }) && labels.matches_object(obj)
            && fields.matches(obj)
    };
    let initial_events_end = call.flag("sendInitialEvents");
    let start = if initial_events_end {
        // A streaming list starts from the current state whatever version it names.
        app.store.watch_from(t.rt, None)
    } else {
        app.store.watch_from(t.rt, rv)
    };
    let view = t.rt;
    let resource = store::storage_of(view).key;
    let kind = t.rt.kind;
    let api_version = t.rt.api_version();
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let counted = app.recorder.watch_opened();
    let bookmarks = call.flag("allowWatchBookmarks");
    // The version the watch has caught up to: every change up to it was sent or filtered out.
    let mut caught_up = rv.unwrap_or(0);
    tokio::spawn(async move {
        let counted = counted;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        // kube-apiserver's watch cache sends a watch that asked for bookmarks one shortly
        // before its deadline (k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go,
        // `nextBookmarkTime`: "send a bookmark ... 2s before the deadline"), so that a client
        // that saw no event in the meantime watches again from a recent version instead of
        // replaying everything since its first list.
        // A watch of 2 s or less gets none.
        let mut bookmark_at = (bookmarks && timeout > 2)
            .then(|| deadline.checked_sub(Duration::from_secs(2)))
            .flatten();
        let mut live = match start {
            WatchStart::Expired { requested, oldest } => {
                let status: Value = serde_json::from_slice(&status_body(
                    410,
                    Some("Expired"),
                    Some(format!("too old resource version: {requested} ({oldest})")),
                    None,
                ))
                .unwrap_or(Value::Null);
                let _ = tx.send(watch_line("ERROR", &status)).await;
                return;
            }
            WatchStart::Snapshot { objects, rv, live } => {
                caught_up = rv;
                for obj in objects
                    .iter()
                    .map(|o| store::present(view, o))
                    .filter(|o| matches(o))
                {
                    if tx.send(watch_line("ADDED", &obj)).await.is_err() {
                        return;
                    }
                    counted.sent(true);
                }
                if initial_events_end {
                    // The end of a streaming list (sendInitialEvents=true), as KEP-3157 defines it.
                    let bookmark = json!({
                        "kind": kind,
                        "apiVersion": api_version,
                        "metadata": {
                            "resourceVersion": rv.to_string(),
                            "annotations": {"k8s.io/initial-events-end": "true"}
                        }
                    });
                    if tx.send(watch_line("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                }
                live
            }
            WatchStart::Replay { backlog, live } => {
                for change in &backlog {
                    caught_up = caught_up.max(change.rv);
                    if let Some(line) = change_line(view, change, &matches) {
                        if tx.send(line).await.is_err() {
                            return;
                        }
                        counted.sent(false);
                    }
                }
                live
            }
        };
        loop {
            let next = tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
                _ = tokio::time::sleep_until(bookmark_at.unwrap_or(deadline)), if bookmark_at.is_some() => {
                    bookmark_at = None;
                    // Caught up with every change already told (the channel is in order).
                    let mut pending = Vec::new();
                    while let Ok(change) = live.try_recv() {
                        pending.push(change);
                    }
                    for change in pending {
                        caught_up = caught_up.max(change.rv);
                        if change.resource == resource
                            && let Some(line) = change_line(view, &change, &matches)
                        {
                            if tx.send(line).await.is_err() {
                                return;
                            }
                            counted.sent(false);
                        }
                    }
                    let bookmark = json!({
                        "kind": kind,
                        "apiVersion": api_version,
                        "metadata": {"resourceVersion": caught_up.to_string()}
                    });
                    if tx.send(watch_line("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                    continue;
                }
                next = live.recv() => next,
            };
            if let Ok(change) = &next {
                caught_up = caught_up.max(change.rv);
            }
            match next {
                Ok(change) if change.resource == resource => {
                    if let Some(line) = change_line(view, &change, &matches) {
                        if tx.send(line).await.is_err() {
                            return;
                        }
                        counted.sent(false);
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    // Too slow a reader: end with 410 so the client lists again.
                    let status: Value = serde_json::from_slice(&status_body(
                        410,
                        Some("Expired"),
                        Some("watch fell behind; too old resource version".into()),
                        None,
                    ))
                    .unwrap_or(Value::Null);
                    let _ = tx.send(watch_line("ERROR", &status)).await;
                    return;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, Infallible>(Frame::data(line)), rx))
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed_unsync());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// The watch event a change is for a watch with these filters: an object entering the
/// filter is ADDED, one leaving it is DELETED, as the apiserver's watch cache does.
fn change_line(
    view: &ResourceType,
    change: &store::Change,
    matches: &impl Fn(&Value) -> bool,
) -> Option<Bytes> {
    let new = store::present(view, &change.new);
    let now = matches(&new);
    let before = change
        .old
        .as_ref()
        .is_some_and(|o| matches(&store::present(view, o)));
    let kind = match change.kind {
        ChangeKind::Added if now => "ADDED",
        ChangeKind::Deleted if before || now => "DELETED",
        ChangeKind::Modified if before && now => "MODIFIED",
        ChangeKind::Modified if now => "ADDED",
        ChangeKind::Modified if before => "DELETED",
        _ => return None,
    };
    Some(watch_line(kind, &new))
}

fn create(store: &Store, call: &Call, t: &Target) -> Response<Body> {
    let obj = match parse_body(call) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let (Some(ns), Some(body_ns)) = (
        t.namespace.as_deref(),
        obj.pointer("/metadata/namespace").and_then(Value::as_str),
    ) && ns != body_ns
    {
        return failure(
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
            None,
        );
    }
    if let Identity::Node(node) = &call.identity
        && t.rt.key == "nodes"
        && obj.pointer("/metadata/name").and_then(Value::as_str) != Some(node.as_str())
    {
        return failure(
            403,
            format!(
                "nodes is forbidden: node \"{node}\" is not allowed to modify node \"{}\"",
                obj.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ),
            None,
        );
    }
    if let Identity::Node(node) = &call.identity
        && t.rt.key == "leases.coordination.k8s.io"
        && let Err(message) = auth::node_may_create_lease(node, &obj)
    {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        return failure(
            403,
            format!("{} \"{name}\" is forbidden: {message}", t.rt.qualified()),
            Some(object_details(t.rt, name)),
        );
    }
    match store.create_rt(t.rt, t.namespace.as_deref(), obj) {
        Ok(created) => value_response(StatusCode::CREATED, &created),
        Err(e) => store_failure(Some(t.rt), &e),
    }
}

fn replace(store: &Store, call: &Call, t: &Target, name: &str) -> Response<Body> {
    let obj = match parse_body(call) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let check = node_check(&call.identity, t.rt);
    let status_only = t.sub.as_deref() == Some("status");
    match store.replace_rt(t.rt, t.namespace.as_deref(), name, status_only, obj, &check) {
        Ok(o) => value_response(StatusCode::OK, &o),
        Err(e) => store_failure(Some(t.rt), &e),
    }
}

fn patch(store: &Store, call: &Call, t: &Target, name: &str) -> Response<Body> {
    let patch_type = match PatchType::from_content_type(&call.content_type) {
        Ok(p) => p,
        Err(e) => return failure(415, e.to_string(), None),
    };
    if patch_type == PatchType::Apply && call.param("fieldManager").is_none_or(str::is_empty) {
        return failure(
            400,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            None,
        );
    }
    let check = node_check(&call.identity, t.rt);
    let status_only = t.sub.as_deref() == Some("status");
    let forced;
    let store = if patch_type == PatchType::Apply && call.flag("force") {
        forced = store.forcing();
        &forced
    } else {
        store
    };
    match store.patch_rt(
        t.rt,
        t.namespace.as_deref(),
        name,
        status_only,
        patch_type,
        &call.body,
        &check,
    ) {
        Ok(o) => value_response(StatusCode::OK, &o),
        Err(e) => store_failure(Some(t.rt), &e),
    }
}

/// DeleteOptions from the query and a JSON body; a protobuf body (kubectl's typed client sends
/// one) is ignored.
fn delete_options(call: &Call) -> Result<DeleteOptions, Box<Response<Body>>> {
    let mut opts = DeleteOptions::default();
    if !call.body.is_empty() && !call.content_type.to_ascii_lowercase().contains("protobuf") {
        let body: Value = serde_json::from_slice(&call.body).map_err(|e| {
            Box::new(failure(
                400,
                format!("the DeleteOptions body is not valid JSON: {e}"),
                None,
            ))
        })?;
        opts.grace_period_seconds = body.get("gracePeriodSeconds").and_then(Value::as_i64);
        opts.dry_run = body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
        opts.uid = body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.resource_version = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    if let Some(g) = call.param("gracePeriodSeconds") {
        opts.grace_period_seconds = Some(g.parse().map_err(|_| {
            Box::new(failure(
                400,
                format!("gracePeriodSeconds is not an integer: {g}"),
                None,
            ))
        })?);
    }
    Ok(opts)
}

fn delete(store: &Store, call: &Call, t: &Target, name: &str) -> Response<Body> {
    let opts = match delete_options(call) {
        Ok(o) => o,
        Err(r) => return *r,
    };
    let dry = store.dry_run();
    let store = if opts.dry_run { &dry } else { store };
    let check = pod_removal_check(&call.identity, "delete");
    let no_check = |_: &Value| Ok(());
    let check: &dyn Fn(&Value) -> Result<(), StoreError> = if t.rt.key == "pods" {
        &check
    } else {
        &no_check
    };
    match store.delete_rt(t.rt, t.namespace.as_deref(), name, &opts, check) {
        Ok((obj, _gone)) if t.rt.key == "pods" => value_response(StatusCode::OK, &obj),
        Ok((obj, _)) => {
            let details = Details {
                uid: obj
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                ..object_details(t.rt, name)
            };
            json_response(StatusCode::OK, status_body(200, None, None, Some(details)))
        }
        Err(e) => store_failure(Some(t.rt), &e),
    }
}

fn evict(
    app: &Arc<App>,
    store: &Store,
    call: &Call,
    namespace: &str,
    name: &str,
) -> Response<Body> {
    let Some(pods) = resources::by_kind("Pod") else {
        return failure(500, "pods are not served", None);
    };
    let body = match parse_body(call) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let Some(body_name) = body.pointer("/metadata/name").and_then(Value::as_str)
        && body_name != name
    {
        return failure(
            400,
            "name in URL does not match name in Eviction object",
            None,
        );
    }
    let dry = store.dry_run();
    let in_body = body
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|v| v == "All"));
    let store = if in_body { &dry } else { store };
    let grace = body
        .pointer("/deleteOptions/gracePeriodSeconds")
        .and_then(Value::as_i64);
    let precondition = body
        .pointer("/deleteOptions/preconditions/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let node_rule = pod_removal_check(&call.identity, "evict");
    let check = |pod: &Value| {
        node_rule(pod)?;
        if let Some(uid) = &precondition {
            let actual = pod
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("");
            if uid != actual {
                return Err(StoreError::Conflict {
                    resource: "pods".into(),
                    name: name.into(),
                    message: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                });
            }
        }
        Ok(())
    };
    match store.evict(namespace, name, grace, &check) {
        Ok(EvictOutcome::Evicted) => {
            tracing::debug!("evicted pod {namespace}/{name}");
            json_response(StatusCode::CREATED, status_body(201, None, None, None))
        }
        Ok(EvictOutcome::Blocked {
            pdb,
            desired_healthy,
            current_healthy,
        }) => {
            // With the knob, the answer is the one for a budget the disruption controller has
            // not observed yet (eviction.go createTooManyRequestsError): Retry-After, and
            // details.retryAfterSeconds as errors.NewTooManyRequests sets it.
            let retry_after = app.faults.eviction_retry_after();
            let message = match retry_after {
                None => format!(
                    "The disruption budget {pdb} needs {desired_healthy} healthy pods and has {current_healthy} currently"
                ),
                Some(_) => {
                    format!("The disruption budget {pdb} is still being processed by the server.")
                }
            };
            let details = Details {
                causes: vec![Cause {
                    reason: "DisruptionBudget".into(),
                    message,
                }],
                retry_after_seconds: retry_after,
                ..Details::default()
            };
            let mut resp = json_response(
                StatusCode::TOO_MANY_REQUESTS,
                status_body(
                    429,
                    Some("TooManyRequests"),
                    Some(
                        "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                    ),
                    Some(details),
                ),
            );
            if let Some(secs) = retry_after {
                resp.headers_mut()
                    .insert("Retry-After", HeaderValue::from(secs));
            }
            resp
        }
        Ok(EvictOutcome::Lagging { pdb }) => lagging_budget(&pdb, 10),
        Ok(EvictOutcome::TooManyBudgets) => {
            // S4: no reason, no details.
            let message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";
            json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                status_body(500, None, Some(message.into()), None),
            )
        }
        Err(e) => store_failure(Some(pods), &e),
    }
}

/// The 429 for a budget the disruption controller has not observed yet (eviction.go
/// createTooManyRequestsError; S6 verbatim): Retry-After and details.retryAfterSeconds.
fn lagging_budget(pdb: &str, retry_after: u32) -> Response<Body> {
    let details = Details {
        causes: vec![Cause {
            reason: "DisruptionBudget".into(),
            message: format!("The disruption budget {pdb} is still being processed by the server."),
        }],
        retry_after_seconds: Some(retry_after),
        ..Details::default()
    };
    let mut resp = json_response(
        StatusCode::TOO_MANY_REQUESTS,
        status_body(
            429,
            Some("TooManyRequests"),
            Some("Cannot evict pod as it would violate the pod's disruption budget.".into()),
            Some(details),
        ),
    );
    resp.headers_mut()
        .insert("Retry-After", HeaderValue::from(retry_after));
    resp
}

/// The `spec.nodeName` an access review's `resourceAttributes.fieldSelector`
/// (authorization.k8s.io/v1 from 1.31) requires: `rawSelector` (`spec.nodeName=N`), or a
/// `requirements` entry with operator `In` and one value, as the Node authorizer reads them.
fn review_field_node(selector: Option<&Value>) -> Option<String> {
    let selector = selector?;
    if let Some(raw) = selector.get("rawSelector").and_then(Value::as_str) {
        return FieldSelector::parse(raw, |_| true)
            .ok()?
            .required("spec.nodeName")
            .map(str::to_owned);
    }
    selector
        .get("requirements")?
        .as_array()?
        .iter()
        .find(|r| r.get("key").and_then(Value::as_str) == Some("spec.nodeName"))
        .filter(|r| r.get("operator").and_then(Value::as_str) == Some("In"))
        .and_then(|r| match r.get("values")?.as_array()?.as_slice() {
            [one] => one.as_str().map(str::to_owned),
            _ => None,
        })
}

/// `kubectl auth whoami`'s SelfSubjectReview (authentication.k8s.io/v1, GA in 1.28): who the
/// request's credentials are. Every authenticated user may ask (the bootstrap
/// `system:basic-user` ClusterRole grants `create` on it), so it is not authorized here.
fn self_subject_review(call: &Call) -> Response<Body> {
    let answer = json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {
            "username": call.identity.user(),
            "groups": call.identity.groups(),
        }},
    });
    value_response(StatusCode::CREATED, &answer)
}

fn self_subject_access_review(app: &App, call: &Call) -> Response<Body> {
    let protobuf = call.content_type.to_ascii_lowercase().contains("protobuf");
    let body = match protobuf.then(|| crate::proto::self_subject_access_review(&call.body)) {
        Some(Some(v)) => v,
        Some(None) => {
            return failure(
                400,
                "the protobuf SelfSubjectAccessReview body could not be read",
                None,
            );
        }
        None => match parse_body(call) {
            Ok(v) => v,
            Err(r) => return *r,
        },
    };
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let (allowed, reason) = match spec.get("resourceAttributes") {
        Some(ra) => {
            let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let attrs = Attributes {
                verb: s("verb"),
                group: s("group"),
                resource: s("resource"),
                subresource: s("subresource"),
                namespace: s("namespace"),
                name: s("name"),
            };
            let field_node = review_field_node(ra.get("fieldSelector"));
            let decision = app.authorize("review", &call.identity, &attrs, field_node.as_deref());
            let ok = decision.is_ok();
            let reason = match decision {
                Ok(()) => match &call.identity {
                    Identity::Admin => {
                        "allowed: the fake's admin identity may do anything".to_string()
                    }
                    Identity::Node(_) => "allowed by the fake's system:node rules".to_string(),
                    // The binding that allowed it, as the RBAC authorizer says.
                    Identity::ServiceAccount { .. } => app
                        .policy()
                        .allowed_by(&call.identity.user(), &call.identity.groups(), &attrs)
                        .unwrap_or_default(),
                },
                Err(reason) if reason.is_empty() => attrs.denial(&call.identity),
                Err(reason) => reason,
            };
            (ok, reason)
        }
        None => (
            call.identity == Identity::Admin,
            "non-resource requests: only the admin identity".to_string(),
        ),
    };
    let mut status = json!({"allowed": allowed, "reason": reason});
    if !allowed && let Value::Object(m) = &mut status {
        m.insert("denied".into(), json!(true));
    }
    let answer = json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    });
    value_response(StatusCode::CREATED, &answer)
}
