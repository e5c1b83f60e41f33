//! The prepare of a Node: the marker, the taint and the cordon in one guarded patch
//! ([`NodeOps::prepare`]), tried again until its deadline while the failure is worth it.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Node;
use tokio::time::Instant;

use super::marker::{
    MarkerRead, PrepareInput, PreparePlan, is_unschedulable, prepare_patch, read_marker,
};
use super::ops::{NodeOps, Write};
use super::{NodeError, PrepareOutcome};
use crate::api::guarded::{GuardedError, Written};
use crate::backoff::Backoff;

impl NodeOps<'_> {
    /// One guarded prepare write; `sent` counts the patches it sends (one per attempt).
    async fn write_prepare(
        &self,
        node: &Node,
        input: &PrepareInput,
        deadline: Instant,
        sent: &AtomicUsize,
    ) -> Write<PreparePlan> {
        let name = self.name();
        self.write(node, deadline, |n| {
            let built = prepare_patch(n, name, input)?;
            sent.fetch_add(1, Ordering::Relaxed);
            Ok(Some(built))
        })
        .await
    }

    /// Writes the marker, the taint and the cordon in one guarded patch; transient failures are
    /// retried until `deadline`, and so is a write the server throttles past the deadline or
    /// whose guard keeps failing (round after round, the node read again each time). When the
    /// taint is refused (403: credentials that may not change taints; or another final answer)
    /// the marker and the cordon are written without it, and a refusal other than 403 is
    /// returned after that. If nothing can be written, nothing changed.
    #[tracing::instrument(skip_all, fields(node = %self.settings.node_name, boot_id = %boot_id))]
    pub async fn prepare(
        &self,
        why: &str,
        boot_id: &str,
        deadline: Instant,
    ) -> Result<PrepareOutcome, NodeError> {
        let name = self.name().to_string();
        let node = self.get_by(deadline).await?;
        let t = &self.settings.taint;
        let mut input = PrepareInput {
            why: why.to_string(),
            boot_id: boot_id.to_string(),
            time: jiff::Timestamp::now().to_string(),
            taint: t.enabled.then(|| t.taint()),
            taint_key: t.key.clone(),
            add_taint: true,
            kind: self.kind,
            exclude_from_load_balancers: self.settings.drain.exclude_from_load_balancers,
        };
        // What was ours before this prepare, to tell what this prepare changed (a write applied
        // although its answer was lost shows up only in the node read again).
        let before = marker_before(&node, &name);
        let had_cordon = before.as_ref().is_some_and(|m| {
            m.cordoned && is_unschedulable(&node) && super::cordon_is_ours(&node).is_ok()
        });
        let (written, taint_forbidden, taint_error) = self
            .write_prepare_until(node.clone(), &mut input, deadline)
            .await?;
        let replaced_foreign = written
            .applied
            .as_ref()
            .and_then(|p| p.replaced_foreign.clone());
        let marker = match (read_marker(&written.object), written.applied) {
            (MarkerRead::Ours(m), _) => m,
            (_, Some(plan)) => plan.marker,
            // The prepare builder always writes; without a write there is no marker to show.
            (_, None) => return Err(self.failed("prepare", GuardedError::Contended)),
        };
        let ours = t.enabled.then(|| (t.key.as_str(), t.effect.as_str()));
        let listed = |m: &super::Marker| {
            ours.is_some_and(|(k, e)| m.taints.iter().any(|x| x.key == k && x.effect == e))
        };
        // An earlier record of our taint counts only while the taint is still on the node.
        let had_taint = before.as_ref().is_some_and(listed)
            && ours.is_some_and(|(k, e)| {
                super::marker::taints(&node)
                    .iter()
                    .any(|x| x.key == k && x.effect == e)
            });
        let outcome = PrepareOutcome {
            again: before.as_ref().is_some_and(|m| m.boot_id == boot_id),
            cordoned: marker.cordoned && !had_cordon,
            tainted: listed(&marker) && !had_taint,
            taint_forbidden,
            marker,
            replaced_foreign,
        };
        say_prepared(&name, &outcome, taint_error.is_some());
        match taint_error {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }

    /// The prepare write, as [`Self::write_prepare_or_untainted`], from `node` as last read; a
    /// write that fails for a reason worth another try is tried again, with the node read again,
    /// until `deadline`. A prepare that gives up says how many writes it sent.
    async fn write_prepare_until(
        &self,
        node: Node,
        input: &mut PrepareInput,
        deadline: Instant,
    ) -> Result<(Written<Node, PreparePlan>, bool, Option<NodeError>), NodeError> {
        // A prepare that cannot write yet keeps trying until the deadline: a node going down
        // must not stay schedulable because the server throttled (429 with a Retry-After past
        // the deadline) or a guard kept failing (a 422 loop). Each round reads the node again.
        let mut backoff = Backoff::new();
        let mut current = node;
        let name = self.name();
        // Every round's attempts, so a prepare that gives up says how many writes it sent.
        let sent = AtomicUsize::new(0);
        // Whether a round found the node changed by someone else: a round the deadline then
        // cuts short (no answer in the time left) gives up because the node kept changing.
        let mut contended = false;
        let give_up = |e: NodeError, contended: bool| {
            with_attempts(e, sent.load(Ordering::Relaxed), contended, name)
        };
        loop {
            let e = match self
                .write_prepare_or_untainted(&current, input, deadline, &sent)
                .await
            {
                Ok(done) => return Ok(done),
                Err(e) => e,
            };
            contended |= matches!(e, NodeError::Contended { .. });
            let pause = backoff.next_pause();
            if !worth_another_prepare(&e) || Instant::now() + pause >= deadline {
                return Err(give_up(e, contended));
            }
            tracing::warn!("cannot prepare node {name} yet ({e}); trying again in {pause:?}");
            tokio::time::sleep(pause).await;
            current = match self.get_by(deadline).await {
                Ok(n) => n,
                Err(e) if worth_another_prepare(&e) && Instant::now() < deadline => continue,
                Err(e) => return Err(give_up(e, contended)),
            };
        }
    }

    /// One guarded prepare write; when the taint is refused for good (403: credentials that may
    /// not change taints; or another final answer), the same write without it. Returns the write,
    /// whether the taint was forbidden, and a refusal of the taint other than 403.
    async fn write_prepare_or_untainted(
        &self,
        node: &Node,
        input: &mut PrepareInput,
        deadline: Instant,
        sent: &AtomicUsize,
    ) -> Result<(Written<Node, PreparePlan>, bool, Option<NodeError>), NodeError> {
        let name = self.name();
        match self.write_prepare(node, input, deadline, sent).await {
            Ok(w) => Ok((w, false, None)),
            Err(GuardedError::Api(e)) if input.taint.is_some() && !e.is_transient() => {
                input.add_taint = false;
                let w = self
                    .write_prepare(node, input, deadline, sent)
                    .await
                    .map_err(|e| self.failed("prepare", e))?;
                if e.is_forbidden() {
                    tracing::warn!(
                        "may not taint node {name} ({}; kubelet credentials?); cordoned without the taint",
                        e.problem()
                    );
                    Ok((w, true, None))
                } else {
                    tracing::error!("cannot taint {e}; cordoned node {name} anyway");
                    let error = NodeError::Patch {
                        what: "taint",
                        source: e,
                    };
                    Ok((w, false, Some(error)))
                }
            }
            Err(e) => Err(self.failed("prepare", e)),
        }
    }
}

