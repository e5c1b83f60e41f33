//! The HTTP control endpoint under `/_fake/`, for shell scripts (curl) driving the binary:
//! upsert objects, set pods Ready, change taints as another writer, read recorded requests,
//! set fault knobs, the 410 knob, take the listener down and back, stop and start a node's
//! simulated kubelet, read and set the simulation's timings. Routes are listed in
//! docs/design.md.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Response, StatusCode};
use serde_json::{Value, json};

use crate::faults::FaultState;
use crate::seed;
use crate::server::{self, App, Body, query_pairs};
use crate::store::StoreError;

fn answer(status: StatusCode, value: &Value) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(serde_json::to_vec(value).unwrap_or_default())).boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response<Body> {
    answer(status, &json!({"error": message.to_string()}))
}

fn store_error(e: &StoreError) -> Response<Body> {
    let status = match e {
        StoreError::NotFound { .. } | StoreError::UnknownKind { .. } => StatusCode::NOT_FOUND,
        StoreError::Conflict { .. } | StoreError::AlreadyExists { .. } => StatusCode::CONFLICT,
        _ => StatusCode::BAD_REQUEST,
    };
    error(status, e)
}

pub(crate) fn handle(
    app: &Arc<App>,
    method: &Method,
    path: &str,
    query: &str,
    body: &Bytes,
) -> Response<Body> {
    let params = query_pairs(query);
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).skip(1).collect();
    let text = String::from_utf8_lossy(body);
    match (method, segs.as_slice()) {
        (&Method::GET, ["healthz"]) => answer(StatusCode::OK, &json!({"ok": true})),
        (&Method::GET, ["resource-version"]) => answer(
            StatusCode::OK,
            &json!({"resourceVersion": app.store.resource_version().to_string()}),
        ),
        (&Method::POST, ["objects"]) => {
            let docs = match seed::parse_documents(&text, "control request body") {
                Ok(d) => d,
                Err(e) => return error(StatusCode::BAD_REQUEST, e),
            };
            let mut stored = Vec::new();
            for doc in docs {
                match app.store.upsert(doc) {
                    Ok(v) => stored.push(v),
                    Err(e) => return store_error(&e),
                }
            }
            answer(StatusCode::OK, &Value::Array(stored))
        }
        (&Method::GET, ["objects"]) => {
            let Some(kind) = param("kind") else {
                return error(StatusCode::BAD_REQUEST, "query parameter kind is required");
            };
            let namespace = param("namespace");
            match param("name") {
                Some(name) => match app.store.get(&kind, namespace.as_deref(), &name) {
                    Some(v) => answer(StatusCode::OK, &v),
                    None => error(StatusCode::NOT_FOUND, format!("{kind} {name} not found")),
                },
                None => answer(
                    StatusCode::OK,
                    &Value::Array(app.store.list(&kind, namespace.as_deref())),
                ),
            }
        }
        (&Method::DELETE, ["objects"]) => {
            let (Some(kind), Some(name)) = (param("kind"), param("name")) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "query parameters kind and name are required",
                );
            };
            match app
                .store
                .remove(&kind, param("namespace").as_deref(), &name)
            {
                Ok(v) => answer(StatusCode::OK, &v),
                Err(e) => store_error(&e),
            }
        }
        (&Method::POST, ["pods", namespace, name, "ready"]) => {
            let ready = param("ready").is_none_or(|r| r != "false");
            match app.store.set_pod_ready(namespace, name, ready) {
                Ok(v) => answer(StatusCode::OK, &v),
                Err(e) => store_error(&e),
            }
        }
        (&Method::POST, ["nodes", node, "taints"]) => {
            let taint: Value = match serde_json::from_str(&text) {
                Ok(t) => t,
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("taint body is not JSON: {e}"),
                    );
                }
            };
            match app.store.set_node_taint(node, taint) {
                Ok(v) => answer(StatusCode::OK, &v),
                Err(e) => store_error(&e),
            }
        }
        (&Method::DELETE, ["nodes", node, "taints"]) => {
            let Some(key) = param("key") else {
                return error(StatusCode::BAD_REQUEST, "query parameter key is required");
            };
            match app
                .store
                .remove_node_taint(node, &key, param("effect").as_deref())
            {
                Ok(v) => answer(StatusCode::OK, &v),
                Err(e) => store_error(&e),
            }
        }
        (&Method::POST, ["nodes", node, "kubelet"]) => {
            let result = match param("running").as_deref() {
                Some("false") => app.store.stop_kubelet(node),
                None | Some("true") => app.store.start_kubelet(node),
                Some(other) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("running must be true or false, got {other:?}"),
                    );
                }
            };
            match result {
                Ok(()) => answer(
                    StatusCode::OK,
                    &json!({"node": node, "running": app.store.kubelet_running(node)}),
                ),
                Err(e) => store_error(&e),
            }
        }
        (&Method::GET, ["simulation"]) => answer(StatusCode::OK, &app.store.timings().to_json()),
        (&Method::PUT, ["simulation"]) => {
            let body: Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("simulation body is not JSON: {e}"),
                    );
                }
            };
            let mut timings = app.store.timings();
            if let Err(e) = timings.merge_json(&body) {
                return error(StatusCode::BAD_REQUEST, format!("simulation body: {e}"));
            }
            app.store.set_timings(timings);
            answer(StatusCode::OK, &app.store.timings().to_json())
        }
        (&Method::GET, ["requests"]) => match serde_json::to_value(app.recorder.requests()) {
            Ok(v) => answer(StatusCode::OK, &v),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        (&Method::DELETE, ["requests"]) => {
            app.recorder.clear();
            answer(StatusCode::OK, &json!({"cleared": true}))
        }
        (&Method::GET, ["faults"]) => match serde_json::to_value(app.faults.get()) {
            Ok(v) => answer(StatusCode::OK, &v),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        (&Method::PUT, ["faults"]) => match serde_json::from_str::<FaultState>(&text) {
            Ok(state) => {
                app.faults.set(state);
                answer(
                    StatusCode::OK,
                    &serde_json::to_value(app.faults.get()).unwrap_or(Value::Null),
                )
            }
            Err(e) => error(StatusCode::BAD_REQUEST, format!("faults body: {e}")),
        },
        (&Method::DELETE, ["faults"]) => {
            app.faults.clear();
            answer(StatusCode::OK, &json!({"cleared": true}))
        }
        (&Method::POST, ["expire"]) => {
            app.store.expire_resource_versions();
            answer(
                StatusCode::OK,
                &json!({"expiredBelow": app.store.resource_version().to_string()}),
            )
        }
        (&Method::POST, ["listener", "restart"]) => {
            let down: f64 = match param("down_seconds").map(|s| s.parse::<f64>()) {
                None => 1.0,
                Some(Ok(s)) if s.is_finite() && (0.0..=3600.0).contains(&s) => s,
                Some(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "down_seconds must be a number of seconds in 0..=3600",
                    );
                }
            };
            let app = app.clone();
            tokio::spawn(async move {
                // Let this answer reach the client before the connections drop.
                tokio::time::sleep(Duration::from_millis(100)).await;
                server::stop_listener(&app);
                tokio::time::sleep(Duration::from_secs_f64(down)).await;
                if let Err(e) = server::start_listener(&app, app.port) {
                    tracing::error!(error = %e, "could not bring the listener on 127.0.0.1:{} back", app.port);
                }
            });
            answer(StatusCode::ACCEPTED, &json!({"downSeconds": down}))
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!("no control route {method} {path}"),
        ),
    }
}
