//! The Node authorizer's relationship graph for the storage objects a drain reads with a node's
//! own credentials, after kubernetes `plugin/pkg/auth/authorizer/node/node_authorizer.go`
//! (`authorizeGet`, `hasPathFrom`) and `graph_populator.go`:
//! - a PersistentVolumeClaim while a pod bound to the node references it (a
//!   `persistentVolumeClaim` volume, or the claim `POD-VOLUME` of an `ephemeral` volume);
//! - the PersistentVolume such a claim is bound to (`spec.volumeName`);
//! - a VolumeAttachment whose `spec.nodeName` is the node.
//!
//! Only `get` of a named object is ever allowed ("can only get individual resources of this
//! type"); an object without a path to the node, deleted or never there, is refused with "no
//! relationship found between node 'NODE' and this object" (the wording of 1.36). The graph is
//! read from the store at each request, so an edge goes the moment its pod or attachment is
//! deleted (on a real server a few milliseconds later, when the authorizer's informer sees it).

use serde_json::Value;

use crate::auth::Attributes;
use crate::store::Store;

/// The Node authorizer's answer for `attrs` from `node`, or `None` when the graph does not
/// decide this resource (other rules apply).
pub fn decide(store: &Store, node: &str, attrs: &Attributes) -> Option<Result<(), String>> {
    let kind = match (attrs.group.as_str(), attrs.resource.as_str()) {
        ("", "persistentvolumeclaims") => Kind::Claim,
        ("", "persistentvolumes") => Kind::Volume,
        ("storage.k8s.io", "volumeattachments") => Kind::Attachment,
        _ => return None,
    };
    if attrs.verb != "get" {
        return Some(Err("can only get individual resources of this type".into()));
    }
    if !attrs.subresource.is_empty() {
        return Some(Err("cannot get subresource".into()));
    }
    if attrs.name.is_empty() {
        return Some(Err("No Object name found".into()));
    }
    let related = match kind {
        Kind::Claim => claims_of_node(store, node)
            .iter()
            .any(|(ns, c)| *ns == attrs.namespace && *c == attrs.name),
        Kind::Volume => claims_of_node(store, node).iter().any(|(ns, c)| {
            store
                .get("PersistentVolumeClaim", Some(ns), c)
                .and_then(|pvc| str_at(&pvc, "/spec/volumeName").map(str::to_owned))
                .is_some_and(|pv| pv == attrs.name)
        }),
        Kind::Attachment => store
            .get("VolumeAttachment", None, &attrs.name)
            .is_some_and(|va| str_at(&va, "/spec/nodeName") == Some(node)),
    };
    Some(if related {
        Ok(())
    } else {
        Err(format!(
            "no relationship found between node '{node}' and this object"
        ))
    })
}

enum Kind {
    Claim,
    Volume,
    Attachment,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// The claims (namespace, name) the pods bound to `node` reference.
fn claims_of_node(store: &Store, node: &str) -> Vec<(String, String)> {
    store
        .list("Pod", None)
        .iter()
        .filter(|p| str_at(p, "/spec/nodeName") == Some(node))
        .flat_map(|p| {
            let ns = str_at(p, "/metadata/namespace").unwrap_or("").to_owned();
            let pod = str_at(p, "/metadata/name").unwrap_or("").to_owned();
            p.pointer("/spec/volumes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(move |v| {
                    let claim = match str_at(v, "/persistentVolumeClaim/claimName") {
                        Some(c) => c.to_owned(),
                        None if v.get("ephemeral").is_some() => {
                            format!("{pod}-{}", str_at(v, "/name").unwrap_or(""))
                        }
                        None => return None,
                    };
                    Some((ns.clone(), claim))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
