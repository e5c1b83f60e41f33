//! One eviction: the policy/v1 Eviction body, the POST, and the pure [`classify`] of the answer
//! (with [`throttled`] first: a 429 of the API server's own flow control is not a budget's).
//!
//! The body is built here (kube 5's `evict` drops `deleteOptions`) with `preconditions.uid`, so a
//! replacement pod of the same name is never evicted, and the configured grace period. The POST
//! is raw because kube's typed call hides the Retry-After header and the flow-control headers.

use std::time::Duration;

use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use tokio::time::Instant;

use super::gone::is_pod_not_found;
use crate::api::error::Kind;
use crate::api::path::segment;
use crate::api::{ApiError, Clients};
use crate::policy::plan::PlannedPod;
use crate::report::GraceFit;
use crate::text;

/// The server's answer to an eviction.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Accepted,
    /// The server's NotFound for the pod, or a 409 naming the UID precondition (the name holds
    /// another pod): gone, once the pod watch or a GET confirms it ([`super::gone`]).
    Gone,
    /// Another 409 (the pod changed while the server evicted it): try again soon; the pod watch
    /// decides whether it is still the planned pod.
    Conflict(String),
    /// 429.
    TooMany {
        retry_after: Option<Duration>,
        /// The budget's name (without namespace), when the answer names it.
        budget: Option<String>,
        message: String,
    },
    /// 429 from the API server's flow control (API priority and fairness, or the max-in-flight
    /// limit where that is off), not from a budget: try again after `retry_after`.
    Throttled {
        retry_after: Option<Duration>,
        /// The UIDs the server names in `X-Kubernetes-PF-PriorityLevel-UID` and
        /// `X-Kubernetes-PF-FlowSchema-UID` (`kubectl get prioritylevelconfigurations,flowschemas
        /// -o custom-columns=NAME:.metadata.name,UID:.metadata.uid` maps them to names).
        priority_level: Option<String>,
        flow_schema: Option<String>,
    },
    /// Anything else (403, 500 for overlapping budgets, ...): reported, retried slowly.
    Refused {
        code: u16,
        message: String,
    },
}

/// "The disruption budget web-pdb needs 2 healthy pods and has 2 currently" -> "web-pdb".
pub fn budget_name(message: &str) -> Option<String> {
    let rest = message.split("disruption budget ").nth(1)?;
    let name = rest.split_whitespace().next()?;
    Some(name.to_string())
}

pub fn eviction_body(pod: &PlannedPod, grace: Option<Duration>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            grace_period_seconds: grace.map(|g| i64::try_from(g.as_secs()).unwrap_or(i64::MAX)),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        }),
    }
}

/// The grace period to send when `fit` (`drain.fit_grace_to_deadline`) is on and `left` is the
/// time left to the deadline graces end by (the work deadline, or the end of the stop phase the
/// drain goes on in: [`super::grace_deadline`]): the configured one, else none (the pod's own `pod_seconds`);
/// when that is longer than `left`, `left` in whole seconds (at least 1 s, since 0 would mean a
/// force deletion) and the [`GraceFit`] to report. Pure.
pub fn fitted_grace(
    configured: Option<Duration>,
    pod_seconds: i64,
    left: Duration,
    fit: bool,
) -> (Option<Duration>, Option<GraceFit>) {
    let wanted = configured.map_or(pod_seconds, |g| {
        i64::try_from(g.as_secs()).unwrap_or(i64::MAX)
    });
    let room = i64::try_from(left.as_secs()).unwrap_or(i64::MAX).max(1);
    if !fit || wanted <= room {
        return (configured, None);
    }
    let to = u64::try_from(room).unwrap_or(1);
    (
        Some(Duration::from_secs(to)),
        Some(GraceFit {
            from_seconds: wanted,
            to_seconds: room,
        }),
    )
}

/// The flow-control headers the apiserver puts on every answer it classified (k8s.io/api
/// `flowcontrol/v1/types.go`).
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";

/// `Some(Answer::Throttled)` when a 429 comes from the API server's flow control rather than
/// from a budget. The two differ in their body: the eviction subresource refuses for a budget
/// with a `metav1.Status` (k8s.io/apiserver `pkg/endpoints/handlers/responsewriters`), while the
/// priority-and-fairness filter (k8s.io/apiserver `pkg/server/filters/priority-and-fairness.go`,
/// `tooManyRequests`) and the max-in-flight filter answer in plain text, "Too many requests,
/// please try again later.", with `Retry-After`. The flow-control headers cannot tell them apart:
/// the filter sets them on every request it classified, a budget's 429 included. Pure.
pub fn throttled(code: u16, headers: &http::HeaderMap, body: &[u8]) -> Option<Answer> {
    let is_status = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("kind").and_then(|k| k.as_str()) == Some("Status"));
    if code != 429 || is_status {
        return None;
    }
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    Some(Answer::Throttled {
        retry_after: retry_after_seconds(headers)
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
        priority_level: text(PRIORITY_LEVEL_UID_HEADER),
        flow_schema: text(FLOW_SCHEMA_UID_HEADER),
    })
}

