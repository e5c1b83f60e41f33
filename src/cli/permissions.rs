//! The permissions the drain uses, as `check` reviews them: one `perm(...)` each
//! (`packaging/check-manifests` holds the shipped ClusterRole to these calls), asked of the API
//! server by one SelfSubjectAccessReview each with the attributes the program's own request
//! will carry.

use k8s_openapi::api::authorization::v1::{
    FieldSelectorAttributes, ResourceAttributes, SelfSubjectAccessReview,
    SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::api::Clients;
use crate::cli::{CliError, outln};
use crate::config::{OnDeadline, Settings};

/// One permission the drain uses.
struct Permission {
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    /// What the program's own requests name, so the review asks exactly what they will send.
    scope: Scope,
    /// Without it the drain cannot work; otherwise a feature degrades.
    required: bool,
    what: &'static str,
}

/// The part of a request beyond verb and resource that an authorizer may look at: the Node
/// authorizer (kubernetes plugin/pkg/auth/authorizer/node) decides on the object's name, the
/// Lease's namespace and, from 1.32, a pod list's `spec.nodeName` field selector.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scope {
    /// No namespace, name or selector (the object is not known in advance).
    Any,
    /// Our Node, by name.
    OurNode,
    /// The pods bound to our Node: the drain's field selector `spec.nodeName=NODE`.
    OurPods,
    /// Our Node's Lease, `kube-node-lease/NODE`.
    OurLease,
    /// The Events about our Node, in their namespace.
    OurEvents,
    /// The drain slot Leases, in `[fleet] lease_namespace`.
    FleetLeases,
}

const fn perm(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    scope: Scope,
    required: bool,
    what: &'static str,
) -> Permission {
    Permission {
        verb,
        group,
        resource,
        subresource,
        scope,
        required,
        what,
    }
}

/// What these credentials are checked for: what every drain needs, then what the settings
/// turn on. One `perm(...)` call each, never a loop: packaging/check-manifests reads the verbs
/// from them.
fn permissions(settings: &Settings) -> Vec<Permission> {
    let mut p = drain_permissions();
    if settings.drain.wait_for_detach {
        p.extend(detach_permissions());
    }
    if settings.fleet.slots > 0 {
        p.extend(fleet_permissions());
    }
    if settings.drain.on_deadline == OnDeadline::Delete {
        p.extend(delete_permissions());
    }
    if settings.lifecycle_conditions {
        p.extend(condition_permissions());
    }
    p
}

/// What every drain needs: the node, its pods, their evictions, Events, the kubelet's Lease and
/// the budgets.
fn drain_permissions() -> Vec<Permission> {
    use Scope::{Any, OurEvents, OurLease, OurNode, OurPods};
    vec![
        perm("get", "", "nodes", "", OurNode, true, "read the node"),
        perm(
            "patch",
            "",
            "nodes",
            "",
            OurNode,
            true,
            "marker, cordon, taint",
        ),
        perm(
            "watch",
            "",
            "nodes",
            "",
            OurNode,
            false,
            "wait for Ready before restoring",
        ),
        perm(
            "list",
            "",
            "nodes",
            "",
            Any,
            false,
            "forecast: where replacements can run",
        ),
        perm(
            "list",
            "",
            "pods",
            "",
            OurPods,
            true,
            "list the node's pods",
        ),
        perm(
            "watch",
            "",
            "pods",
            "",
            OurPods,
            true,
            "see evicted pods go",
        ),
        perm("create", "", "pods", "eviction", Any, true, "evict pods"),
        perm(
            "get",
            "",
            "pods",
            "",
            Any,
            false,
            "see a pod an eviction's 404 or conflict called gone",
        ),
        perm("create", "", "events", "", OurEvents, false, "Node Events"),
        perm(
            "get",
            "coordination.k8s.io",
            "leases",
            "",
            OurLease,
            false,
            "see a live kubelet by its Lease before restoring",
        ),
        perm(
            "list",
            "policy",
            "poddisruptionbudgets",
            "",
            Any,
            false,
            "read a budget that refused an eviction",
        ),
        perm(
            "watch",
            "policy",
            "poddisruptionbudgets",
            "",
            Any,
            false,
            "retry a blocked eviction as soon as its budget opens",
        ),
    ]
}

