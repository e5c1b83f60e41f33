//! Discovery documents: `/version`, `/api`, `/apis`, `/api/v1`, `/apis/GROUP[/VERSION]`, in the
//! legacy JSON form (APIVersions, APIGroupList, APIResourceList), which kubectl accepts whatever
//! its Accept header asks for.

use serde_json::{Value, json};

use crate::resources::{GROUPS, RESOURCES, ResourceType};

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_doc(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [gv.clone()],
        "preferredVersion": gv
    })
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = GROUPS
        .iter()
        .map(|(g, v)| {
            let mut doc = group_doc(g, v);
            if let Value::Object(m) = &mut doc {
                m.remove("kind");
                m.remove("apiVersion");
            }
            doc
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/GROUP`.
pub fn api_group(group: &str) -> Option<Value> {
    GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .map(|(g, v)| group_doc(g, v))
}

fn resource_entry(rt: &ResourceType) -> Value {
    json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs,
        "shortNames": rt.short_names,
    })
}

fn subresource(name: &str, namespaced: bool, kind: &str, verbs: &[&str]) -> Value {
    json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs})
}

/// `/api/v1` or `/apis/GROUP/VERSION`; None when the fake does not serve that group version.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let served = (group.is_empty() && version == "v1")
        || GROUPS.iter().any(|(g, v)| *g == group && *v == version);
    if !served {
        return None;
    }
    let mut resources = Vec::new();
    for rt in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(resource_entry(rt));
        if rt.has_status {
            resources.push(subresource(
                &format!("{}/status", rt.plural),
                rt.namespaced,
                rt.kind,
                &["get", "patch", "update"],
            ));
        }
        if rt.key == "pods" {
            // kubectl drain looks for this entry (group policy, version v1) before it evicts.
            let mut eviction = subresource("pods/eviction", true, "Eviction", &["create"]);
            if let Value::Object(m) = &mut eviction {
                m.insert("group".into(), json!("policy"));
                m.insert("version".into(), json!("v1"));
            }
            resources.push(eviction);
        }
    }
    if group == "authentication.k8s.io" {
        resources.push(subresource(
            "selfsubjectreviews",
            false,
            "SelfSubjectReview",
            &["create"],
        ));
    }
    if group == "authorization.k8s.io" {
        resources.push(subresource(
            "selfsubjectaccessreviews",
            false,
            "SelfSubjectAccessReview",
            &["create"],
        ));
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources
    }))
}
