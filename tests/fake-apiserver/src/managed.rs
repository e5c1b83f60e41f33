//! Field ownership (`metadata.managedFields`) of Nodes on Update and Patch, as the real
//! apiserver keeps it for non-apply writes (kubernetes-api.md section 5):
//! - the writer's manager (`?fieldManager=`, else the User-Agent's product part, e.g.
//!   `kubectl`) gets an `operation: Update` entry owning every field the write set or changed;
//! - other managers lose the fields the write changed, and every manager loses the fields the
//!   write removed; an entry left owning nothing is dropped (so `kubectl uncordon` removes our
//!   entry owning only `f:spec.f:unschedulable`);
//! - lists are atomic (`spec.taints` has no merge key): the last writer of the list owns
//!   `f:spec.f:taints` as a whole.
//!
//! Fields tracked: `metadata.labels`, `metadata.annotations` (per key) and `spec`; status
//! writes leave ownership alone (not modelled).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::store::timestamp;

type Path = Vec<String>;

/// The manager a request writes as: `fieldManager`, else the User-Agent up to its first `/`
/// (apiserver `prefixFromUserAgent`).
pub fn manager_for(field_manager: Option<&str>, user_agent: &str) -> String {
    match field_manager.filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => {
            let prefix = user_agent.split('/').next().unwrap_or("").trim();
            if prefix.is_empty() {
                "unknown".to_string()
            } else {
                prefix.chars().take(128).collect()
            }
        }
    }
}

fn leaves(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        // An empty map or a null owns nothing by itself.
        Value::Object(m) if m.is_empty() => {}
        Value::Null => {}
        Value::Object(m) => {
            for (k, child) in m {
                prefix.push(format!("f:{k}"));
                leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The tracked fields of an object and their values.
fn fields(obj: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    for (section, pointer) in [
        (vec!["f:metadata", "f:labels"], "/metadata/labels"),
        (vec!["f:metadata", "f:annotations"], "/metadata/annotations"),
        (vec!["f:spec"], "/spec"),
    ] {
        if let Some(v) = obj.pointer(pointer).filter(|v| !v.is_null()) {
            let mut prefix: Path = section.iter().map(|s| s.to_string()).collect();
            leaves(v, &mut prefix, &mut out);
        }
    }
    out
}

fn value_at<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path {
        cur = cur.get(part.strip_prefix("f:").unwrap_or(part))?;
    }
    Some(cur)
}

fn parse_fields(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let children: Vec<(&String, &Value)> = v
        .as_object()
        .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
        .unwrap_or_default();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, child) in children {
        prefix.push(k.clone());
        parse_fields(child, prefix, out);
        prefix.pop();
    }
}

fn render(set: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for part in path {
            cur = match cur
                .entry(part.clone())
                .or_insert_with(|| Value::Object(Map::new()))
            {
                Value::Object(m) => m,
                other => {
                    *other = Value::Object(Map::new());
                    match other {
                        Value::Object(m) => m,
                        _ => unreachable!("just set to an object"),
                    }
                }
            };
        }
    }
    Value::Object(root)
}

