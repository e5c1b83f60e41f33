//! A slot wait's place in line: its waiting Lease, written once the wait has lasted
//! [`queue::JOIN_AFTER`], renewed, given back however the wait ends ([`LeaveOnDrop`]).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use tokio::time::Instant;

use super::Slots;
use super::watch::Watched;
use crate::api::guarded::{self, FIELD_MANAGER, GuardedError};
use crate::fleet::queue::{self, Line};
use crate::fleet::{HeldTimes, Holder, holder_of, identity, release_patch, slot_names};

/// What a node that waits for a slot has written of its wait.
#[derive(Debug)]
pub(super) struct Waiting {
    /// When it started to wait.
    pub(super) started: Instant,
    /// When it last wrote its waiting Lease; `None`: it has not.
    pub(super) renewed: Option<Instant>,
    /// When its wait started as its waiting Lease says (`acquireTime`); `None` before it is
    /// written.
    pub(super) since: Option<jiff::Timestamp>,
    /// When its last write of its waiting Lease failed (it waits out of line meanwhile): the
    /// write is tried again [`queue::RETRY_AFTER`] later. `None`: the last one went through.
    pub(super) failed: Option<Instant>,
    /// The line showed its waiting Lease held (an earlier run of its daemon wrote it).
    pub(super) listed: bool,
}

impl Waiting {
    /// When its waiting Lease is next to be written: joined [`queue::JOIN_AFTER`] after the wait
    /// started, renewed every [`queue::RENEW`]; a write that failed is tried again
    /// [`queue::RETRY_AFTER`] later (a server too busy to answer in time at a fleet-wide wave
    /// must not leave the node out of line for the rest of its wait).
    pub(super) fn next_write(&self) -> Instant {
        match (self.failed, self.renewed) {
            (Some(at), _) => at + queue::RETRY_AFTER,
            (None, None) => self.started + queue::JOIN_AFTER,
            (None, Some(at)) => at + queue::RENEW,
        }
    }

    /// Whether this node's waiting Lease may be held: written by this wait, or seen held (by an
    /// earlier run of its daemon).
    pub(super) fn in_line(&self) -> bool {
        self.renewed.is_some() || self.listed
    }

    /// Whether its waiting Lease may be held, to be given back when the wait ends: in line, or
    /// a write of it failed (the server may have applied a write whose answer was lost).
    pub(super) fn may_hold(&self) -> bool {
        self.in_line() || self.failed.is_some()
    }
}

/// A wait for a slot that gives its waiting Lease back however it ends: [`Slots::take`] gives
/// it back itself when the wait ends; a wait dropped before that (the reboot it was for called
/// off, the daemon's task aborted) leaves the give-back to a task of its own, since a drop
/// cannot wait. Otherwise the Lease would stay held, and cost each node behind it a pass-over
/// at every hand-off, until it went stale.
pub(super) struct LeaveOnDrop<'a> {
    pub(super) slots: &'a Slots<'a>,
    pub(super) me: Holder,
    pub(super) waiting: Waiting,
    /// The give-back ran (or was not needed): nothing to do when dropped.
    pub(super) left: bool,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        if self.left || !self.waiting.may_hold() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (clients, settings, me) = (
            self.slots.clients.clone(),
            self.slots.settings.clone(),
            self.me.clone(),
        );
        runtime.spawn(async move {
            let slots = Slots {
                clients: &clients,
                settings: &settings,
            };
            let deadline = Instant::now() + clients.request_timeout;
            slots.leave_line(&me, deadline).await;
        });
    }
}