/// What `[drain] wait_for_detach` needs: the volumes of evicted pods and their attachments.
fn detach_permissions() -> Vec<Permission> {
    use Scope::Any;
    vec![
        perm(
            "get",
            "",
            "persistentvolumeclaims",
            "",
            Any,
            false,
            "find the volumes of evicted pods",
        ),
        perm(
            "get",
            "",
            "persistentvolumes",
            "",
            Any,
            false,
            "name the attachments of evicted pods' volumes",
        ),
        perm(
            "list",
            "storage.k8s.io",
            "volumeattachments",
            "",
            Any,
            false,
            "wait for evicted pods' volumes to detach",
        ),
        perm(
            "watch",
            "storage.k8s.io",
            "volumeattachments",
            "",
            Any,
            false,
            "see evicted pods' volumes detach",
        ),
    ]
}

/// What `[fleet] slots` needs: the drain slot Leases.
fn fleet_permissions() -> Vec<Permission> {
    use Scope::FleetLeases;
    vec![
        perm(
            "get",
            "coordination.k8s.io",
            "leases",
            "",
            FleetLeases,
            true,
            "read a drain slot",
        ),
        perm(
            "list",
            "coordination.k8s.io",
            "leases",
            "",
            FleetLeases,
            true,
            "find this node's drain slots to give back",
        ),
        perm(
            "watch",
            "coordination.k8s.io",
            "leases",
            "",
            FleetLeases,
            false,
            "see a drain slot given back at once",
        ),
        perm(
            "create",
            "coordination.k8s.io",
            "leases",
            "",
            FleetLeases,
            true,
            "take a drain slot first",
        ),
        perm(
            "patch",
            "coordination.k8s.io",
            "leases",
            "",
            FleetLeases,
            true,
            "take and give back a drain slot",
        ),
    ]
}

/// What `[drain] on_deadline = "delete"` needs.
fn delete_permissions() -> Vec<Permission> {
    use Scope::Any;
    vec![perm(
        "delete",
        "",
        "pods",
        "",
        Any,
        true,
        "delete pods at the deadline",
    )]
}

/// `[node] lifecycle_conditions`: the KEP-5683 conditions on the node's status.
fn condition_permissions() -> Vec<Permission> {
    use Scope::OurNode;
    vec![perm(
        "patch",
        "",
        "nodes",
        "status",
        OurNode,
        true,
        "lifecycle conditions (MaintenancePlanned, DrainInProgress, Drained)",
    )]
}

/// The storage resources a node's credentials may read per object only.
const STORAGE: &[&str] = &[
    "persistentvolumeclaims",
    "persistentvolumes",
    "volumeattachments",
];

/// The access review of `p` for `node`: the attributes the program's own request will carry.
fn review_of(p: &Permission, settings: &Settings) -> SelfSubjectAccessReview {
    let node = settings.node_name.as_str();
    let mut attributes = ResourceAttributes {
        verb: Some(p.verb.into()),
        group: Some(p.group.into()),
        resource: Some(p.resource.into()),
        subresource: (!p.subresource.is_empty()).then(|| p.subresource.into()),
        ..ResourceAttributes::default()
    };
    match p.scope {
        Scope::Any => {}
        Scope::OurNode => attributes.name = Some(node.to_owned()),
        // authorization.k8s.io/v1 `fieldSelector` (1.31+; older servers drop the field and
        // answer for the unselected list, which they allow a node).
        Scope::OurPods => {
            attributes.field_selector = Some(FieldSelectorAttributes {
                raw_selector: Some(crate::drain::tracker::field_selector(node)),
                requirements: None,
            })
        }
        Scope::OurLease => {
            attributes.namespace = Some(crate::node::NODE_LEASE_NAMESPACE.to_owned());
            attributes.name = Some(node.to_owned());
        }
        Scope::OurEvents => attributes.namespace = Some(crate::events::EVENT_NAMESPACE.to_owned()),
        Scope::FleetLeases => attributes.namespace = Some(settings.fleet.lease_namespace.clone()),
    }
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    }
}

