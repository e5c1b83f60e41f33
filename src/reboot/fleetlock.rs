//! The FleetLock protocol zincati speaks before it reboots a Fedora CoreOS node
//! (`coreos/zincati/docs/development/fleetlock/protocol.md`): a request read and checked into a
//! typed value, and the protocol's error body, as pure functions.
//!
//! The protocol: `POST` to `/v1/pre-reboot` (take a reboot slot; asked again by a holder, it
//! is granted again) or `/v1/steady-state` (give back any slot held), relative to the base URL
//! zincati is given; the header `fleet-lock-protocol: true` on every request (against a
//! request redirected there by mistake); a JSON body `{"client_params": {"id": ..., "group":
//! ...}}`, both non-empty strings, the group matching `^[a-zA-Z0-9.-]+$`; 200 for success, any
//! other status a failure the client retries; errors as JSON `{"kind": ..., "value": ...}`,
//! `kind` from a small fixed set (zincati counts it in its metrics), `value` for people.
//! The server that answers over HTTP is `server.rs`.

use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;

/// The header every request carries, with [`HEADER_VALUE`].
pub const HEADER: &str = "fleet-lock-protocol";
pub const HEADER_VALUE: &str = "true";
/// A body larger than this is refused unread: the protocol's is under a hundred bytes.
pub const MAX_BODY: usize = 4096;
/// The longest `id` or `group` accepted: zincati's id is a 32-hex-digit app-specific machine ID.
pub const MAX_PARAM: usize = 256;

/// The two operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `/v1/pre-reboot`: take (or hold again) a reboot slot.
    PreReboot,
    /// `/v1/steady-state`: give back any slot held.
    SteadyState,
}

impl Operation {
    /// The path below the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Operation::PreReboot => "/v1/pre-reboot",
            Operation::SteadyState => "/v1/steady-state",
        }
    }
}

/// A request that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub operation: Operation,
    /// The client's persistent identifier (case-sensitive).
    pub id: String,
    /// The client's reboot group.
    pub group: String,
}

/// Every `kind` this server answers with: the protocol asks for a small fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No such path below the base URL.
    NotFound,
    /// Not a `POST`.
    MethodNotAllowed,
    /// The `fleet-lock-protocol: true` header is missing or has another value.
    MissingProtocolHeader,
    /// The body is not the protocol's JSON.
    BadBody,
    /// Every drain slot is taken (zincati's own example of a kind).
    SemaphoreFull,
    /// No maintenance window is open.
    OutsideWindow,
    /// An admin holds the node's reboots (or the pause, a blocking pod, the forecast, a read
    /// that failed, or reasons of several kinds at once).
    Held,
    /// Too many other nodes of the slot group are NotReady or cordoned (`[fleet] max_unready`).
    UnreadyNodes,
    /// An alert of `[fleet.alerts]` is active.
    AlertsFiring,
    /// The node's drain is running; ask again.
    Draining,
    /// The node's drain ended without emptying it.
    DrainIncomplete,
    /// The node was drained for a reboot that did not come in its time (the agent did not
    /// reboot within its hand-over): it was restored, and is tried again after a pause.
    Overdue,
    /// The reboot's shutdown was cancelled; tried again after a pause.
    Cancelled,
    /// The reboot failed (the slots unreadable, logind refusing, another program blocking
    /// shutdowns); tried again after a pause.
    Failed,
    /// The request was heard: the node's holds are judged, and its drain starts when they allow.
    Pending,
    /// steady-state: the node's drain is being undone (or its slot kept `release_delay`).
    Restoring,
    /// The caller is not the update agent (the server's own check, before anything is asked).
    NotTheAgent,
    /// `client_params.id` names another node than this one.
    NotThisNode,
    /// The daemon did not answer in time, or is not answering FleetLock requests now.
    NoAnswer,
}

