//! What an admin's `fleet hold`, `release`, `pause` and `resume` write, built as values from
//! what was read (no API call here; `crate::cli::fleet_steer` sends them): the hold annotation
//! [`HOLD_ANNOTATION`] on a Node, with a value saying why, who and when, added or removed by a
//! JSON patch guarded by the Node's resourceVersion (as every Node write of ours,
//! [`crate::api::guarded`]); the pause Lease [`PAUSE_LEASE`], created with its holder and its
//! reason, deleted to resume. The daemon's judge (`crate::reboot::holds`) holds a node for any
//! value of the annotation and pauses every node while the Lease exists, whatever it holds.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde_json::json;

pub use super::view::PAUSE_REASON_ANNOTATION;
use crate::api::guarded::patch_of;
pub use crate::reboot::holds::{HOLD_ANNOTATION, PAUSE_LEASE};

/// The hold annotation's value: `REASON (by WHO, TIME)`, e.g. `db migration (by alice,
/// 2026-12-06T21:00:00Z)`.
pub fn hold_value(reason: &str, who: &str, now: Timestamp) -> String {
    format!(
        "{} (by {who}, {})",
        reason.trim(),
        now.round(jiff::Unit::Second).unwrap_or(now)
    )
}

/// The hold annotation's value on `node`, if it carries one.
pub fn hold_of(node: &Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()?
        .get(HOLD_ANNOTATION)
        .map(String::as_str)
}

/// The guard every Node write here starts with: the resourceVersion read.
fn guard(node: &Node) -> serde_json::Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version})
}

/// The JSON pointer of the hold annotation (RFC 6901: `/` in a key is `~1`).
fn hold_pointer() -> String {
    format!(
        "/metadata/annotations/{}",
        HOLD_ANNOTATION.replace('~', "~0").replace('/', "~1")
    )
}

/// The patch that sets the hold annotation to `value`; none when the node is held already
/// (its hold, whoever set it, is left as it is).
pub fn hold_patch(node: &Node, value: &str) -> Option<json_patch::Patch> {
    if hold_of(node).is_some() {
        return None;
    }
    let add = if node.metadata.annotations.is_some() {
        json!({"op": "add", "path": hold_pointer(), "value": value})
    } else {
        json!({"op": "add", "path": "/metadata/annotations", "value": {HOLD_ANNOTATION: value}})
    };
    patch_of(vec![guard(node), add]).ok()
}

/// The patch that removes the hold annotation, guarded also by the value read (the one the
/// command says it removed); none when the node is not held.
pub fn release_patch(node: &Node) -> Option<(json_patch::Patch, String)> {
    let value = hold_of(node)?.to_string();
    let ops = vec![
        guard(node),
        json!({"op": "test", "path": hold_pointer(), "value": value}),
        json!({"op": "remove", "path": hold_pointer()}),
    ];
    Some((patch_of(ops).ok()?, value))
}

/// The pause Lease in `namespace`: held by `who` since `now`, `reason` in
/// [`PAUSE_REASON_ANNOTATION`].
pub fn pause_lease(namespace: &str, who: &str, reason: &str, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(PAUSE_LEASE.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some(
                [(
                    PAUSE_REASON_ANNOTATION.to_string(),
                    reason.trim().to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(who.to_string()),
            acquire_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

/// Who paused, since when and why, as read from the pause Lease: `by alice since
/// 2026-12-06T21:00:00Z: network upgrade`. Parts the Lease lacks are left out (a pause written
/// by hand may hold nothing).
pub fn pause_said(lease: &Lease) -> String {
    let spec = lease.spec.as_ref();
    let who = spec
        .and_then(|s| s.holder_identity.as_deref())
        .map(|w| format!("by {}", crate::text::clean(w, 200)));
    let since = spec
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| t.0)
        .or_else(|| lease.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|t| format!("since {t}"));
    let head: Vec<String> = [who, since].into_iter().flatten().collect();
    let head = if head.is_empty() {
        "by an unnamed writer".to_string()
    } else {
        head.join(" ")
    };
    match lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PAUSE_REASON_ANNOTATION))
    {
        Some(r) => format!("{head}: {}", crate::text::clean(r, 200)),
        None => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: Option<serde_json::Value>) -> Node {
        let mut n = json!({"metadata": {"name": "node-a", "resourceVersion": "7"}});
        if let Some(a) = annotations {
            n["metadata"]["annotations"] = a;
        }
        serde_json::from_value(n).unwrap()
    }

    fn applied(n: &Node, patch: &json_patch::Patch) -> serde_json::Value {
        let mut v = serde_json::to_value(n).unwrap();
        json_patch::patch(&mut v, patch).unwrap();
        v
    }

    #[test]
    fn a_hold_adds_the_annotation_beside_the_others_and_leaves_an_existing_hold() {
        let now: Timestamp = "2026-12-06T21:00:00.4Z".parse().unwrap();
        let value = hold_value(" db migration ", "alice", now);
        assert_eq!(value, "db migration (by alice, 2026-12-06T21:00:00Z)");
        let bare = node(None);
        let v = applied(&bare, &hold_patch(&bare, &value).unwrap());
        assert_eq!(
            v["metadata"]["annotations"],
            json!({HOLD_ANNOTATION: value})
        );
        let other = node(Some(json!({"a": "b"})));
        let v = applied(&other, &hold_patch(&other, &value).unwrap());
        assert_eq!(
            v["metadata"]["annotations"],
            json!({"a": "b", HOLD_ANNOTATION: value})
        );
        assert!(hold_patch(&node(Some(json!({HOLD_ANNOTATION: ""}))), &value).is_none());
        // The guard: a Node changed since the read is not written.
        let mut moved = serde_json::to_value(&other).unwrap();
        moved["metadata"]["resourceVersion"] = json!("8");
        assert!(json_patch::patch(&mut moved, &hold_patch(&other, &value).unwrap()).is_err());
    }

    #[test]
    fn a_release_removes_only_the_hold_it_read() {
        let held = node(Some(json!({"a": "b", HOLD_ANNOTATION: "x"})));
        let (patch, value) = release_patch(&held).unwrap();
        assert_eq!(value, "x");
        assert_eq!(
            applied(&held, &patch)["metadata"]["annotations"],
            json!({"a": "b"})
        );
        assert!(release_patch(&node(Some(json!({"a": "b"})))).is_none());
        assert!(release_patch(&node(None)).is_none());
    }

    #[test]
    fn the_pause_lease_says_who_since_when_and_why() {
        let now: Timestamp = "2026-12-06T21:00:00Z".parse().unwrap();
        let lease = pause_lease("kube-shutdown-drain", "alice", "network upgrade", now);
        assert_eq!(lease.metadata.name.as_deref(), Some(PAUSE_LEASE));
        assert_eq!(
            pause_said(&lease),
            "by alice since 2026-12-06T21:00:00Z: network upgrade"
        );
        let by_hand: Lease =
            serde_json::from_value(json!({"metadata": {"name": PAUSE_LEASE}})).unwrap();
        assert_eq!(pause_said(&by_hand), "by an unnamed writer");
    }
}