/// One access review per permission the settings need, a line each; `Ok(false)` when a
/// required one is denied.
pub(super) async fn check_permissions(
    clients: &Clients,
    settings: &Settings,
) -> Result<bool, CliError> {
    let mut ok = true;
    let api: Api<SelfSubjectAccessReview> = Api::all(clients.api.clone());
    let mut storage_denied = false;
    for p in permissions(settings) {
        let review = review_of(&p, settings);
        let resource = if p.scope == Scope::FleetLeases {
            format!("{} in {}", p.resource, settings.fleet.lease_namespace)
        } else if p.subresource.is_empty() {
            p.resource.to_string()
        } else {
            format!("{}/{}", p.resource, p.subresource)
        };
        let object = format!("the review of permission {} {resource}", p.verb);
        let deadline = tokio::time::Instant::now() + clients.request_timeout;
        let answer = clients
            .once(
                deadline,
                &object,
                api.create(&PostParams::default(), &review),
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot get {e}"))?;
        let allowed = answer.status.as_ref().is_some_and(|s| s.allowed);
        let verdict = match (allowed, p.required) {
            (true, _) => "allowed",
            (false, true) => {
                ok = false;
                "DENIED"
            }
            (false, false) => "denied (optional)",
        };
        storage_denied |= !allowed && p.scope == Scope::Any && STORAGE.contains(&p.resource);
        outln!(
            "permission {:<6} {resource:<26} {verdict:<17} {}",
            p.verb,
            p.what
        );
    }
    if storage_denied {
        outln!(
            "volumes: a node's own credentials may get the claims, volumes and attachments of \
             its pods one by one (the Node authorizer), which a review without a name cannot \
             show; the drain reads them before the evictions and follows attachments by name"
        );
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    //! `check`'s list and the shipped rbac.yaml are one list: every review `check` sends is
    //! allowed to a node's dedicated identity by the fake API server's RBAC evaluation of the
    //! shipped objects, and every permission the manifests grant is one `check` reviews.

    use std::collections::BTreeSet;
    use std::path::Path;

    use fake_apiserver::auth::{Attributes, Identity};
    use fake_apiserver::rbac::Policy;

    use super::*;

    const RBAC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/manifests/rbac.yaml");

    /// Settings under which `check` reviews every permission it knows.
    fn every_feature() -> Settings {
        Settings::from_str_at(
            Path::new("/test/config.toml"),
            "node_name = \"node-a\"\n[drain]\non_deadline = \"delete\"\nwait_for_detach = true\n\
             [fleet]\nslots = 2\n[node]\nlifecycle_conditions = true\n",
        )
        .unwrap_or_else(|e| panic!("test settings are valid: {e}"))
    }

    fn attributes(review: &SelfSubjectAccessReview) -> Attributes {
        let a = review
            .spec
            .resource_attributes
            .clone()
            .expect("a resource review");
        Attributes {
            verb: a.verb.unwrap_or_default(),
            group: a.group.unwrap_or_default(),
            resource: a.resource.unwrap_or_default(),
            subresource: a.subresource.unwrap_or_default(),
            namespace: a.namespace.unwrap_or_default(),
            name: a.name.unwrap_or_default(),
        }
    }

    #[test]
    fn the_shipped_rbac_allows_every_review_check_sends() {
        let settings = every_feature();
        let policy = Policy::load(Path::new(RBAC)).unwrap_or_else(|e| panic!("{e}"));
        let identity = Identity::from_user("system:serviceaccount:kube-shutdown-drain:node-a");
        let denied: Vec<String> = permissions(&settings)
            .iter()
            .map(|p| attributes(&review_of(p, &settings)))
            .filter(|a| {
                policy
                    .allowed_by(&identity.user(), &identity.groups(), a)
                    .is_none()
            })
            .map(|a| a.denial(&identity))
            .collect();
        assert!(denied.is_empty(), "{RBAC} lacks:\n{}", denied.join("\n"));
    }

    #[test]
    fn the_shipped_rbac_grants_nothing_check_does_not_review() {
        let text = std::fs::read_to_string(RBAC).unwrap_or_else(|e| panic!("{RBAC}: {e}"));
        let objects =
            fake_apiserver::parse_documents(&text, RBAC).unwrap_or_else(|e| panic!("{e}"));
        let mut granted = BTreeSet::new();
        // The admins' roles for `fleet` are never the node identity's (packaging/check-manifests
        // holds them to the fleet commands' own list).
        for role in objects
            .iter()
            .filter(|o| matches!(o["kind"].as_str(), Some("ClusterRole" | "Role")))
            .filter(|o| o["metadata"]["name"] != crate::cli::fleet::ADMIN_ROLE)
        {
            for rule in role["rules"].as_array().into_iter().flatten() {
                let list = |k: &str| -> Vec<String> {
                    rule[k]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                };
                for group in list("apiGroups") {
                    for resource in list("resources") {
                        for verb in list("verbs") {
                            granted.insert((verb, group.clone(), resource.clone()));
                        }
                    }
                }
            }
        }
        let reviewed: BTreeSet<(String, String, String)> = permissions(&every_feature())
            .iter()
            .map(|p| {
                let resource = if p.subresource.is_empty() {
                    p.resource.to_owned()
                } else {
                    format!("{}/{}", p.resource, p.subresource)
                };
                (p.verb.to_owned(), p.group.to_owned(), resource)
            })
            .collect();
        let extra: Vec<_> = granted.difference(&reviewed).collect();
        assert!(
            extra.is_empty(),
            "{RBAC} grants what check does not review: {extra:?}"
        );
    }
}
