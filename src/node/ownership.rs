//! What on a Node is provably ours, for restore: a taint key under our prefix or configured, a
//! cordon whose `spec.unschedulable` our field manager still owns (or, without managedFields,
//! whose lifecycle taint dates from our cordon), a load-balancer label our manager still owns.
//! Pure: reads a Node, sends nothing.

use k8s_openapi::api::core::v1::Node;

use super::marker::{EXCLUDE_LB_LABEL, Marker, OUR_TAINT_PREFIX, UNSCHEDULABLE_TAINT, taints};
use crate::api::guarded::FIELD_MANAGER;

/// Its field in managedFields' `fieldsV1`, as a JSON pointer.
const EXCLUDE_LB_FIELD: &str =
    "/f:metadata/f:labels/f:node.kubernetes.io~1exclude-from-external-load-balancers";
/// How far the lifecycle controller's `timeAdded` may lie before the time we recorded our
/// cordon (clocks of node and control plane differ; `timeAdded` has whole seconds).
const CORDON_TAINT_BEFORE: std::time::Duration = std::time::Duration::from_secs(5);
/// How far it may lie after (the controller's reaction time plus clock difference). A later
/// `timeAdded` is a later cordon: someone uncordoned and cordoned again.
const CORDON_TAINT_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// A taint key restore may remove: the configured `[taint] key` or one under
/// [`OUR_TAINT_PREFIX`]. Nothing in a marker widens this.
pub fn is_our_taint_key(key: &str, configured: &str) -> bool {
    key == configured || key.starts_with(OUR_TAINT_PREFIX)
}

/// Whether the cordon on `node` is still the one `marker` recorded as ours; `Err` says why not
/// (or why that cannot be told). With managedFields: our field manager must own
/// `f:spec.f:unschedulable` (an uncordon removes that, a later cordon by anyone gives it to
/// them). Without: the node-lifecycle controller's [`UNSCHEDULABLE_TAINT`] must have been added
/// when we cordoned ([`Marker::cordoned_at`]). Without both, it is not ours.
pub fn cordon_is_ours(node: &Node, marker: &Marker) -> Result<(), String> {
    if let Some(owners) = owners(node, "/f:spec/f:unschedulable") {
        if owners.contains(&FIELD_MANAGER) {
            return Ok(());
        }
        return Err(if owners.is_empty() {
            format!(
                "field manager {FIELD_MANAGER} no longer owns spec.unschedulable (someone uncordoned and cordoned it since)"
            )
        } else {
            format!(
                "spec.unschedulable is owned by field manager {} now, not by {FIELD_MANAGER}",
                owners.join(", ")
            )
        });
    }
    let added = taints(node)
        .into_iter()
        .find(|t| t.key == UNSCHEDULABLE_TAINT)
        .and_then(|t| t.time_added);
    let ours = marker
        .cordoned_at
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    match (added, ours) {
        (Some(added), Some(ours)) => {
            let added = added.0;
            let lo = ours - CORDON_TAINT_BEFORE;
            let hi = ours + CORDON_TAINT_AFTER;
            if lo <= added && added <= hi {
                Ok(())
            } else {
                Err(format!(
                    "the server sends no managedFields and the {UNSCHEDULABLE_TAINT} taint was added at {added}, not when we cordoned at {ours}: a cordon by someone else"
                ))
            }
        }
        (None, _) => Err(format!(
            "the server sends no managedFields and the node carries no {UNSCHEDULABLE_TAINT} taint with a time, so whose cordon this is cannot be told"
        )),
        (Some(_), None) => Err(format!(
            "the server sends no managedFields and the marker records no time of our cordon to compare with the {UNSCHEDULABLE_TAINT} taint"
        )),
    }
}

/// The value of [`EXCLUDE_LB_LABEL`] on `node`, if it has the label.
pub fn lb_label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(EXCLUDE_LB_LABEL))
        .map(String::as_str)
}

/// Whether [`EXCLUDE_LB_LABEL`] on `node` is still the one we added; `Err` says why not. The
/// same rule as for the cordon ([`cordon_is_ours`]): our field manager must own
/// `f:metadata.f:labels.f:node.kubernetes.io/exclude-from-external-load-balancers` (a removal
/// drops the ownership, a later write of the label by anyone takes it over). A server that sends
/// no managedFields gives no other evidence (a label has no time): the label is then not ours,
/// and stays.
pub fn lb_label_is_ours(node: &Node) -> Result<(), String> {
    let Some(owners) = owners(node, EXCLUDE_LB_FIELD) else {
        return Err(format!(
            "the server sends no managedFields, so whose label {EXCLUDE_LB_LABEL} is cannot be told"
        ));
    };
    if owners.contains(&FIELD_MANAGER) {
        Ok(())
    } else if owners.is_empty() {
        Err(format!(
            "field manager {FIELD_MANAGER} no longer owns label {EXCLUDE_LB_LABEL} (someone \
             removed and set it again since)"
        ))
    } else {
        Err(format!(
            "label {EXCLUDE_LB_LABEL} is owned by field manager {} now, not by {FIELD_MANAGER}",
            owners.join(", ")
        ))
    }
}

/// The field managers owning the field at `pointer` (in managedFields' `fieldsV1`); `None` when
/// the server sends no managedFields at all.
fn owners<'a>(node: &'a Node, pointer: &str) -> Option<Vec<&'a str>> {
    let managed = node.metadata.managed_fields.as_deref().unwrap_or_default();
    (!managed.is_empty()).then(|| {
        managed
            .iter()
            .filter(|e| {
                e.fields_v1
                    .as_ref()
                    .and_then(|f| f.0.pointer(pointer))
                    .is_some()
            })
            .map(|e| e.manager.as_deref().unwrap_or("?"))
            .collect()
    })
}