/// The `Retry-After` header in whole seconds (the form the apiserver sends).
fn retry_after_seconds(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// What an eviction answer means, from its status code, its Retry-After header (seconds) and
/// its body. `Err` is server trouble (a 5xx other than the overlapping-budgets 500), worth a
/// quick retry. Pure.
pub fn classify(code: u16, header_retry: Option<u64>, body: &[u8]) -> Result<Answer, Kind> {
    let status: Option<kube::core::Status> = serde_json::from_slice(body).ok();
    let message = status
        .as_ref()
        .map(|s| s.message.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    Ok(match code {
        200..=299 => Answer::Accepted,
        // Only the server's NotFound for a pod; a proxy's page, a server without the eviction
        // subresource or a Status about something else is no news of the pod.
        404 if status.as_ref().is_some_and(|s| is_pod_not_found(s, None)) => Answer::Gone,
        404 => Answer::Refused {
            code,
            message: format!(
                "the answer is not the API server's NotFound for this pod (a proxy, or a server \
                 without the eviction subresource?): {}",
                text::clean(&message, 200)
            ),
        },
        409 if message.contains("UID in precondition") => Answer::Gone,
        409 => Answer::Conflict(message),
        429 => {
            let details = status.as_ref().and_then(|s| s.details.as_ref());
            let body_retry = details
                .map(|d| u64::from(d.retry_after_seconds))
                .filter(|s| *s > 0);
            let cause = details
                .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))
                .map(|c| c.message.clone());
            Answer::TooMany {
                retry_after: header_retry
                    .filter(|s| *s > 0)
                    .or(body_retry)
                    .map(Duration::from_secs),
                budget: cause
                    .as_deref()
                    .and_then(budget_name)
                    .or_else(|| budget_name(&message)),
                message: cause.unwrap_or(message),
            }
        }
        // More than one budget covers the pod: the eviction API cannot help, retry slowly.
        500 if message.contains("PodDisruptionBudget") => Answer::Refused { code, message },
        c if c >= 500 => {
            return Err(Kind::Status {
                code,
                reason: status.map(|s| s.reason).unwrap_or_default(),
                message,
                retry_after: header_retry.map(Duration::from_secs),
            });
        }
        code => Answer::Refused { code, message },
    })
}