impl Kind {
    /// The `kind` string of the error body.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NotFound => "not_found",
            Kind::MethodNotAllowed => "method_not_allowed",
            Kind::MissingProtocolHeader => "missing_protocol_header",
            Kind::BadBody => "bad_request_body",
            Kind::SemaphoreFull => "failed_lock_semaphore_full",
            Kind::OutsideWindow => "outside_maintenance_window",
            Kind::Held => "reboot_held",
            Kind::UnreadyNodes => "unready_nodes",
            Kind::AlertsFiring => "alerts_firing",
            Kind::Draining => "drain_in_progress",
            Kind::DrainIncomplete => "drain_incomplete",
            Kind::Overdue => "reboot_overdue",
            Kind::Cancelled => "reboot_cancelled",
            Kind::Failed => "reboot_failed",
            Kind::Pending => "reboot_pending",
            Kind::Restoring => "restore_in_progress",
            Kind::NotTheAgent => "caller_not_update_agent",
            Kind::NotThisNode => "not_this_node",
            Kind::NoAnswer => "no_answer",
        }
    }
}

/// A refusal: the status, the `kind` and the `value` of the error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub kind: Kind,
    pub value: String,
}

impl Refusal {
    pub fn new(status: StatusCode, kind: Kind, value: impl Into<String>) -> Refusal {
        Refusal {
            status,
            kind,
            value: value.into(),
        }
    }

    /// The error body the protocol asks for: `{"kind": "...", "value": "..."}`.
    pub fn body(&self) -> String {
        serde_json::json!({ "kind": self.kind.as_str(), "value": self.value }).to_string()
    }
}

/// The body's shape; fields beyond these are ignored, as a newer client may send more.
#[derive(Deserialize)]
struct Body {
    client_params: Option<ClientParams>,
}

#[derive(Deserialize)]
struct ClientParams {
    id: Option<serde_json::Value>,
    group: Option<serde_json::Value>,
}

/// Reads one request: `path` is what follows the base URL. Checks, in order: the path, the
/// method, the header, the body's size, its JSON, `client_params`, `id` and `group`; the
/// first failure is the answer, with a 4xx status. [`head`] and [`body`] are its two halves,
/// for a server that checks the head before it reads any of the body.
pub fn read(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Request, Refusal> {
    let operation = head(method, path, headers)?;
    self::body(operation, body)
}

/// The path, the method and the header: what can be checked before the body is read.
pub fn head(method: &Method, path: &str, headers: &HeaderMap) -> Result<Operation, Refusal> {
    let operation = [Operation::PreReboot, Operation::SteadyState]
        .into_iter()
        .find(|op| op.path() == path)
        .ok_or_else(|| {
            Refusal::new(
                StatusCode::NOT_FOUND,
                Kind::NotFound,
                format!(
                    "no FleetLock endpoint at {path:?}; the endpoints are /v1/pre-reboot and \
                     /v1/steady-state"
                ),
            )
        })?;
    if method != Method::POST {
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            Kind::MethodNotAllowed,
            format!("{} takes POST, not {method}", operation.path()),
        ));
    }
    let header_ok = headers
        .get_all(HEADER)
        .iter()
        .any(|v| v.as_bytes() == HEADER_VALUE.as_bytes());
    if !header_ok {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            Kind::MissingProtocolHeader,
            format!("FleetLock requests carry the header `{HEADER}: {HEADER_VALUE}`"),
        ));
    }
    Ok(operation)
}

/// A body larger than [`MAX_BODY`], refused with 413; `size` is the `Content-Length` when the
/// body is refused unread.
pub fn too_large(size: Option<u64>) -> Refusal {
    Refusal::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        Kind::BadBody,
        match size {
            Some(n) => format!("the body has {n} bytes; at most {MAX_BODY}"),
            None => format!("the body has more than {MAX_BODY} bytes; at most {MAX_BODY}"),
        },
    )
}

/// The body of a request for `operation`: its size, its JSON, `client_params`, `id`, `group`.
pub fn body(operation: Operation, body: &[u8]) -> Result<Request, Refusal> {
    let bad = |why: String| Refusal::new(StatusCode::BAD_REQUEST, Kind::BadBody, why);
    if body.len() > MAX_BODY {
        return Err(too_large(Some(body.len() as u64)));
    }
    let parsed: Body = serde_json::from_slice(body)
        .map_err(|e| bad(format!("the body is not a JSON object: {e}")))?;
    let params = parsed
        .client_params
        .ok_or_else(|| bad("the body has no `client_params` object".to_string()))?;
    let id = param(params.id, "id")?;
    let group = param(params.group, "group")?;
    if !group
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    {
        return Err(bad(format!(
            "`client_params.group` {group:?} has characters outside a-z, A-Z, 0-9, '.', '-'"
        )));
    }
    Ok(Request {
        operation,
        id,
        group,
    })
}

