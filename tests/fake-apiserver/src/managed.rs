//! Field ownership (`metadata.managedFields`) of Nodes on Update, Patch and server-side apply, as
//! the real apiserver keeps it (k8s.io/apiserver `pkg/endpoints/handlers/fieldmanager`; measured
//! on kube-apiserver v1.29.7 and v1.36):
//! - a non-apply write's manager (`?fieldManager=`, else the User-Agent's product part, e.g.
//!   `kubectl`) gets an `operation: Update` entry owning every field the write set or changed;
//!   a write that sets a field to the value it already has records no new owner;
//! - a server-side apply's manager gets an `operation: Apply` entry owning exactly the fields of
//!   its applied configuration, changed or not: a field another manager owns with the same value
//!   becomes shared (both listed); one whose value the apply changes is a 409 conflict naming the
//!   other manager unless `?force=true`, which takes it from them;
//! - other managers lose the fields a write changed, and every manager loses the fields the
//!   write removed; an entry left owning nothing is dropped (so `kubectl uncordon` removes our
//!   entry owning only `f:spec.f:unschedulable`);
//! - lists are atomic (`spec.taints` has no merge key): the last writer of the list owns
//!   `f:spec.f:taints` as a whole.
//!
//! Fields tracked: `metadata.labels`, `metadata.annotations` (per key) and `spec`; status
//! writes leave ownership alone (not modelled), and a field dropped from a later apply of the
//! same manager stays on the object (the real server removes it when nobody else owns it).

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

/// The entries of `old`'s managedFields, each with the fields it owns.
fn entries_of(old: Option<&Value>) -> Vec<(Value, BTreeSet<Path>)> {
    old.and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|entry| {
            let mut set = BTreeSet::new();
            if let Some(f) = entry.get("fieldsV1") {
                parse_fields(f, &mut Vec::new(), &mut set);
            }
            (entry, set)
        })
        .collect()
}

fn is_entry_of(entry: &Value, manager: &str, operation: &str) -> bool {
    entry.get("manager").and_then(Value::as_str) == Some(manager)
        && entry.get("operation").and_then(Value::as_str) == Some(operation)
        && entry.get("subresource").is_none()
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The fields of `new` whose value differs from `old` (all of them for a create).
fn changed_fields(old: Option<&Value>, new: &Value) -> BTreeSet<Path> {
    fields(new)
        .into_iter()
        .filter(|p| old.is_none_or(|o| value_at(o, p) != value_at(new, p)))
        .collect()
}

/// The entry of `manager` with `operation`, owning `set`, stamped now when it `grew`.
fn entry_for(
    kept: Option<Value>,
    manager: &str,
    operation: &str,
    set: &BTreeSet<Path>,
    grew: bool,
) -> Option<Value> {
    if set.is_empty() {
        return None;
    }
    let mut entry = kept
        .unwrap_or_else(|| json!({"manager": manager, "operation": operation, "apiVersion": "v1"}));
    if grew || entry.get("time").is_none() {
        entry["time"] = json!(timestamp(std::time::Duration::ZERO));
    }
    entry["fieldsType"] = json!("FieldsV1");
    entry["fieldsV1"] = render(set);
    Some(entry)
}

fn store_entries(new: &mut Value, out: Vec<Value>) {
    let meta = crate::store::meta_mut(new);
    if out.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(out));
    }
}

