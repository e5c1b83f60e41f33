//! The four PATCH content types: JSON patch, JSON merge patch, strategic merge patch and apply.
//!
//! Strategic merge follows the documented rules of
//! `k8s.io/apimachinery/pkg/util/strategicpatch`: maps merge, `null` deletes, lists whose Go
//! field carries `patchStrategy:"merge"` merge by their `patchMergeKey`, every other list is
//! replaced wholesale (Node `spec.taints` and Pod `spec.tolerations` have no merge key), and the
//! directives `$patch` (replace, delete, merge), `$retainKeys`, `$deleteFromPrimitiveList/` and
//! `$setElementOrder/` are understood. The merge keys are looked up by field name, which is
//! unambiguous for the types this fake serves.

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("the body of the {kind} is not valid JSON: {source}")]
    Body {
        kind: &'static str,
        source: serde_json::Error,
    },
    #[error("the body of the apply patch is not valid YAML: {source}")]
    ApplyBody { source: serde_yaml::Error },
    /// A failed `test` operation or a path that does not exist: the apiserver answers 422.
    #[error("{0}")]
    JsonPatch(json_patch::PatchError),
    #[error("the strategic merge patch is invalid: {0}")]
    Strategic(String),
    #[error("the patch content type {0:?} is not supported")]
    ContentType(String),
}

/// The patch types by their `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Result<Self, PatchError> {
        let base = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match base.as_str() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            _ => Err(PatchError::ContentType(content_type.to_string())),
        }
    }
}

/// Applies a patch body of the given type to `doc`, returning the new object.
pub fn apply_patch(doc: &Value, patch_type: PatchType, body: &[u8]) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Json => {
            let ops: json_patch::Patch =
                serde_json::from_slice(body).map_err(|source| PatchError::Body {
                    kind: "json patch",
                    source,
                })?;
            let mut out = doc.clone();
            json_patch::patch(&mut out, &ops).map_err(PatchError::JsonPatch)?;
            Ok(out)
        }
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(body).map_err(|source| PatchError::Body {
                kind: "merge patch",
                source,
            })?;
            let mut out = doc.clone();
            json_patch::merge(&mut out, &p);
            Ok(out)
        }
        PatchType::Strategic => {
            let p: Value = serde_json::from_slice(body).map_err(|source| PatchError::Body {
                kind: "strategic merge patch",
                source,
            })?;
            strategic_merge(doc, &p)
        }
        PatchType::Apply => {
            let p: Value =
                serde_yaml::from_slice(body).map_err(|source| PatchError::ApplyBody { source })?;
            strategic_merge(doc, &p)
        }
    }
}

/// How a list field merges under a strategic merge patch.
enum ListStrategy {
    /// Replace the whole list (no `patchStrategy` on the Go field).
    Replace,
    /// Merge objects by this key.
    MergeByKey(&'static str),
    /// Union of primitive values (`finalizers`).
    MergePrimitives,
}

/// The `patchMergeKey` of the list fields in the core, apps and policy types (from the Go struct
/// tags of k8s.io/api).
fn list_strategy(field: &str) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "volumesAttached" => ListStrategy::MergeByKey("name"),
        "ports" => ListStrategy::MergeByKey("containerPort"),
        "volumeMounts" => ListStrategy::MergeByKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeByKey("devicePath"),
        "conditions" | "addresses" => ListStrategy::MergeByKey("type"),
        "ownerReferences" => ListStrategy::MergeByKey("uid"),
        "hostAliases" | "podIPs" | "hostIPs" => ListStrategy::MergeByKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeByKey("topologyKey"),
        "finalizers" => ListStrategy::MergePrimitives,
        _ => ListStrategy::Replace,
    }
}

/// Strategic merge of `patch` into `doc`.
pub fn strategic_merge(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => Ok(Value::Object(merge_map(d, p)?)),
        (_, Value::Object(p)) => Ok(Value::Object(merge_map(&Map::new(), p)?)),
        _ => Err(PatchError::Strategic(format!(
            "the patch must be a JSON object, got {patch}"
        ))),
    }
}

fn merge_map(
    doc: &Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Map<String, Value>, PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut out = patch.clone();
            out.remove("$patch");
            return Ok(out);
        }
        Some("delete") => return Ok(Map::new()),
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError::Strategic(format!(
                "unknown $patch directive {other:?}"
            )));
        }
    }
    let mut out = doc.clone();
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = out.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        match value {
            Value::Null => {
                out.remove(key);
            }
            Value::Object(pm) => {
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.remove(key);
                    continue;
                }
                let base = match out.get(key) {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                out.insert(key.clone(), Value::Object(merge_map(&base, pm)?));
            }
            Value::Array(pl) => {
                let base = out.get(key).and_then(Value::as_array).cloned();
                out.insert(key.clone(), Value::Array(merge_list(key, base, pl)?));
            }
            other => {
                out.insert(key.clone(), other.clone());
            }
        }
    }
    if let Some(Value::Array(retain)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(out)
}

