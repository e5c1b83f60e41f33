//! The drain's last stage (`[drain] daemonsets = "stop-last"`): the node's DaemonSet pods,
//! which the drain left while the workloads went, are stopped once nothing else is left, so log
//! shippers and metrics agents see the workloads' last minutes and stop cleanly instead of in
//! systemd's final kill (the order of Karpenter's termination: workloads, then DaemonSets,
//! critical ones last).
//!
//! First [`crate::node::daemonsets`]' NoSchedule taint goes on (recorded in the marker), so the
//! DaemonSet controller does not create a stopped pod again; then the pods the plan marked
//! ([`crate::policy::filters::last_stage_order`]) are evicted group by group, lowest priority
//! first and `system-node-critical` last, each with its grace fitted to the time left like any
//! eviction. Without the taint nothing is evicted: the controller would replace each pod at once.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Schedule;
use super::run::Run;
use crate::node::{self, NodeOps};
use crate::policy::filters::Action;
use crate::words::count;

/// Runs the last stage until its pods are gone (`false`) or the work deadline (`true`); a
/// taint that cannot be written is an error in `errors` and stops nothing.
pub(super) async fn stop(
    run: &Arc<Run>,
    new_pods: &mut mpsc::UnboundedReceiver<Pod>,
    errors: &mut Vec<String>,
    work_deadline: Instant,
) -> bool {
    let name = &run.settings.node_name;
    let rows: Vec<_> = run
        .snapshot()
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r.plan.last.is_some() && !run.tracker.is_gone(&r.plan.uid))
        .collect();
    if rows.is_empty() {
        return false;
    }
    let ops = NodeOps {
        clients: &run.clients,
        settings: &run.settings,
        kind: None,
    };
    let tainted = match node::read_boot_id(&run.settings.boot_id_path) {
        Ok(boot_id) => ops.taint_for_daemonsets(&boot_id, work_deadline).await,
        Err(e) => Err(e),
    };
    if let Err(e) = tainted {
        let message = format!(
            "daemonsets = \"stop-last\": {e}; the {} of node {name} were left running",
            count(rows.len(), "DaemonSet pod", "DaemonSet pods")
        );
        tracing::error!("{message}");
        errors.push(message);
        return false;
    }
    tracing::info!(
        "node {name} tainted {}:{}; stopping {} last, system-node-critical ones at the end",
        node::daemonsets::DAEMONSETS_TAINT_KEY,
        node::daemonsets::DAEMONSETS_TAINT_EFFECT,
        count(rows.len(), "DaemonSet pod", "DaemonSet pods")
    );
    let mut schedule = Schedule::default();
    for (id, row) in rows {
        let mut p = row.plan;
        p.action = Action::Evict;
        p.order = p.last;
        run.replan(id, &p);
        schedule.file(run, id, p);
    }
    schedule.run(run, new_pods, errors, work_deadline).await
}
