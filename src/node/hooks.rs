//! The pre-drain hook annotations of the cluster's operators, Cluster API's pattern
//! (`pre-drain.delete.hook.machine.cluster.x-k8s.io/NAME` on a Machine, in
//! `cluster-api` `internal/controllers/machine`): a controller that must act before this node
//! drains (move a storage replica, hand over a database primary) puts
//! [`PRE_DRAIN_HOOK_PREFIX`]`NAME` on the Node, whatever value; when the node wants to drain it
//! says so (the `MaintenancePlanned` condition with reason `WaitingForHooks`, an Event
//! `WaitingForHooks`) and waits until every such annotation is gone, which the controller does
//! when its work is done. The wait is bounded: `[fleet] hook_timeout` for a drain the node
//! decides (then it gives up and gives its slot back), the half of logind's budget for a
//! shutdown logind announces (then it drains, as the evictions start without the cordon then).
//! Pure: what is pending on a Node as read; the wait is the engine's (`engine/hooks.rs`).

use k8s_openapi::api::core::v1::Node;

/// The prefix of a pre-drain hook annotation; the rest of the key names the hook.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.hook.kube-shutdown-drain.io/";

/// The names of the pre-drain hooks on `node` (each annotation's key after the prefix), sorted.
pub fn pending(node: &Node) -> Vec<String> {
    let mut names: Vec<String> = node
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix(PRE_DRAIN_HOOK_PREFIX))
        .map(crate::text::outside)
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_annotations_under_the_prefix_are_hooks_named_after_it() {
        let mut node = Node::default();
        assert!(pending(&node).is_empty());
        node.metadata.annotations = Some(
            [
                ("pre-drain.hook.kube-shutdown-drain.io/rook", "move osd"),
                ("pre-drain.hook.kube-shutdown-drain.io/pg", ""),
                ("kube-shutdown-drain/hold", "x"),
                ("pre-drain.delete.hook.machine.cluster.x-k8s.io/rook", ""),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        assert_eq!(pending(&node), ["pg", "rook"]);
    }
}