/// POSTs the Eviction of `pod`, bounded by min(request timeout, time left to `deadline`).
pub async fn post(
    clients: &Clients,
    pod: &PlannedPod,
    grace: Option<Duration>,
    deadline: Instant,
) -> Result<Answer, ApiError> {
    let object = format!("pod {}", pod.key());
    let bad = |e: crate::api::path::BadName| {
        ApiError::new(&object, &clients.server, Kind::Other(e.to_string()))
    };
    let (namespace, name) = (
        segment(&pod.namespace).map_err(bad)?,
        segment(&pod.name).map_err(bad)?,
    );
    let body = serde_json::to_vec(&eviction_body(pod, grace))
        .map_err(|e| clients.error(&object, kube::Error::SerdeError(e)))?;
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .header(http::header::ACCEPT, "application/json")
    .body(kube::client::Body::from(body))
    .map_err(|e| clients.error(&object, kube::Error::HttpError(e)))?;
    let send = async {
        let response = clients.api.send(request).await?;
        let code = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect_bytes().await?;
        Ok((code, headers, bytes))
    };
    let (code, headers, bytes) = clients.once(deadline, &object, send).await?;
    if let Some(answer) = throttled(code, &headers, &bytes) {
        return Ok(answer);
    }
    classify(code, retry_after_seconds(&headers), &bytes)
        .map_err(|kind| ApiError::new(&object, &clients.server, kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn budget_name_from_the_api_message() {
        assert_eq!(
            budget_name(
                "The disruption budget guarded-pdb needs 1 healthy pods and has 1 currently"
            )
            .as_deref(),
            Some("guarded-pdb")
        );
        assert_eq!(
            budget_name("Cannot evict pod as it would violate the pod's disruption budget."),
            None
        );
        assert_eq!(budget_name("no budget here"), None);
    }

    #[test]
    fn a_grace_period_longer_than_the_time_left_is_cut_to_it() {
        let s = Duration::from_secs;
        // The pod's own 300 s with 12.9 s left: 12 s (whole seconds, rounded down).
        assert_eq!(
            fitted_grace(None, 300, Duration::from_millis(12_900), true),
            (
                Some(s(12)),
                Some(GraceFit {
                    from_seconds: 300,
                    to_seconds: 12
                })
            )
        );
        // Fits: the pod's own period stays (nothing sent), a configured one is sent as is.
        assert_eq!(fitted_grace(None, 30, s(30), true), (None, None));
        assert_eq!(
            fitted_grace(Some(s(5)), 300, s(10), true),
            (Some(s(5)), None)
        );
        // A configured period is what gets cut.
        assert_eq!(
            fitted_grace(Some(s(60)), 5, s(20), true).1,
            Some(GraceFit {
                from_seconds: 60,
                to_seconds: 20
            })
        );
        // Never below 1 s (0 would be a force deletion).
        assert_eq!(
            fitted_grace(None, 30, Duration::from_millis(200), true).0,
            Some(s(1))
        );
        // Off: untouched.
        assert_eq!(fitted_grace(None, 300, s(3), false), (None, None));
    }

    #[test]
    fn eviction_body_carries_delete_options_in_camel_case() {
        let pod = PlannedPod {
            last: None,
            namespace: "work".into(),
            name: "web-1".into(),
            uid: "u-1".into(),
            action: crate::policy::filters::Action::Evict,
            reason: crate::policy::filters::Reason::Default,
            order: Some(0),
            claims: Vec::new(),
            grace_seconds: 30,
            labels: Default::default(),
        };
        let v = serde_json::to_value(eviction_body(&pod, Some(Duration::from_secs(7)))).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "web-1", "namespace": "work"},
                "deleteOptions": {"gracePeriodSeconds": 7, "preconditions": {"uid": "u-1"}}
            })
        );
    }

    fn body(v: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn a_plain_text_429_is_flow_control_and_a_status_429_a_budget_whatever_the_headers() {
        let mut headers = http::HeaderMap::new();
        headers.insert(PRIORITY_LEVEL_UID_HEADER, "pl-uid".parse().unwrap());
        headers.insert(FLOW_SCHEMA_UID_HEADER, "fs-uid".parse().unwrap());
        let budget = body(
            json!({"kind": "Status", "apiVersion": "v1", "code": 429, "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget."}),
        );
        assert_eq!(throttled(429, &headers, &budget), None);
        headers.insert(http::header::RETRY_AFTER, "3".parse().unwrap());
        let text = b"Too many requests, please try again later.\n";
        assert_eq!(
            throttled(429, &headers, text),
            Some(Answer::Throttled {
                retry_after: Some(Duration::from_secs(3)),
                priority_level: Some("pl-uid".into()),
                flow_schema: Some("fs-uid".into()),
            })
        );
        // The max-in-flight filter (priority and fairness off) sends no flow-control headers.
        let mut bare = http::HeaderMap::new();
        bare.insert(http::header::RETRY_AFTER, "1".parse().unwrap());
        assert!(matches!(
            throttled(429, &bare, text),
            Some(Answer::Throttled {
                priority_level: None,
                flow_schema: None,
                ..
            })
        ));
        assert_eq!(throttled(503, &headers, text), None);
        assert_eq!(throttled(201, &headers, b"{}"), None);
    }

    #[test]
    fn answers_are_classified_by_code_and_status() {
        assert_eq!(classify(201, None, b"{}"), Ok(Answer::Accepted));
        let not_found = body(json!({"kind": "Status", "status": "Failure", "code": 404,
            "reason": "NotFound", "message": "pods \"web-1\" not found",
            "details": {"name": "web-1", "kind": "pods"}}));
        assert_eq!(classify(404, None, &not_found), Ok(Answer::Gone));
        for other in [
            b"<html><body>404 Not Found</body></html>".to_vec(),
            b"404 page not found".to_vec(),
            b"{}".to_vec(),
            body(json!({"code": 404, "reason": "NotFound", "details": {"kind": "namespaces"}})),
        ] {
            assert!(
                matches!(
                    classify(404, None, &other),
                    Ok(Answer::Refused { code: 404, .. })
                ),
                "{}",
                String::from_utf8_lossy(&other)
            );
        }
        let uid = body(
            json!({"code": 409, "message": "Precondition failed: UID in precondition: u-1, UID in object meta: u-2"}),
        );
        assert_eq!(classify(409, None, &uid), Ok(Answer::Gone));
        let other = body(json!({"code": 409, "message": "the object has been modified"}));
        assert!(matches!(
            classify(409, None, &other),
            Ok(Answer::Conflict(_))
        ));
        let blocked = body(
            json!({"code": 429, "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}]}}),
        );
        assert_eq!(
            classify(429, Some(10), &blocked),
            Ok(Answer::TooMany {
                retry_after: Some(Duration::from_secs(10)),
                budget: Some("web-pdb".into()),
                message: "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
                    .into(),
            })
        );
        let two = body(
            json!({"code": 500, "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}),
        );
        assert!(matches!(
            classify(500, None, &two),
            Ok(Answer::Refused { code: 500, .. })
        ));
        assert!(matches!(
            classify(503, Some(2), b"upstream down"),
            Err(Kind::Status {
                code: 503,
                retry_after: Some(_),
                ..
            })
        ));
        assert!(matches!(
            classify(
                403,
                None,
                &body(json!({"code": 403, "message": "forbidden"}))
            ),
            Ok(Answer::Refused { code: 403, .. })
        ));
    }
}
