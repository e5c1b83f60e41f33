//! What on a Node is provably ours, for restore: a taint key under our prefix or configured, a
//! cordon whose `spec.unschedulable` our field manager alone owns, a load-balancer label our
//! manager alone owns, a marker annotation our manager alone wrote (its record then says which
//! taints we added, whatever the configuration says today), a taint list our manager wrote last
//! (for a restore that finds no marker). Pure: reads a Node, sends nothing.
//!
//! Ownership is read from `metadata.managedFields`, which only the API server writes. A
//! co-owner means someone else set the same value too (server-side apply shares a field whose
//! value it does not change, so an admin's `kubectl apply --server-side` of
//! `unschedulable: true` lists both managers): their wish is kept. Without managedFields there
//! is no evidence only we could have produced: the marker and the node-lifecycle controller's
//! `node.kubernetes.io/unschedulable` taint (with its readable `timeAdded`) can be copied by
//! anyone who reads and writes the Node, so a time match proves nothing; the cordon and the
//! label then stay.

use k8s_openapi::api::core::v1::Node;

use crate::api::guarded::FIELD_MANAGER;

/// Every taint key under this prefix is ours (besides the configured `[taint] key`).
pub const OUR_TAINT_PREFIX: &str = "kube-shutdown-drain/";
/// The well-known label that takes a node out of external load balancers (the service
/// controller's `node.kubernetes.io/exclude-from-external-load-balancers`; set the same way by
/// aws-node-termination-handler and bottlerocket-update-operator while they drain).
pub const EXCLUDE_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// A field we may have set, as restore names it.
struct Field {
    /// In managedFields' `fieldsV1`, as a JSON pointer.
    pointer: &'static str,
    /// For a person.
    name: &'static str,
    /// What happened when our manager no longer owns it.
    lost: &'static str,
}

const CORDON: Field = Field {
    pointer: "/f:spec/f:unschedulable",
    name: "spec.unschedulable",
    lost: "someone uncordoned and cordoned it since",
};

const LB_LABEL: Field = Field {
    pointer: "/f:metadata/f:labels/f:node.kubernetes.io~1exclude-from-external-load-balancers",
    name: "label node.kubernetes.io/exclude-from-external-load-balancers",
    lost: "someone removed and set it again since",
};

const MARKER: Field = Field {
    pointer: "/f:metadata/f:annotations/f:kube-shutdown-drain~1marker",
    name: "annotation kube-shutdown-drain/marker",
    lost: "someone else wrote it since",
};

const TAINTS: Field = Field {
    pointer: TAINTS_POINTER,
    name: "spec.taints",
    lost: "someone else changed the taints since",
};

/// A taint key restore may remove: the configured `[taint] key` or one under
/// [`OUR_TAINT_PREFIX`]. Nothing in a marker widens this.
pub fn is_our_taint_key(key: &str, configured: &str) -> bool {
    key == configured || key.starts_with(OUR_TAINT_PREFIX)
}

/// Whether the cordon on `node` is still ours alone; `Err` says why not (or why that cannot be
/// told). Our field manager must be the sole owner of `f:spec.f:unschedulable`: an uncordon
/// removes our ownership, a later cordon by anyone gives it to them, and an admin's server-side
/// apply of the same value makes them a co-owner. Without managedFields it is never ours (see
/// the module doc).
pub fn cordon_is_ours(node: &Node) -> Result<(), NotOurs> {
    sole_owner(node, &CORDON)
}

/// Whether the marker annotation on `node` was written by our field manager alone; `Err` says why
/// not. A marker we wrote lists exactly the taints its prepares added, so its record (not
/// today's `[taint] key`) says which taints restore removes; a marker anyone else wrote (an
/// admin's `kubectl annotate`, a copy, a forgery) widens nothing beyond [`is_our_taint_key`].
pub fn marker_is_ours(node: &Node) -> Result<(), NotOurs> {
    sole_owner(node, &MARKER)
}

/// Whether our field manager alone owns `spec.taints` on `node` (the list is atomic, so its last
/// writer owns all of it); `Err` says why not. For a restore that finds no marker: a taint with
/// our key in a list we wrote last is one we added, since we never write a taint with our key
/// that is not ours.
pub fn taints_are_ours(node: &Node) -> Result<(), NotOurs> {
    sole_owner(node, &TAINTS)
}

/// Whether the cordon on `node` may be ours though [`cordon_is_ours`] cannot prove it: our field
/// manager shares `spec.unschedulable` with another, or the server sends no managedFields. A
/// restore without a marker leaves such a cordon and says how to remove it.
pub fn cordon_may_be_ours(node: &Node) -> bool {
    no_managed_fields(node) || owners(node, CORDON.pointer).0
}

/// Whether our field manager owns [`EXCLUDE_LB_LABEL`] on `node` at all (alone or with others).
/// Without managedFields the label is never taken for possibly ours: kubeadm sets it on
/// control-plane nodes.
pub fn lb_label_owned_by_us(node: &Node) -> bool {
    owners(node, LB_LABEL.pointer).0
}