impl Slots<'_> {
    /// Whether, as the slots' watch saw them, a slot is open to `me` and its turn has come in
    /// the line as last `listed` (less the nodes the slots show holding one: they took theirs).
    /// A slot of a holder gone stale is not seen here: the look every
    /// [`WAIT_MAX`](super::WAIT_MAX) finds it. Before the watch has listed, yes.
    pub(super) fn turn_as_seen(
        &self,
        me: &Holder,
        group: &str,
        slots_seen: &Watched,
        listed: &[Lease],
        line: &mut Line,
    ) -> bool {
        let Some(slots) = slots_seen.leases() else {
            return true;
        };
        let open = slot_names(&self.settings.fleet, group)
            .iter()
            .filter(|name| {
                slots
                    .iter()
                    .find(|l| l.metadata.name.as_ref() == Some(*name))
                    .is_none_or(|l| {
                        identity(l).is_none() || holder_of(l).is_some_and(|h| h.node == me.node)
                    })
            })
            .count();
        let waiting: Vec<&Lease> = listed
            .iter()
            .filter(|l| {
                holder_of(l).is_none_or(|h| h.node == me.node || !slots_seen.holds(&h.node))
            })
            .collect();
        line.turn(
            &waiting,
            &me.node,
            open,
            jiff::Timestamp::now(),
            Instant::now(),
        )
        .is_some()
    }

    /// Writes this node's waiting Lease once it has waited [`queue::JOIN_AFTER`], and renews it
    /// every [`queue::RENEW`]. A line that cannot
    /// be written is no line: the node waits and tries as it would without one (said once).
    pub(super) async fn wait_in_line(
        &self,
        me: &Holder,
        group: &str,
        waiting: &mut Waiting,
        deadline: Instant,
    ) {
        if Instant::now() < waiting.next_write() {
            return;
        }
        let name = queue::wait_name(&me.node);
        let object = self.object(&name);
        let api = self.api();
        let written = match self.read(&name, deadline).await {
            Ok(None) => {
                let now = jiff::Timestamp::now();
                let lease = queue::new_wait(&self.settings.fleet, group, me, now);
                let pp = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PostParams::default()
                };
                self.clients
                    .retry(deadline, &object, || api.create(&pp, &lease))
                    .await
                    .map(|_| now)
                    .map_err(|e| e.to_string())
            }
            Ok(Some(lease)) => {
                let now = jiff::Timestamp::now();
                let renewed =
                    guarded::write(self.clients, &api, &name, &object, deadline, lease, |l| {
                        queue::wait_patch(l, me, group, now)
                    })
                    .await;
                match renewed {
                    Ok(written) => Ok(HeldTimes::of(&written.object).acquired.unwrap_or(now)),
                    Err(GuardedError::Api(e)) => Err(e.to_string()),
                    Err(GuardedError::Contended) => Err("it keeps changing".to_string()),
                    Err(GuardedError::Build(e)) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        match written {
            Ok(since) => {
                if waiting.failed.take().is_some() {
                    tracing::info!(node = %me.node, "node {} waits for a drain slot in line again: {object} written", me.node);
                }
                waiting.renewed = Some(Instant::now());
                waiting.since = Some(since);
            }
            Err(e) => {
                // Said once in a row of failures; tried again meanwhile.
                if waiting.failed.is_none() {
                    tracing::warn!(
                        node = %me.node,
                        "node {} waits for a drain slot out of line: cannot write {object}: {e}; tried again every {} s",
                        me.node,
                        queue::RETRY_AFTER.as_secs()
                    );
                }
                waiting.failed = Some(Instant::now());
            }
        }
    }

    /// Gives this node's waiting Lease back: its wait has ended. A failure is said and left: the
    /// Lease drops out of the line once not renewed for [`queue::STALE`].
    pub(super) async fn leave_line(&self, me: &Holder, deadline: Instant) {
        let name = queue::wait_name(&me.node);
        let object = self.object(&name);
        let api = self.api();
        let lease = match self.read(&name, deadline).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(node = %me.node, "cannot give back {object}: {e}");
                return;
            }
        };
        let given = guarded::write(self.clients, &api, &name, &object, deadline, lease, |l| {
            release_patch(l, &me.node)
        })
        .await;
        if let Err(GuardedError::Api(e)) = given {
            tracing::warn!(node = %me.node, "cannot give back {object}: {e}");
        }
    }
}