/// Updates `new`'s managedFields for a write by `manager` (operation Update) that turned `old`
/// (None: a create) into `new`. Whatever managedFields the client sent are ignored.
pub fn track(old: Option<&Value>, new: &mut Value, manager: &str) {
    let new_fields = fields(new);
    let old_fields = old.map(fields).unwrap_or_default();
    let changed: BTreeSet<Path> = new_fields
        .iter()
        .filter(|p| old.is_none_or(|o| value_at(o, p) != value_at(new, p)))
        .cloned()
        .collect();
    let removed: BTreeSet<Path> = old_fields.difference(&new_fields).cloned().collect();
    let entries = old
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = timestamp(std::time::Duration::ZERO);
    let mut out = Vec::new();
    let mut mine: Option<(Value, BTreeSet<Path>)> = None;
    for entry in entries {
        let mut set = BTreeSet::new();
        if let Some(f) = entry.get("fieldsV1") {
            parse_fields(f, &mut Vec::new(), &mut set);
        }
        let is_mine = entry.get("manager").and_then(Value::as_str) == Some(manager)
            && entry.get("operation").and_then(Value::as_str) == Some("Update")
            && entry.get("subresource").is_none();
        set.retain(|p| {
            let untouched = !removed.contains(p)
                && !changed.iter().any(|c| p.starts_with(c) || c.starts_with(p));
            untouched || (is_mine && new_fields.contains(p))
        });
        if is_mine {
            mine = Some((entry, set));
        } else if !set.is_empty() {
            let mut entry = entry;
            entry["fieldsV1"] = render(&set);
            out.push(entry);
        }
    }
    let (entry, mut set) = mine.unwrap_or_else(|| {
        (
            json!({"manager": manager, "operation": "Update", "apiVersion": "v1"}),
            BTreeSet::new(),
        )
    });
    let grew = !changed.is_empty();
    set.extend(changed);
    if !set.is_empty() {
        let mut entry = entry;
        if grew {
            entry["time"] = json!(now);
        }
        entry["fieldsType"] = json!("FieldsV1");
        entry["fieldsV1"] = render(&set);
        out.push(entry);
    }
    let meta = crate::store::meta_mut(new);
    if out.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(spec: Value) -> Value {
        json!({"metadata": {"name": "node-a"}, "spec": spec})
    }

    fn owners(obj: &Value) -> Vec<(String, Value)> {
        obj.pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .map(|es| {
                es.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap_or("").to_string(),
                            e["fieldsV1"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn cordon_uncordon_and_another_cordon_move_ownership() {
        let mut created = node(json!({}));
        track(None, &mut created, "kubelet");
        let mut cordoned = created.clone();
        cordoned["spec"]["unschedulable"] = json!(true);
        track(Some(&created), &mut cordoned, "kube-shutdown-drain");
        assert!(owners(&cordoned).contains(&(
            "kube-shutdown-drain".into(),
            json!({"f:spec": {"f:unschedulable": {}}})
        )));
        let mut uncordoned = cordoned.clone();
        uncordoned["spec"] = json!({});
        track(Some(&cordoned), &mut uncordoned, "kubectl");
        assert!(
            owners(&uncordoned)
                .iter()
                .all(|(m, _)| m != "kube-shutdown-drain"),
            "our entry is gone: {:?}",
            owners(&uncordoned)
        );
        let mut again = uncordoned.clone();
        again["spec"]["unschedulable"] = json!(true);
        track(Some(&uncordoned), &mut again, "kubectl");
        assert!(
            owners(&again)
                .contains(&("kubectl".into(), json!({"f:spec": {"f:unschedulable": {}}})))
        );
    }

    #[test]
    fn taints_are_atomic_and_the_last_writer_owns_them() {
        let mut a = node(json!({"taints": [{"key": "admin", "effect": "NoSchedule"}]}));
        track(None, &mut a, "admin-tool");
        let mut b = a.clone();
        b["spec"]["taints"]
            .as_array_mut()
            .expect("taints")
            .push(json!({"key": "ours", "effect": "NoSchedule"}));
        track(Some(&a), &mut b, "kube-shutdown-drain");
        assert_eq!(
            owners(&b),
            vec![(
                "kube-shutdown-drain".to_string(),
                json!({"f:spec": {"f:taints": {}}})
            )]
        );
        // An unrelated label write keeps the taint ownership.
        let mut c = b.clone();
        c["metadata"]["labels"] = json!({"x": "1"});
        track(Some(&b), &mut c, "kubectl-label");
        assert!(owners(&c).contains(&(
            "kube-shutdown-drain".into(),
            json!({"f:spec": {"f:taints": {}}})
        )));
    }

    #[test]
    fn the_manager_comes_from_the_query_or_the_user_agent() {
        assert_eq!(
            manager_for(Some("kubectl-taint"), "kubectl/v1.32"),
            "kubectl-taint"
        );
        assert_eq!(
            manager_for(None, "kubectl.1.32/v1.32.0 (linux/amd64) kubernetes/abc"),
            "kubectl.1.32"
        );
        assert_eq!(manager_for(Some(""), ""), "unknown");
    }
}