/// `client_params.NAME`: a non-empty string of at most [`MAX_PARAM`] bytes, or the 400
/// [`Kind::BadBody`] refusal that says what is wrong with it.
fn param(value: Option<serde_json::Value>, name: &str) -> Result<String, Refusal> {
    let why = match value {
        None => format!("`client_params.{name}` is missing"),
        Some(serde_json::Value::String(s)) if s.is_empty() => {
            format!("`client_params.{name}` is empty")
        }
        Some(serde_json::Value::String(s)) if s.len() > MAX_PARAM => format!(
            "`client_params.{name}` has {} bytes; at most {MAX_PARAM}",
            s.len()
        ),
        Some(serde_json::Value::String(s)) => return Ok(s),
        Some(_) => format!("`client_params.{name}` is not a string"),
    };
    Err(Refusal::new(StatusCode::BAD_REQUEST, Kind::BadBody, why))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(value: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = value {
            h.insert(HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const ZINCATI: &str =
        r#"{"client_params": {"group": "default", "id": "c988d2509fdf5cdcbed39037c56406fb"}}"#;

    #[test]
    fn zincatis_requests_are_read() {
        for (path, operation) in [
            ("/v1/pre-reboot", Operation::PreReboot),
            ("/v1/steady-state", Operation::SteadyState),
        ] {
            let request = read(
                &Method::POST,
                path,
                &headers(Some("true")),
                ZINCATI.as_bytes(),
            );
            assert_eq!(
                request,
                Ok(Request {
                    operation,
                    id: "c988d2509fdf5cdcbed39037c56406fb".into(),
                    group: "default".into(),
                })
            );
        }
        // Fields a newer client may add are ignored.
        let more = r#"{"client_params": {"id": "a", "group": "workers.eu-1", "x": 1}, "y": []}"#;
        let request = read(
            &Method::POST,
            "/v1/pre-reboot",
            &headers(Some("true")),
            more.as_bytes(),
        )
        .unwrap();
        assert_eq!(request.group, "workers.eu-1");
    }

    /// (method, path, header, body, status, kind, the value's start)
    type Case<'a> = (
        Method,
        &'a str,
        Option<&'a str>,
        &'a str,
        u16,
        Kind,
        &'a str,
    );

    /// Each request is refused with its case's status and kind, and a value that starts so.
    fn assert_refused(cases: Vec<Case<'_>>) {
        for (method, path, header, body, status, kind, value) in cases {
            let refusal = read(&method, path, &headers(header), body.as_bytes())
                .expect_err(&format!("{method} {path} {header:?} {body}"));
            assert_eq!(
                (refusal.status.as_u16(), refusal.kind),
                (status, kind),
                "{method} {path} {header:?} {body}: {refusal:?}"
            );
            assert!(refusal.value.starts_with(value), "{refusal:?}");
        }
    }

    /// A wrong path, method or protocol header is refused.
    #[test]
    fn a_bad_path_method_or_header_is_refused_with_a_4xx_kind_and_value() {
        assert_refused(vec![
            (
                Method::POST,
                "/v1/reboot",
                Some("true"),
                ZINCATI,
                404,
                Kind::NotFound,
                "no FleetLock endpoint at \"/v1/reboot\"",
            ),
            (
                Method::GET,
                "/v1/pre-reboot",
                Some("true"),
                ZINCATI,
                405,
                Kind::MethodNotAllowed,
                "/v1/pre-reboot takes POST, not GET",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                None,
                ZINCATI,
                400,
                Kind::MissingProtocolHeader,
                "FleetLock requests carry the header `fleet-lock-protocol: true`",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("false"),
                ZINCATI,
                400,
                Kind::MissingProtocolHeader,
                "FleetLock requests carry",
            ),
        ]);
    }

    /// A body that is not the protocol's JSON object, or is too large, is refused.
    #[test]
    fn a_body_that_is_not_the_protocols_json_is_refused_with_a_4xx_kind_and_value() {
        let huge = format!(
            r#"{{"client_params": {{"id": "a", "group": "g"}}, "pad": "{}"}}"#,
            " ".repeat(MAX_BODY)
        );
        assert_refused(vec![
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                "{",
                400,
                Kind::BadBody,
                "the body is not a JSON object",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                "[]",
                400,
                Kind::BadBody,
                "the body is not a JSON object",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                "{}",
                400,
                Kind::BadBody,
                "the body has no `client_params` object",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                &huge,
                413,
                Kind::BadBody,
                "the body has 4",
            ),
        ]);
    }

    /// An `id` missing, empty, not a string or too long is refused.
    #[test]
    fn a_bad_id_is_refused_with_a_4xx_kind_and_value() {
        let long = format!(
            r#"{{"client_params": {{"id": "{}", "group": "g"}}}}"#,
            "a".repeat(MAX_PARAM + 1)
        );
        assert_refused(vec![
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                r#"{"client_params": {"group": "g"}}"#,
                400,
                Kind::BadBody,
                "`client_params.id` is missing",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                r#"{"client_params": {"id": "", "group": "g"}}"#,
                400,
                Kind::BadBody,
                "`client_params.id` is empty",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                r#"{"client_params": {"id": 7, "group": "g"}}"#,
                400,
                Kind::BadBody,
                "`client_params.id` is not a string",
            ),
            (
                Method::POST,
                "/v1/pre-reboot",
                Some("true"),
                &long,
                400,
                Kind::BadBody,
                "`client_params.id` has 257 bytes; at most 256",
            ),
        ]);
    }

    /// A `group` missing, empty or with characters outside `^[a-zA-Z0-9.-]+$` is refused.
    #[test]
    fn a_bad_group_is_refused_with_a_4xx_kind_and_value() {
        assert_refused(vec![
            (
                Method::POST,
                "/v1/steady-state",
                Some("true"),
                r#"{"client_params": {"id": "a"}}"#,
                400,
                Kind::BadBody,
                "`client_params.group` is missing",
            ),
            (
                Method::POST,
                "/v1/steady-state",
                Some("true"),
                r#"{"client_params": {"id": "a", "group": ""}}"#,
                400,
                Kind::BadBody,
                "`client_params.group` is empty",
            ),
            (
                Method::POST,
                "/v1/steady-state",
                Some("true"),
                r#"{"client_params": {"id": "a", "group": "a b"}}"#,
                400,
                Kind::BadBody,
                "`client_params.group` \"a b\" has characters outside",
            ),
            (
                Method::POST,
                "/v1/steady-state",
                Some("true"),
                r#"{"client_params": {"id": "a", "group": "a/b"}}"#,
                400,
                Kind::BadBody,
                "`client_params.group` \"a/b\" has characters outside",
            ),
        ]);
    }

    /// The head is judged before the body: a request wrong in both is refused for its head,
    /// as the server refuses it before reading the body.
    #[test]
    fn the_head_is_checked_before_the_body() {
        let refusal = read(&Method::GET, "/v1/x", &headers(None), b"{").unwrap_err();
        assert_eq!(refusal.kind, Kind::NotFound);
        let refusal = read(&Method::GET, "/v1/pre-reboot", &headers(None), b"{").unwrap_err();
        assert_eq!(refusal.kind, Kind::MethodNotAllowed);
        let refusal = read(&Method::POST, "/v1/pre-reboot", &headers(None), b"{").unwrap_err();
        assert_eq!(refusal.kind, Kind::MissingProtocolHeader);
    }

    #[test]
    fn the_error_body_is_the_protocols_json() {
        let refusal = Refusal::new(
            StatusCode::CONFLICT,
            Kind::SemaphoreFull,
            "both drain slots are taken (by worker-1, worker-2)",
        );
        let body: serde_json::Value = serde_json::from_str(&refusal.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "kind": "failed_lock_semaphore_full",
                "value": "both drain slots are taken (by worker-1, worker-2)",
            })
        );
    }
}
