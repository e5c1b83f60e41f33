//! What API priority and fairness adds to answers: the flow-control headers on every API answer
//! and the 429 it sends when it rejects a request (the `throttle` fault knob).
//!
//! As in k8s.io/apiserver `pkg/server/filters/priority-and-fairness.go`: `setResponseHeaders`
//! puts the UIDs (not the names) of the matched FlowSchema and PriorityLevelConfiguration on
//! every request the filter classified, served or rejected; a rejected one is answered by
//! `tooManyRequests`, which sets `Retry-After` and calls Go's `http.Error` with "Too many
//! requests, please try again later." (so the body is that text and a newline, `Content-Type:
//! text/plain; charset=utf-8`, `X-Content-Type-Options: nosniff`), not a `metav1.Status` as
//! the eviction subresource's budget 429 is (written by
//! `pkg/endpoints/handlers/responsewriters`). The header names are those of k8s.io/api
//! `flowcontrol/v1/types.go` (`ResponseHeaderMatchedFlowSchemaUID`,
//! `ResponseHeaderMatchedPriorityLevelConfigurationUID`).
//!
//! The fake classifies nothing: every API answer names one fixed FlowSchema and priority level.

use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

use crate::server::{Body, full};

pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";
/// The UID every answer names as the matched FlowSchema.
pub const FLOW_SCHEMA_UID: &str = "5b0f3c2e-6a1d-4f8e-9c7b-0d2e4a6f8b1c";
/// The UID every answer names as the matched priority level.
pub const PRIORITY_LEVEL_UID: &str = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b";
/// The body of the apiserver's `tooManyRequests` (Go's `http.Error` adds the newline).
pub const REJECTION_BODY: &str = "Too many requests, please try again later.\n";

/// Adds the flow-control headers to an API answer.
pub fn classify(response: &mut Response<Body>) {
    let headers = response.headers_mut();
    headers.insert(
        FLOW_SCHEMA_UID_HEADER,
        HeaderValue::from_static(FLOW_SCHEMA_UID),
    );
    headers.insert(
        PRIORITY_LEVEL_UID_HEADER,
        HeaderValue::from_static(PRIORITY_LEVEL_UID),
    );
}

/// The answer to a request priority and fairness rejects, asking the client to come back in
/// `retry_after` seconds.
pub fn rejection(retry_after: u32) -> Response<Body> {
    let mut response = Response::new(full(REJECTION_BODY));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "X-Content-Type-Options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert("Retry-After", HeaderValue::from(retry_after));
    classify(&mut response);
    response
}
