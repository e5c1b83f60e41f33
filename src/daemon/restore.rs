//! Undoing what a prepare did: after a reboot (the marker names another boot ID) and after a
//! cancelled shutdown. Runs as its own task beside the lock, retries until it succeeds, and is
//! aborted when a new shutdown starts (the drain then owns the node).
//!
//! A soft-reboot (`systemctl soft-reboot`) restarts userspace but keeps the kernel and so the
//! boot ID: its marker is of this boot. The marker records the kind, and the boot restore undoes
//! a this-boot marker of kind "soft-reboot" once the daemon has read from logind that no
//! shutdown is being prepared (a daemon merely restarted during the soft-reboot's own drain sees
//! it still under way, and the drain, not the restore, gets the node).

use std::time::Duration;

use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::config::hooks::HookAt;
use crate::daemon::access::Access;
use crate::daemon::metrics::Metrics;
use crate::daemon::status::Status;
use crate::engine::settle::Settled;
use crate::engine::{Engine, Error};
use crate::events::Reason as EventReason;
use crate::node::{DAEMONSETS_TAINT_KEY, ForeignMarker, Marker, MarkerRead};
use crate::reboot::hooks::{self, HookEnv};
use crate::report::Covering;

/// First wait after a failed restore attempt; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between restore attempts: an API server that is down for long is retried twice
/// a minute, which costs nothing and puts the node back soon after it returns.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Why a restore runs; it decides which markers are ours to undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Daemon start: undo only a marker written in another boot, after the Node is Ready.
    Boot,
    /// `PrepareForShutdown(false)`: undo the marker this boot's prepare wrote, at once.
    Cancel,
}