/// The value of [`EXCLUDE_LB_LABEL`] on `node`, if it has the label.
pub fn lb_label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXCLUDE_LB_LABEL))
        .map(String::as_str)
}

/// Whether [`EXCLUDE_LB_LABEL`] on `node` is still ours alone; `Err` says why not. The same
/// rule as for the cordon ([`cordon_is_ours`]). One case it cannot see: an admin who re-sets the
/// label to the value it already has with a plain write (`kubectl label --overwrite`, a merge
/// patch) changes nothing, so the server records no new owner and restore removes the label
/// (docs/restore.md, "What restore will never undo", says how to keep it).
pub fn lb_label_is_ours(node: &Node) -> Result<(), NotOurs> {
    sole_owner(node, &LB_LABEL)
}

/// The field managers other than ours that own `spec.unschedulable` on `node` (one that set it
/// to `false` does; an uncordon that removed the field leaves no owner), for people.
pub fn cordon_owners(node: &Node) -> Vec<String> {
    owners(node, CORDON.pointer).1
}

/// The field managers other than ours that own `spec.taints` on `node`: the list is atomic, so
/// its last writer owns all of it (the one that removed a taint, or the node-lifecycle
/// controller when it changed its own taints since), for people.
pub fn taint_owners(node: &Node) -> Vec<String> {
    owners(node, TAINTS_POINTER).1
}

/// The field managers other than ours that own the annotation `key` on `node` (the last to set
/// it, and any who set the same value with server-side apply), for people: who put a hold on
/// the node. None when the server sends no managedFields.
pub fn annotation_owners(node: &Node, key: &str) -> Vec<String> {
    // A JSON pointer escapes `~` and `/` in a segment (RFC 6901).
    let segment = key.replace('~', "~0").replace('/', "~1");
    owners(node, &format!("/f:metadata/f:annotations/f:{segment}")).1
}

const TAINTS_POINTER: &str = "/f:spec/f:taints";

/// Whether our field manager (operation Update, the only one we send) owns the field at
/// `pointer` on `node`, and which other managers do ("name", or "name (operation)" when not an
/// Update).
fn owners(node: &Node, pointer: &str) -> (bool, Vec<String>) {
    let managed = node.metadata.managed_fields.as_deref().unwrap_or_default();
    let mut ours = false;
    let mut others: Vec<String> = Vec::new();
    for e in managed {
        let owns = e
            .fields_v1
            .as_ref()
            .and_then(|f| f.0.pointer(pointer))
            .is_some();
        if !owns {
            continue;
        }
        let manager = e.manager.as_deref().unwrap_or("?");
        let operation = e.operation.as_deref().unwrap_or("?");
        if manager == FIELD_MANAGER && operation == "Update" && e.subresource.is_none() {
            ours = true;
            continue;
        }
        let name = if operation == "Update" {
            manager.to_string()
        } else {
            format!("{manager} ({operation})")
        };
        if !others.contains(&name) {
            others.push(name);
        }
    }
    (ours, others)
}

fn no_managed_fields(node: &Node) -> bool {
    node.metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default()
        .is_empty()
}

/// Why a field on a Node is not provably ours alone. Each names the field; the node is the
/// caller's to name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOurs {
    /// The server sends no managedFields: whose the field is cannot be told.
    #[error(
        "the server sends no managedFields, so whose {field} this is cannot be told (nothing \
         on a Node that only we could have written proves it ours)"
    )]
    NoManagedFields { field: &'static str },
    /// Our field manager owns it together with `others` (", "-joined).
    #[error("{field} is also owned by field manager {others}: someone else set it too")]
    Shared { field: &'static str, others: String },
    /// No field manager owns it any more; `lost` says what happened.
    #[error("field manager {FIELD_MANAGER} no longer owns {field} ({lost})")]
    Lost {
        field: &'static str,
        lost: &'static str,
    },
    /// `others` (", "-joined) own it now, not our field manager.
    #[error("{field} is owned by field manager {others} now, not by {FIELD_MANAGER}")]
    Taken { field: &'static str, others: String },
}

/// Whether our field manager (operation Update, the only one we send) is the sole owner of
/// `field` on `node`.
fn sole_owner(node: &Node, field: &Field) -> Result<(), NotOurs> {
    let name = field.name;
    if no_managed_fields(node) {
        return Err(NotOurs::NoManagedFields { field: name });
    }
    let (ours, others) = owners(node, field.pointer);
    let others = others.join(", ");
    match (ours, others.is_empty()) {
        (true, true) => Ok(()),
        (true, false) => Err(NotOurs::Shared {
            field: name,
            others,
        }),
        (false, true) => Err(NotOurs::Lost {
            field: name,
            lost: field.lost,
        }),
        (false, false) => Err(NotOurs::Taken {
            field: name,
            others,
        }),
    }
}