/// Updates `new`'s managedFields for a write by `manager` (operation Update) that turned `old`
/// (None: a create) into `new`. Whatever managedFields the client sent are ignored.
pub fn track(old: Option<&Value>, new: &mut Value, manager: &str) {
    let new_fields = fields(new);
    let old_fields = old.map(fields).unwrap_or_default();
    let changed = changed_fields(old, new);
    let removed: BTreeSet<Path> = old_fields.difference(&new_fields).cloned().collect();
    let mut out = Vec::new();
    let mut mine: Option<(Value, BTreeSet<Path>)> = None;
    for (entry, mut set) in entries_of(old) {
        let is_mine = is_entry_of(&entry, manager, "Update");
        set.retain(|p| {
            let untouched = !removed.contains(p) && !changed.iter().any(|c| overlaps(p, c));
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
    let (entry, mut set) = mine.map_or((None, BTreeSet::new()), |(e, s)| (Some(e), s));
    let grew = !changed.is_empty();
    set.extend(changed);
    out.extend(entry_for(entry, manager, "Update", &set, grew));
    store_entries(new, out);
}

/// Updates `new`'s managedFields for a server-side apply by `manager` of `applied` (the
/// configuration the request sent) that turned `old` (None: a create) into `new`. The apply's
/// entry owns every field of `applied`; another manager keeps a field the apply left at its
/// value (shared ownership) and loses one the apply changed, which without `force` is a
/// conflict: `Err` names each, as the apiserver's 409 does.
pub fn track_apply(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    applied: &Value,
    force: bool,
) -> Result<(), String> {
    let new_fields = fields(new);
    let old_fields = old.map(fields).unwrap_or_default();
    let changed = changed_fields(old, new);
    let removed: BTreeSet<Path> = old_fields.difference(&new_fields).cloned().collect();
    let mine: BTreeSet<Path> = fields(applied)
        .into_iter()
        .filter(|p| new_fields.contains(p))
        .collect();
    let mut conflicts = Vec::new();
    let mut out = Vec::new();
    let mut kept = None;
    for (entry, mut set) in entries_of(old) {
        if is_entry_of(&entry, manager, "Apply") {
            kept = Some(entry);
            continue;
        }
        let other = entry.get("manager").and_then(Value::as_str).unwrap_or("?");
        for p in set
            .iter()
            .filter(|p| changed.iter().any(|c| overlaps(p, c)))
        {
            if mine.iter().any(|m| overlaps(p, m)) && !force {
                let field: Vec<&str> = p.iter().map(|s| s.trim_start_matches("f:")).collect();
                conflicts.push(format!("conflict with \"{other}\": .{}", field.join(".")));
            }
        }
        set.retain(|p| !removed.contains(p) && !changed.iter().any(|c| overlaps(p, c)));
        if !set.is_empty() {
            let mut entry = entry;
            entry["fieldsV1"] = render(&set);
            out.push(entry);
        }
    }
    if !conflicts.is_empty() {
        return Err(format!(
            "Apply failed with {} conflict{}: {}",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" },
            conflicts.join("\n")
        ));
    }
    out.extend(entry_for(
        kept,
        manager,
        "Apply",
        &mine,
        !changed.is_empty(),
    ));
    store_entries(new, out);
    Ok(())
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

    /// An admin's `kubectl apply --server-side` of `unschedulable: true` on a node our Update
    /// cordoned: the same value, so both managers own the field (server-side apply's shared
    /// ownership), where an Update with the same value records no new owner.
    #[test]
    fn an_apply_of_the_same_value_shares_the_field_and_an_update_does_not() {
        let mut created = node(json!({}));
        track(None, &mut created, "kubelet");
        let mut cordoned = created.clone();
        cordoned["spec"]["unschedulable"] = json!(true);
        track(Some(&created), &mut cordoned, "kube-shutdown-drain");
        let mut same = cordoned.clone();
        track(Some(&cordoned), &mut same, "kubectl");
        assert_eq!(
            owners(&same),
            owners(&cordoned),
            "an Update that changes nothing owns nothing"
        );
        let mut applied = cordoned.clone();
        let config = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
            "spec": {"unschedulable": true}});
        track_apply(Some(&cordoned), &mut applied, "kubectl", &config, false).unwrap();
        let field = json!({"f:spec": {"f:unschedulable": {}}});
        let all = owners(&applied);
        assert!(
            all.contains(&("kube-shutdown-drain".into(), field.clone())),
            "{all:?}"
        );
        assert!(all.contains(&("kubectl".into(), field)), "{all:?}");
        let apply = applied["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == json!("kubectl"))
            .unwrap();
        assert_eq!(apply["operation"], json!("Apply"));
    }

    #[test]
    fn an_apply_that_changes_a_field_of_another_manager_conflicts_unless_forced() {
        let mut created = node(json!({}));
        track(None, &mut created, "kubelet");
        let mut cordoned = created.clone();
        cordoned["spec"]["unschedulable"] = json!(true);
        track(Some(&created), &mut cordoned, "kube-shutdown-drain");
        let config = json!({"spec": {"unschedulable": false}});
        let mut changed = cordoned.clone();
        changed["spec"]["unschedulable"] = json!(false);
        let err = track_apply(
            Some(&cordoned),
            &mut changed.clone(),
            "admin",
            &config,
            false,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Apply failed with 1 conflict: conflict with \"kube-shutdown-drain\": .spec.unschedulable"
        );
        track_apply(Some(&cordoned), &mut changed, "admin", &config, true).unwrap();
        assert_eq!(
            owners(&changed),
            vec![(
                "admin".to_string(),
                json!({"f:spec": {"f:unschedulable": {}}})
            )]
        );
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
