//! Whether a pod an answer called gone really is. An eviction's 404 or its UID-precondition 409
//! is only what one endpoint said: a 404 from a proxy or an ingress, a server without the
//! eviction subresource, or a Status about another object says nothing about the pod. So a pod
//! counts as gone only when the pod watch has seen it go (deleted, replaced by another UID, bound
//! elsewhere; [`super::tracker`]) or one GET of the pod answers the API server's own NotFound
//! for that pod (reason `NotFound`, `details.kind` `pods`, `details.name` the pod's: the body the
//! real server sends for a missing pod), or shows another UID under its name.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::core::Status;
use tokio::time::Instant;

use crate::api::error::Kind;
use crate::api::path::segment;
use crate::api::{ApiError, Clients};
use crate::policy::plan::PlannedPod;

/// Whether `status` is the API server's NotFound for a pod (named `name`, when given). Pure.
pub fn is_pod_not_found(status: &Status, name: Option<&str>) -> bool {
    status.code == 404
        && status.reason == "NotFound"
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.kind == "pods" && name.is_none_or(|n| d.name == n))
}

/// What one GET says about the planned pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The server's NotFound for it, or another UID under its name.
    Gone,
    /// The planned pod (same UID) is still there.
    Present,
}

/// One GET of `pod`, bounded by min(request timeout, time left to `deadline`).
pub async fn get(clients: &Clients, pod: &PlannedPod, deadline: Instant) -> Result<Seen, ApiError> {
    let object = format!("pod {}", pod.key());
    let bad = |e: crate::api::path::BadName| {
        ApiError::new(&object, &clients.server, Kind::Other(e.to_string()))
    };
    let namespace = segment(&pod.namespace).map_err(bad)?;
    let name = segment(&pod.name).map_err(bad)?;
    let api: Api<Pod> = Api::namespaced(clients.api.clone(), &namespace);
    let limit = clients.request_time(deadline);
    match tokio::time::timeout(limit, api.get(&name)).await {
        Ok(Ok(p)) if p.metadata.uid.as_deref() == Some(pod.uid.as_str()) => Ok(Seen::Present),
        Ok(Ok(_)) => Ok(Seen::Gone),
        Ok(Err(kube::Error::Api(s))) if is_pod_not_found(&s, Some(&pod.name)) => Ok(Seen::Gone),
        Ok(Err(e)) => Err(clients.error(&object, e)),
        Err(_) => Err(clients.timeout(&object, limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(v: serde_json::Value) -> Status {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_the_servers_notfound_for_the_pod_counts() {
        let real = status(serde_json::json!({"kind": "Status", "status": "Failure",
            "message": "pods \"web-1\" not found", "reason": "NotFound",
            "details": {"name": "web-1", "kind": "pods"}, "code": 404}));
        assert!(is_pod_not_found(&real, Some("web-1")));
        assert!(is_pod_not_found(&real, None));
        assert!(!is_pod_not_found(&real, Some("web-2")), "another pod");
        let other_kind = status(serde_json::json!({"reason": "NotFound", "code": 404,
            "details": {"name": "work", "kind": "namespaces"}}));
        assert!(!is_pod_not_found(&other_kind, None));
        // What kube makes of an HTML 404 (no Status in the body).
        let html = Status::failure("<html>404</html>", "Failed to parse error data").with_code(404);
        assert!(!is_pod_not_found(&html, None));
        let bare = status(serde_json::json!({"reason": "NotFound", "code": 404}));
        assert!(
            !is_pod_not_found(&bare, None),
            "a NotFound about nothing in particular"
        );
    }
}