/// The marker on `node` before this prepare, ours; a foreign one is warned about (it is replaced,
/// and the node tainted and cordoned as for no marker) and counts as none.
fn marker_before(node: &Node, name: &str) -> Option<super::Marker> {
    match read_marker(node) {
        MarkerRead::Ours(m) => Some(m),
        MarkerRead::Absent => None,
        MarkerRead::Foreign(why) => {
            tracing::warn!(
                "the marker annotation on node {name} is not one we wrote ({why}); replacing it, and tainting and cordoning the node as for no marker"
            );
            None
        }
    }
}

/// The one line about a prepare of node `name`, logged when it lands (the CLI's and the
/// daemon's). `taint_refused`: the taint was refused for another reason than a 403.
fn say_prepared(name: &str, outcome: &PrepareOutcome, taint_refused: bool) {
    let taint = if outcome.tainted {
        "tainted"
    } else if outcome.taint_forbidden {
        "taint forbidden for these credentials"
    } else if taint_refused {
        "taint refused"
    } else {
        "taint already present or disabled"
    };
    let cordon = if outcome.cordoned {
        "cordoned"
    } else {
        "already cordoned"
    };
    tracing::info!(
        cordoned = outcome.cordoned,
        tainted = outcome.tainted,
        was_unschedulable = outcome.marker.was_unschedulable,
        "prepared node {name}: marker written, {taint}, {cordon}"
    );
}

/// `e` with the attempts of every round when it is [`NodeError::Contended`]: one guarded write
/// gives up after [`guarded::ATTEMPTS`](crate::api::guarded::ATTEMPTS), and a prepare tries
/// round after round until its deadline, so the error says how many writes were sent, not one
/// round's.
/// A transient failure after contended rounds (the deadline cut the last read or write short)
/// is said as the contention it ended: the node kept changing until the prepare's time was up.
fn with_attempts(e: NodeError, sent: usize, contended: bool, node: &str) -> NodeError {
    match e {
        NodeError::Contended { node, what, .. } => NodeError::Contended {
            node,
            what,
            attempts: sent,
        },
        NodeError::Get(ref a) | NodeError::WriteMarker(ref a) if contended && a.is_transient() => {
            NodeError::Contended {
                node: node.to_string(),
                what: "prepare",
                attempts: sent,
            }
        }
        e => e,
    }
}

/// Whether a failed prepare is worth another round before the deadline: no answer, 429 or 5xx
/// (including a Retry-After past the deadline, which the one retry gives up on at once), or a
/// guard that kept failing. A final refusal (403, 404, ...) is not.
fn worth_another_prepare(e: &NodeError) -> bool {
    match e {
        NodeError::Contended { .. } => true,
        NodeError::Get(e) | NodeError::WriteMarker(e) => e.is_transient(),
        _ => false,
    }
}