/// Restores the node, retrying with a doubling backoff until an attempt succeeds.
#[tracing::instrument(skip_all, fields(node = %access.settings.node_name, trigger = ?trigger))]
pub(crate) async fn restore_until_done(
    access: Access,
    status: Status,
    metrics: Metrics,
    trigger: Trigger,
    mut quiet: watch::Receiver<bool>,
) {
    let node = access.settings.node_name.clone();
    let mut backoff = Backoff::between(RETRY_FIRST, RETRY_MAX);
    // This userspace's start, near enough: a kubelet heartbeat after it is of this userspace
    // even when the kernel (and its boot time) outlived a soft-reboot.
    let spawned = jiff::Timestamp::now();
    loop {
        match attempt(&access, &status, trigger, &mut quiet, spawned).await {
            Ok(restored) => {
                status.set_restore(None);
                if restored {
                    metrics.restored(true);
                }
                return;
            }
            Err(e) if e.is_permanent() => {
                // No try passes sooner for asking: the slowest pace, until the kubeconfig, the
                // server's certificate or the node's clock is put right.
                metrics.restored(false);
                tracing::error!(
                    "restoring node {node} failed: {e}; trying again in {} s, once the \
                     kubeconfig, the server's certificate or the node's clock is put right",
                    RETRY_MAX.as_secs()
                );
                status.set_restore(Some(format!("restore of node {node} failing: {e}")));
                tokio::time::sleep(RETRY_MAX).await;
            }
            Err(e) => {
                metrics.restored(false);
                let wait = backoff.next_pause();
                tracing::warn!(
                    "restoring node {node} failed: {e}; retrying in {:.1} s",
                    wait.as_secs_f64()
                );
                status.set_restore(Some(format!("restore of node {node} failing: {e}")));
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One attempt; `Ok(true)` when a marker was acted on, `Ok(false)` when there was nothing of
/// ours to undo now. `quiet` turns true once the daemon read from logind that no shutdown is
/// being prepared.
async fn attempt(
    access: &Access,
    status: &Status,
    trigger: Trigger,
    quiet: &mut watch::Receiver<bool>,
    spawned: jiff::Timestamp,
) -> Result<bool, Error> {
    let node = &access.settings.node_name;
    // A fresh engine per attempt (the credential cache is shared): the client lives only while
    // the restore runs.
    let engine = access.engine().await?;
    let marker = match marker_on_node(&engine, node, trigger).await? {
        None => {
            give_back_slots(access, &engine).await?;
            return Ok(false);
        }
        Some(MarkerRead::Absent) => {
            tracing::info!("node {node} carries no marker of ours; nothing to restore");
            // A drain slot this node still holds (its drain never cordoned) goes back too.
            give_back_slots(access, &engine).await?;
            return Ok(false);
        }
        Some(MarkerRead::Foreign(why)) => {
            clear_foreign(&engine, node, &why).await?;
            return Ok(true);
        }
        Some(MarkerRead::Ours(m)) => m,
    };
    if trigger == Trigger::Boot
        && !ready_for_boot_restore(access, &engine, status, &marker, quiet, spawned).await?
    {
        return Ok(false);
    }
    restore_marker(access, &engine, status, &marker).await?;
    Ok(true)
}

/// Reads the marker on the node; after a cancel that found none, first waits for a late one
/// ([`late_marker`]). `None`: a cancel's wait ended with no marker.
async fn marker_on_node(
    engine: &Engine,
    node: &str,
    trigger: Trigger,
) -> Result<Option<MarkerRead>, Error> {
    let read = engine.node().await.map(|n| crate::node::read_marker(&n))?;
    if trigger == Trigger::Cancel && matches!(read, MarkerRead::Absent) {
        if !late_marker(engine, node).await? {
            return Ok(None);
        }
        return Ok(Some(
            engine.node().await.map(|n| crate::node::read_marker(&n))?,
        ));
    }
    Ok(Some(read))
}

/// Gives back the drain slots of a node with no marker of ours, within the drain timeout.
async fn give_back_slots(access: &Access, engine: &Engine) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + access.settings.drain.timeout;
    engine.give_back_slots(deadline).await
}

/// Clears a marker we did not write: nothing in it is acted on, the restore only clears it (with
/// an Event).
async fn clear_foreign(engine: &Engine, node: &str, why: &ForeignMarker) -> Result<(), Error> {
    tracing::warn!("the marker annotation on node {node} is not one we wrote ({why}); clearing it");
    let outcome = engine.restore().await?;
    tracing::info!(
        "restored node {node}: {}",
        crate::engine::restore_text(&outcome)
    );
    Ok(())
}

/// Undoes what our `marker` recorded, at once, or with `[fleet] release_delay` keeping the
/// node's drain slots that long after.
async fn restore_marker(
    access: &Access,
    engine: &Engine,
    status: &Status,
    marker: &Marker,
) -> Result<(), Error> {
    let node = &access.settings.node_name;
    status.set_restore(Some(format!("restoring node {node}")));
    let delay = access.settings.fleet.release_delay;
    let settle = engine.settle_record(marker);
    // Post-restore hooks run with the slot still held: it goes back after them.
    let hooks_after = access
        .settings
        .hooks
        .iter()
        .any(|h| h.at == HookAt::PostRestore);
    if delay.is_zero() && settle.is_none() && !hooks_after {
        let outcome = engine.restore().await?;
        tracing::info!(
            "restored node {node} (marker of boot {}): {}",
            marker.boot_id,
            crate::engine::restore_text(&outcome)
        );
        post_restore_hooks(access).await;
        return Ok(());
    }
    restore_keeping_slots(access, engine, status, marker, settle).await
}

/// `[fleet] release_delay` and `settle_max`: the slot is carried into this boot before the
/// marker goes (a restored node holding a slot of another boot is stale to the others, who
/// would take it at once), and given back only after the delay and once the cluster settled
/// (`settle`: the budgets of the pods the drain evicted). A daemon stopped meanwhile gives it
/// back at its next start (no marker left: the slot goes back at once).
async fn restore_keeping_slots(
    access: &Access,
    engine: &Engine,
    status: &Status,
    marker: &Marker,
    settle: Option<Covering>,
) -> Result<(), Error> {
    let node = &access.settings.node_name;
    let deadline = tokio::time::Instant::now() + access.settings.drain.timeout;
    let kept = engine.carry_slots(deadline).await?;
    let outcome = engine.restore_keeping_slots(deadline).await?;
    tracing::info!(
        "restored node {node} (marker of boot {}): {}",
        marker.boot_id,
        crate::engine::restore_text(&outcome)
    );
    post_restore_hooks(access).await;
    if !kept.is_empty() {
        let restored = tokio::time::Instant::now();
        let delay = access.settings.fleet.release_delay;
        if !delay.is_zero() {
            let said = format!(
                "node {node} keeps drain slot {} for release_delay ({} s) so its workloads \
                 settle before the next node drains",
                kept.join(", "),
                delay.as_secs()
            );
            tracing::info!("{said}");
            status.set_restore(Some(said));
            tokio::time::sleep(delay).await;
        }
        if let Some(covering) = settle {
            let until = restored + access.settings.fleet.settle_max;
            settle_budgets(engine, status, &kept, &covering, until).await;
        }
    }
    give_back_restored(access, engine, status).await;
    Ok(())
}

/// Keeps the slots `kept` until every budget of `covering` is healthy again or `until` (then
/// a Warning Event names the budgets still short); says what it waits for in the status line.
async fn settle_budgets(
    engine: &Engine,
    status: &Status,
    kept: &[String],
    covering: &Covering,
    until: tokio::time::Instant,
) {
    let node = &engine.settings().node_name;
    let what = match covering {
        Covering::Budgets(names) => format!("PodDisruptionBudgets {}", names.join(", ")),
        Covering::Namespaces(ns) => format!("every PodDisruptionBudget in {}", ns.join(", ")),
    };
    let max = engine.settings().fleet.settle_max.as_secs();
    let said = format!(
        "node {node} keeps drain slot {} until the cluster has settled: {what} healthy again \
         (the pods it evicted; at most settle_max, {max} s after the restore)",
        kept.join(", ")
    );
    tracing::info!("{said}");
    status.set_restore(Some(said));
    let started = tokio::time::Instant::now();
    let unsettled = match engine.settle(covering, until).await {
        Ok(Settled::Healthy) => {
            tracing::info!(
                "node {node}: {what} healthy again after {:.1} s; giving back drain slot {}",
                started.elapsed().as_secs_f64(),
                kept.join(", ")
            );
            return;
        }
        Ok(Settled::Short(short)) => format!(
            "still short at settle_max ({max} s): {}",
            crate::text::outside(&short.join("; "))
        ),
        Ok(Settled::Unreadable(e)) => format!("cannot be watched: {e}"),
        Err(e) => format!("cannot be read: {e}"),
    };
    let message = format!(
        "node {node} gives back drain slot {} with {what} {unsettled}",
        kept.join(", ")
    );
    tracing::warn!("{message}");
    engine.event(EventReason::SlotUnsettled, &message).await;
}

/// The post-restore hooks of `[[hook]]`, after the restore of a drain whose pre-drain hooks
/// passed (its record, `reboot::hooks::take_pending`), before the slot goes back: each runs
/// whatever the others did, and one that fails is a Warning Event `PostRestoreHookFailed`; the
/// restore stands either way.
async fn post_restore_hooks(access: &Access) {
    let settings = &access.settings;
    let node = settings.node_name.as_str();
    if !settings.hooks.iter().any(|h| h.at == HookAt::PostRestore) {
        return;
    }
    let Some(pending) = hooks::take_pending(&settings.state_dir, node) else {
        return;
    };
    let env = HookEnv {
        node,
        reason: &pending.reason,
        kind: &pending.kind,
    };
    for run in hooks::post_restore(&settings.hooks, env).await {
        if run.passed() {
            tracing::info!(node = %node, "{run} after the restore of node {node}");
            continue;
        }
        let message = format!("node {node} is restored, but its {run}");
        tracing::warn!(node = %node, "{message}");
        Engine::post_event(
            settings.clone(),
            EventReason::PostRestoreHookFailed,
            message,
        )
        .await;
    }
}

/// Gives back the slots of a node already restored, retrying until it succeeds: a failure here
/// is not a failed restore (the node is back), only a slot the others wait for longer.
async fn give_back_restored(access: &Access, engine: &Engine, status: &Status) {
    let node = &access.settings.node_name;
    let mut backoff = Backoff::between(RETRY_FIRST, RETRY_MAX);
    loop {
        let deadline = tokio::time::Instant::now() + access.settings.drain.timeout;
        let Err(e) = engine.give_back_slots(deadline).await else {
            return;
        };
        // A refused certificate passes no sooner for asking: the slowest pace.
        let wait = if e.is_permanent() {
            RETRY_MAX
        } else {
            backoff.next_pause()
        };
        tracing::warn!(
            "node {node} is restored but cannot give back its drain slot: {e}; retrying in {:.1} s",
            wait.as_secs_f64()
        );
        status.set_restore(Some(format!(
            "node {node} restored; giving back its drain slot failing: {e}"
        )));
        tokio::time::sleep(wait).await;
    }
}

/// After a cancel found no marker: the prepare PATCH of a drain stopped by the cancel may have
/// been sent and not yet applied (kube-apiserver finishes a request whose client went away, up
/// to its request timeout). Watches the Node that long; true when a marker appeared.
async fn late_marker(engine: &Engine, node: &str) -> Result<bool, Error> {
    tracing::info!("node {node} carries no marker of ours; nothing to restore");
    let deadline = tokio::time::Instant::now() + engine.settings().landing_window;
    if !engine.wait_for_marker(deadline).await? {
        return Ok(false);
    }
    tracing::info!("a marker landed on node {node} after the cancel; restoring it");
    Ok(true)
}

/// The boot restore's conditions for `marker`: of another boot, or of a soft-reboot of this one
/// once logind prepares no shutdown (`quiet`); then the node Ready with a live kubelet (an
/// error when it is not, by the restore timeout: the attempt is tried again). False: the
/// marker is left for the shutdown of this boot that wrote it.
async fn ready_for_boot_restore(
    access: &Access,
    engine: &Engine,
    status: &Status,
    marker: &Marker,
    quiet: &mut watch::Receiver<bool>,
    spawned: jiff::Timestamp,
) -> Result<bool, Error> {
    let node = &access.settings.node_name;
    let boot_id = engine.boot_id()?;
    // After a soft-reboot the kernel's boot time predates the old kubelet's last heartbeats:
    // only one after this userspace started shows the new kubelet.
    let soft_reboot = marker.boot_id == boot_id;
    if soft_reboot && !this_boot_marker_due(node, &boot_id, marker, quiet).await {
        return Ok(false);
    }
    let limit = access.settings.daemon.restore_ready_timeout;
    status.set_restore(Some(format!(
        "waiting up to {} s for node {node} to be Ready before restoring",
        limit.as_secs()
    )));
    tracing::info!(
        "node {node} carries our marker from boot {} ({}); waiting up to {} s for it to be Ready",
        marker.boot_id,
        marker.kind.map_or("kind not recorded", |k| k.as_str()),
        limit.as_secs()
    );
    let deadline = tokio::time::Instant::now() + limit;
    // Only a live kubelet counts: a Ready=True left by the previous boot's kubelet stays for
    // ~40 s after it stopped. Without one the node stays cordoned and this attempt fails, to be
    // tried again.
    let since = if soft_reboot {
        spawned
    } else {
        crate::node::boot_started()?
    };
    engine.wait_ready_since(deadline, since).await?;
    daemonsets_then_agents(engine, status, node, marker, deadline, since).await?;
    Ok(true)
}

/// For a marker of this boot (`boot_id`): true once it is ours to restore, a soft-reboot's or
/// the node's own reboot's, after logind says no shutdown is being prepared (`quiet`). False:
/// another kind, left for the shutdown that wrote it, or the daemon is stopping.
async fn this_boot_marker_due(
    node: &str,
    boot_id: &str,
    marker: &Marker,
    quiet: &mut watch::Receiver<bool>,
) -> bool {
    // The daemon's own reboot (`[reboot]`) writes its marker before logind's window: one
    // still carrying its reason never reached that window (the daemon stopped, or the need
    // went while it was away), and no shutdown will come back for it.
    let own_reboot = marker.why == crate::daemon::reboot::OWN_REBOOT_WHY;
    if !own_reboot && !marker.kind.is_some_and(|k| k.keeps_boot_id()) {
        tracing::info!(
            "the marker on node {node} is from this boot ({boot_id}); left for the shutdown \
             that wrote it"
        );
        return false;
    }
    let what = if own_reboot {
        "the node's own reboot, which never reached logind's window"
    } else {
        "a soft-reboot of this boot"
    };
    tracing::info!(
        "the marker on node {node} is from {what} ({boot_id}); restoring it once logind says \
         no shutdown is being prepared"
    );
    // Never resolves while a shutdown is under way: that shutdown aborts this task.
    if quiet.wait_for(|q| *q).await.is_err() {
        return false;
    }
    if own_reboot {
        tracing::info!("logind prepares no shutdown of node {node}: restoring");
    } else {
        tracing::info!(
            "logind prepares no shutdown: the soft-reboot of node {node} is over; restoring"
        );
    }
    true
}

/// Once the node is Ready: the DaemonSet pods a last stage stopped come back first, then the
/// node's own agents are waited for, all by `deadline` (an error when they do not run, so the
/// attempt is tried again).
async fn daemonsets_then_agents(
    engine: &Engine,
    status: &Status,
    node: &str,
    marker: &Marker,
    deadline: tokio::time::Instant,
    since: jiff::Timestamp,
) -> Result<(), Error> {
    // The DaemonSet pods a last stage stopped come back first, while the node stays cordoned:
    // they may be the very agents the restore waits for.
    if marker.taints.iter().any(|t| t.key == DAEMONSETS_TAINT_KEY)
        && engine.untaint_daemonsets(deadline).await?
    {
        tracing::info!(
            "node {node} is Ready; removed taint {DAEMONSETS_TAINT_KEY} first, so the \
             DaemonSet controller brings back the pods the drain stopped last while the node \
             stays cordoned"
        );
    }
    // Then the node's own agents, within the same timeout (the same retry when they do not run).
    if engine.waits_for_agents() {
        engine
            .wait_for_agents(deadline, since, |left| {
                tracing::info!("node {node} is Ready; before restoring, waiting for {left}");
                status.set_restore(Some(format!(
                    "waiting for the agents of node {node} before restoring: {left}"
                )));
            })
            .await?;
    }
    Ok(())
}