fn merge_list(
    field: &str,
    base: Option<Vec<Value>>,
    patch: &[Value],
) -> Result<Vec<Value>, PatchError> {
    // A `{"$patch": "replace"}` element replaces the list with the other elements.
    let replace = patch
        .iter()
        .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"));
    let elements: Vec<&Value> = patch
        .iter()
        .filter(|e| e.get("$patch").and_then(Value::as_str) != Some("replace"))
        .collect();
    let Some(base) = base.filter(|_| !replace) else {
        return Ok(elements
            .into_iter()
            .filter(|e| e.get("$patch").is_none())
            .cloned()
            .collect());
    };
    match list_strategy(field) {
        ListStrategy::Replace => Ok(elements.into_iter().cloned().collect()),
        ListStrategy::MergePrimitives => {
            let mut out = base;
            for e in elements {
                if !out.contains(e) {
                    out.push(e.clone());
                }
            }
            Ok(out)
        }
        ListStrategy::MergeByKey(merge_key) => {
            let mut out = base;
            for e in elements {
                let Some(pm) = e.as_object() else {
                    return Err(PatchError::Strategic(format!(
                        "list {field} merges by {merge_key} but an element is not an object: {e}"
                    )));
                };
                let Some(key_value) = pm.get(merge_key) else {
                    return Err(PatchError::Strategic(format!(
                        "an element of list {field} has no merge key {merge_key}: {e}"
                    )));
                };
                let pos = out.iter().position(|x| x.get(merge_key) == Some(key_value));
                let delete = pm.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        let merged = match &out[i] {
                            Value::Object(m) => merge_map(m, pm)?,
                            _ => pm.clone(),
                        };
                        out[i] = Value::Object(merged);
                    }
                    (None, false) => {
                        out.push(Value::Object(merge_map(&Map::new(), pm)?));
                    }
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Value {
        json!({
            "metadata": {"name": "node-a", "labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"taints": [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
            ]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "MemoryPressure", "status": "False"}
            ]}
        })
    }

    fn smp(doc: &Value, patch: Value) -> Value {
        apply_patch(doc, PatchType::Strategic, patch.to_string().as_bytes()).expect("patch applies")
    }

    #[test]
    fn strategic_merge_replaces_taints_wholesale_and_null_deletes() {
        let out = smp(
            &node(),
            json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}),
        );
        assert_eq!(
            out["spec"]["taints"],
            json!([{"key": "k", "effect": "NoExecute"}])
        );
        let out = smp(&node(), json!({"spec": {"unschedulable": true}}));
        assert_eq!(out["spec"]["unschedulable"], json!(true));
        assert_eq!(out["spec"]["taints"], node()["spec"]["taints"]);
        let out = smp(&out, json!({"spec": {"unschedulable": null}}));
        assert!(out["spec"].get("unschedulable").is_none());
        let out = smp(
            &node(),
            json!({"metadata": {"labels": {"a": null, "b": "2"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
    }

    #[test]
    fn strategic_merge_merges_keyed_lists_and_honours_directives() {
        let out = smp(
            &node(),
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}])
        );
        let out = smp(
            &node(),
            json!({"status": {"conditions": [{"type": "MemoryPressure", "$patch": "delete"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        let out = smp(
            &node(),
            json!({"status": {"conditions": [{"$patch": "replace"}, {"type": "X", "status": "True"}]}}),
        );
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "X", "status": "True"}])
        );
        let out = smp(&node(), json!({"metadata": {"finalizers": ["y", "x"]}}));
        assert_eq!(out["metadata"]["finalizers"], json!(["x", "y"]));
        let out = smp(
            &node(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        let out = smp(
            &node(),
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"c": "3"}));
        let out = smp(
            &node(),
            json!({"spec": {"$retainKeys": ["unschedulable"], "unschedulable": true}}),
        );
        assert_eq!(out["spec"], json!({"unschedulable": true}));
        let out = smp(
            &node(),
            json!({"spec": {"$setElementOrder/taints": [{"key": "k"}], "unschedulable": true}}),
        );
        assert!(out["spec"].get("$setElementOrder/taints").is_none());
        assert!(apply_patch(&node(), PatchType::Strategic, b"[1]").is_err());
        assert!(matches!(
            apply_patch(
                &node(),
                PatchType::Strategic,
                br#"{"status":{"conditions":[{"status":"x"}]}}"#
            ),
            Err(PatchError::Strategic(_))
        ));
    }

    #[test]
    fn json_patch_test_op_guards_and_fails() {
        let guarded = json!([
            {"op": "test", "path": "/spec/taints/0/key", "value": "node.kubernetes.io/not-ready"},
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "k", "effect": "NoSchedule"}}
        ]);
        let out = apply_patch(&node(), PatchType::Json, guarded.to_string().as_bytes())
            .expect("test passes");
        assert_eq!(out["spec"]["taints"].as_array().map(Vec::len), Some(2));
        let failing = json!([{"op": "test", "path": "/spec/taints/0/key", "value": "other"}]);
        assert!(matches!(
            apply_patch(&node(), PatchType::Json, failing.to_string().as_bytes()),
            Err(PatchError::JsonPatch(_))
        ));
        assert!(matches!(
            apply_patch(&node(), PatchType::Json, b"{}"),
            Err(PatchError::Body { .. })
        ));
    }

    #[test]
    fn merge_patch_replaces_lists_and_apply_reads_yaml() {
        let out = apply_patch(
            &node(),
            PatchType::Merge,
            br#"{"spec":{"taints":null},"metadata":{"labels":{"b":"2"}}}"#,
        )
        .expect("merge applies");
        assert!(out["spec"].get("taints").is_none());
        assert_eq!(out["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        let out = apply_patch(
            &node(),
            PatchType::Merge,
            br#"{"status":{"conditions":[{"type":"Ready"}]}}"#,
        )
        .expect("merge applies");
        assert_eq!(out["status"]["conditions"], json!([{"type": "Ready"}]));
        let out = apply_patch(&node(), PatchType::Apply, b"spec:\n  unschedulable: true\n")
            .expect("apply applies");
        assert_eq!(out["spec"]["unschedulable"], json!(true));
        assert!(matches!(
            PatchType::from_content_type("text/plain"),
            Err(PatchError::ContentType(_))
        ));
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json; charset=utf-8")
                .ok(),
            Some(PatchType::Strategic)
        );
    }
}
