//! The slot calls: take one (trying again until a time), give it back. Every write is a create
//! (409 when another node created that Lease first) or the guarded JSON patch of
//! [`crate::api::guarded`], rebuilt from the Lease read again after a failed guard, so a race
//! for one slot has one winner. A node that waits does so in line ([`super::queue`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

pub use super::held::GivenBack;
use super::queue::{self, Line};
use super::{
    GROUP_LABEL, HeldTimes, Holder, held_too_long, holder_of, identity, new_lease, renewed, shown,
    sightings, slot_names, stale, take_patch,
};
use crate::api::guarded::{self, FIELD_MANAGER, GuardedError};
use crate::api::{ApiError, Clients};
use crate::config::Settings;

pub use super::queue::WAIT_MAX;

#[path = "slots_watch.rs"]
mod watch;
use watch::Watched;
pub use watch::{Changes, next_look};

#[path = "slots_ahead.rs"]
mod ahead;
use ahead::Ahead;

#[path = "slots_line.rs"]
mod line;
use line::{LeaveOnDrop, Waiting};

/// Whether `me` holds `lease` already in this very boot, taken less than half of `hold_max`
/// ago: it stays this node's without a write. An older take is written again (a fresh
/// `acquireTime`), so a drain that starts late in a long hold is not judged stale by the other
/// nodes before it ends; a take of another boot is written (the holder names this boot). Pure.
fn kept(lease: &Lease, me: &Holder, now: jiff::Timestamp, hold_max: Duration) -> bool {
    let Some(acquired) = HeldTimes::of(lease).acquired else {
        return false;
    };
    let half = jiff::SignedDuration::try_from(hold_max / 2).unwrap_or(jiff::SignedDuration::MAX);
    holder_of(lease).as_ref() == Some(me) && now.duration_since(acquired) < half && acquired <= now
}

/// What a wait for a slot came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// This node holds the slot Lease of this name.
    Slot(String),
    /// This node held the slot Lease of this name already, in this boot and recently taken
    /// ([`kept`]): nothing was written (the drain at logind's announcement of a reboot the node
    /// drained for takes no slot twice).
    Kept(String),
    /// Every slot of the group is held, by these holders (`NODE/BOOT_ID`, or a foreign
    /// identity as the Lease says it).
    Full(Vec<String>),
}

/// What one write of a free or stale slot came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// The write was applied: this node holds the slot.
    Won,
    /// Another node got the slot first; what to list it as among the holders of a full group.
    Lost(String),
}

/// What one look at a slot Lease found, for this node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Look {
    /// No one holds it.
    Free,
    /// This node holds it (in any boot), by this identity.
    Ours(String),
    /// It may be taken from this identity: a holder that will not give it back, for this reason.
    Open(String, String),
    /// Someone else holds it, by this identity.
    Held(String),
}

/// One slot as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotView {
    pub name: String,
    /// `NODE/BOOT_ID`; `None`: free.
    pub holder: Option<String>,
    /// RFC 3339: when the holder took (or last renewed) it.
    pub since: Option<String>,
}

/// The slots of one node.
pub struct Slots<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
}

impl Slots<'_> {
    pub(super) fn api(&self) -> Api<Lease> {
        Api::namespaced(
            self.clients.api.clone(),
            &self.settings.fleet.lease_namespace,
        )
    }

    /// The slot Lease `name`, if it exists.
    async fn read(&self, name: &str, deadline: Instant) -> Result<Option<Lease>, ApiError> {
        let api = self.api();
        self.clients
            .retry(deadline, &self.object(name), || api.get_opt(name))
            .await
    }

    pub(super) fn object(&self, name: &str) -> String {
        format!(
            "drain slot lease {}/{name}",
            self.settings.fleet.lease_namespace
        )
    }

    /// Takes a slot of `node`'s group for boot `boot_id`, looking again at a pace until one is
    /// free or `until` (then [`Taken::Full`]); each look's requests end by `look_by` or `until`,
    /// whichever is later (an `until` of now looks once, and takes any open slot). A node that
    /// waits does so in line ([`super::queue`]): its waiting Lease is written when it starts to
    /// wait and given back when the wait ends. An answer that is an error for good (403 with
    /// the kubelet's credentials, which may write Leases only in `kube-node-lease`) is returned
    /// at once.
    pub async fn take(
        &self,
        node: &Node,
        boot_id: &str,
        until: Instant,
        look_by: Instant,
    ) -> Result<Taken, ApiError> {
        let me = Holder {
            node: self.settings.node_name.clone(),
            boot_id: boot_id.to_string(),
        };
        let group = super::group_of(&self.settings.fleet, node);
        let mut wait = LeaveOnDrop {
            slots: self,
            me: me.clone(),
            waiting: Waiting {
                started: Instant::now(),
                renewed: None,
                since: None,
                failed: None,
                listed: false,
            },
            left: false,
        };
        let taken = self
            .take_in_line(&me, &group, until, look_by, &mut wait.waiting)
            .await;
        if wait.waiting.may_hold() {
            let deadline = Instant::now() + self.clients.request_timeout;
            self.leave_line(&me, deadline).await;
        }
        wait.left = true;
        taken
    }

    async fn take_in_line(
        &self,
        me: &Holder,
        group: &str,
        until: Instant,
        look_by: Instant,
        waiting: &mut Waiting,
    ) -> Result<Taken, ApiError> {
        let count = slot_names(&self.settings.fleet, group).len();
        // The slots' watch: while this node is not in line, or among its first.
        let mut slots_watch = Some(self.watched(&format!("{GROUP_LABEL}={group}")));
        let mut ahead = Ahead::new();
        let mut said = false;
        let mut holders = Vec::new();
        let by = look_by.max(until);
        // One look of one moment takes any open slot, as it always did: it does not wait.
        let mut line = (Instant::now() < until).then(Line::default);
        let mut looked: Option<Instant> = None;
        loop {
            // This node's place as it knows it: the line as last listed, less the nodes the
            // slots show holding one. `None`: it waits as without a line.
            let place = line.as_ref().and_then(|_| {
                let leases = ahead.listed.as_ref()?;
                let beyond = ahead.beyond;
                let seen = slots_watch.as_ref().map(|(_, seen)| seen);
                Some(
                    queue::place(
                        &queue::order(
                            &leases
                                .iter()
                                .filter(|l| {
                                    holder_of(l).is_none_or(|h| {
                                        h.node == me.node || !seen.is_some_and(|s| s.holds(&h.node))
                                    })
                                })
                                .collect::<Vec<_>>(),
                            jiff::Timestamp::now(),
                        ),
                        &me.node,
                    ) + beyond,
                )
            });
            let front = place.is_none_or(|p| queue::in_front(p, count));
            let every = place.map_or(WAIT_MAX, |p| queue::look_every(p, count));
            let due = looked.is_none_or(|at| front && at.elapsed() >= every)
                || match (&mut line, &slots_watch, &ahead.listed) {
                    (Some(line), Some((_, seen)), Some(leases)) => {
                        front && self.turn_as_seen(me, group, seen, leases, line)
                    }
                    // Out of line, or waiting as without one: every change of the slots.
                    (_, Some(_), _) => true,
                    (_, None, _) => false,
                };
            if due {
                looked = Some(Instant::now());
                let turn = line.as_mut().map(|line| (line, &mut ahead));
                holders = match self.try_take(me, group, by, turn).await {
                    Ok(Taken::Full(now_held)) => now_held,
                    Ok(taken) => {
                        waiting.listed |= listed_holds(&ahead, &me.node);
                        return Ok(taken);
                    }
                    // A look cut by its deadline is the wait's end, not an error of the server's;
                    // unless no look ever completed: then the error is all there is to say.
                    Err(_) if Instant::now() >= by && !holders.is_empty() => {
                        return Ok(Taken::Full(holders));
                    }
                    Err(e) => return Err(e),
                };
            }
            if Instant::now() >= until {
                return Ok(Taken::Full(holders));
            }
            if !said {
                said = true;
                tracing::info!(
                    node = %me.node,
                    "every drain slot of group {group} is held ({}); node {} waits for one",
                    holders.join(", "),
                    me.node
                );
            }
            waiting.listed |= listed_holds(&ahead, &me.node);
            self.wait_in_line(me, group, waiting, by).await;
            ahead.since = waiting.since;
            if let Some(line) = line
                .as_ref()
                .filter(|_| waiting.in_line() && ahead.list_due())
            {
                // One request's time: a list that fails is tried again later, not held to.
                let list_by = by.min(Instant::now() + self.clients.request_timeout);
                self.list_line(me, group, line, &mut ahead, list_by).await;
                // The node's place may have changed: judged again at once.
                continue;
            }
            match (front, slots_watch.is_some()) {
                (true, false) => {
                    slots_watch = Some(self.watched(&format!("{GROUP_LABEL}={group}")));
                    // Come to the front: the slots are read now, not at the next change.
                    looked = None;
                    continue;
                }
                (false, true) => slots_watch = None,
                _ => {}
            }
            let every = line
                .as_ref()
                .and_then(Line::next_turn)
                .map_or(WAIT_MAX, |t| t.saturating_duration_since(Instant::now()))
                .min(WAIT_MAX);
            // A node far back wakes for its renewal too: nothing else may call it for hours.
            let write = waiting.next_write().min(until);
            tokio::select! {
                () = next_look_of(&mut slots_watch, until, every) => {}
                () = ahead.left() => ahead.due = true,
                () = tokio::time::sleep_until(write) => {}
            }
            if Instant::now() >= until {
                return Ok(Taken::Full(holders));
            }
        }
    }

    /// Whether a slot of `group` is open to `me` now (free, stale or already this node's),
    /// without writing anything: `None` when one is, else every holder. The reboot gate's look.
    pub async fn holders_if_full(
        &self,
        me: &Holder,
        group: &str,
        deadline: Instant,
    ) -> Result<Option<Vec<String>>, ApiError> {
        let mut holders = Vec::new();
        for name in slot_names(&self.settings.fleet, group) {
            let Some(lease) = self.read(&name, deadline).await? else {
                return Ok(None);
            };
            match self.judge(&lease, me, deadline).await? {
                Look::Held(holder) => holders.push(holder),
                Look::Free | Look::Ours(_) | Look::Open(..) => return Ok(None),
            }
        }
        Ok(Some(holders))
    }

    /// One look at every slot of `group`: a slot already this node's is taken again at once;
    /// else, when this node's turn has come in `line` (always without one), an open slot (free
    /// or stale) is taken ([`Taken::Slot`]); else the holders ([`Taken::Full`]), an open slot
    /// left for the nodes ahead in line named as such.
    async fn try_take(
        &self,
        me: &Holder,
        group: &str,
        deadline: Instant,
        turn: Option<(&mut Line, &mut Ahead)>,
    ) -> Result<Taken, ApiError> {
        let fleet = &self.settings.fleet;
        let mut holders = Vec::new();
        // Each open slot as read (`None`: its Lease does not exist) and the holder judged stale.
        let mut open = Vec::new();
        // Slots held by other nodes: their Nodes are read (is the holder stale?) only when no
        // slot is free.
        let mut others = Vec::new();
        for name in slot_names(fleet, group) {
            let Some(lease) = self.read(&name, deadline).await? else {
                open.push((name, None, None));
                continue;
            };
            if identity(&lease).is_none() {
                open.push((name, Some(lease), None));
            } else if holder_of(&lease).is_some_and(|h| h.node == me.node) {
                others.push((name, lease));
                break;
            } else {
                others.push((name, lease));
            }
        }
        let holding: Vec<String> = others
            .iter()
            .filter_map(|(_, lease)| holder_of(lease).map(|h| h.node))
            .collect();
        for (name, lease) in others {
            let ours = holder_of(&lease).is_some_and(|h| h.node == me.node);
            if !open.is_empty() && !ours {
                holders.push(shown(&lease));
                continue;
            }
            match self.judge(&lease, me, deadline).await? {
                Look::Free => open.push((name, Some(lease), None)),
                Look::Ours(_) if kept(&lease, me, jiff::Timestamp::now(), fleet.hold_max) => {
                    return Ok(Taken::Kept(name));
                }
                Look::Ours(id) => match self
                    .write_take(me, &name, lease, Some(id), deadline)
                    .await?
                {
                    Attempt::Won => return Ok(Taken::Slot(name)),
                    Attempt::Lost(holder) => holders.push(holder),
                },
                Look::Open(id, why) => open.push((name, Some(lease), Some((id, why)))),
                Look::Held(holder) => holders.push(holder),
            }
        }
        let first = match turn {
            None => 0,
            Some((line, ahead)) => {
                // The line as listed now: a node just come must not pass it by. The nodes that
                // hold a slot (as just read) took theirs and are leaving it.
                if !open.is_empty() {
                    let by = deadline.min(Instant::now() + self.clients.request_timeout);
                    self.list_line(me, group, line, ahead, by).await;
                }
                // A node that read only the part of the line around it is not in front.
                if ahead.beyond > 0 {
                    holders.extend(
                        open.iter().map(|(name, _, _)| {
                            format!("{name} (open, for the nodes ahead in line)")
                        }),
                    );
                    return Ok(Taken::Full(holders));
                }
                let leases: Vec<&Lease> = ahead
                    .listed
                    .iter()
                    .flatten()
                    .filter(|l| {
                        holder_of(l).is_none_or(|h| h.node == me.node || !holding.contains(&h.node))
                    })
                    .collect();
                let now = jiff::Timestamp::now();
                match line.turn(&leases, &me.node, open.len(), now, Instant::now()) {
                    Some(place) => queue::first_slot(place, open.len()),
                    None => {
                        holders.extend(open.iter().map(|(name, _, _)| {
                            format!("{name} (open, for the nodes ahead in line)")
                        }));
                        return Ok(Taken::Full(holders));
                    }
                }
            }
        };
        open.rotate_left(first);
        for (name, lease, stale) in open {
            let expected = stale.map(|(id, why)| {
                tracing::warn!(
                    node = %me.node,
                    "drain slot {name} is held by {}, which will not give it back ({why}); node {} takes it",
                    crate::text::outside(&id),
                    me.node
                );
                id
            });
            let taken = match lease {
                Some(lease) => {
                    self.write_take(me, &name, lease, expected, deadline)
                        .await?
                }
                None => self.create(me, &name, group, deadline).await?,
            };
            match taken {
                Attempt::Won => return Ok(Taken::Slot(name)),
                Attempt::Lost(holder) => holders.push(holder),
            }
        }
        Ok(Taken::Full(holders))
    }

    /// Creates slot `name`, held by `me`: [`Attempt::Lost`] when another node created it first.
    async fn create(
        &self,
        me: &Holder,
        name: &str,
        group: &str,
        deadline: Instant,
    ) -> Result<Attempt, ApiError> {
        let api = self.api();
        let lease = new_lease(
            name,
            &self.settings.fleet,
            group,
            me,
            jiff::Timestamp::now(),
        );
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match self
            .clients
            .retry(deadline, &self.object(name), || api.create(&pp, &lease))
            .await
        {
            Ok(_) => {
                tracing::debug!(node = %me.node, "node {} created drain slot {name}", me.node);
                Ok(Attempt::Won)
            }
            // Another node created it first: it is theirs, named as read now.
            Err(e) if e.is_conflict() => Ok(Attempt::Lost(self.just_taken(name, deadline).await)),
            Err(e) => Err(e),
        }
    }

    /// Who holds slot `name`, just created by another node: its holder as read now, else the
    /// slot's name; "(just taken)" either way.
    async fn just_taken(&self, name: &str, deadline: Instant) -> String {
        match self.read(name, deadline).await {
            Ok(Some(lease)) if identity(&lease).is_some() => {
                format!("{} (just taken)", shown(&lease))
            }
            _ => format!("{name} (just taken)"),
        }
    }

    /// Takes slot `name` (`lease` as read) for `me` from holder `expected`: [`Attempt::Lost`]
    /// when another node got it first.
    async fn write_take(
        &self,
        me: &Holder,
        name: &str,
        lease: Lease,
        expected: Option<String>,
        deadline: Instant,
    ) -> Result<Attempt, ApiError> {
        let fleet = &self.settings.fleet;
        let api = self.api();
        let object = self.object(name);
        let now = jiff::Timestamp::now();
        let written = guarded::write(self.clients, &api, name, &object, deadline, lease, |l| {
            take_patch(l, me, expected.as_deref(), now, fleet)
        })
        .await;
        match written {
            Ok(w) if w.applied.is_some() => {
                tracing::debug!(node = %me.node, "node {} wrote drain slot {name}", me.node);
                Ok(Attempt::Won)
            }
            Ok(w) => Ok(Attempt::Lost(shown(&w.object))),
            Err(GuardedError::Contended) => Ok(Attempt::Lost(format!("{name} (contended)"))),
            Err(GuardedError::Api(e)) => Err(e),
            Err(GuardedError::Build(e)) => {
                Err(self.clients.error(&object, kube::Error::SerdeError(e)))
            }
        }
    }

    /// Whether `lease` may be taken by `me`: [`Look::Free`] when no one holds it,
    /// [`Look::Ours`] when this node holds it (in any boot), [`Look::Open`] when its holder is
    /// stale, [`Look::Held`] when someone else holds it. A holder that is not `NODE/BOOT_ID` has
    /// no Node to look at: it is judged by the Lease's times alone ([`held_too_long`]).
    async fn judge(&self, lease: &Lease, me: &Holder, deadline: Instant) -> Result<Look, ApiError> {
        let id = identity(lease).map(str::to_string);
        let Some(id) = id else {
            return Ok(Look::Free);
        };
        let now = jiff::Timestamp::now();
        let hold_max = self.settings.fleet.hold_max;
        let times = sightings::times_of(lease, &self.settings.fleet.lease_namespace, now);
        let why = match holder_of(lease) {
            Some(holder) if holder.node == me.node => return Ok(Look::Ours(id)),
            Some(holder) => {
                let nodes: Api<Node> = Api::all(self.clients.api.clone());
                let object = format!("node {}", holder.node);
                let node = self
                    .clients
                    .retry(deadline, &object, || nodes.get_opt(&holder.node))
                    .await?;
                stale(&holder, node.as_ref(), times, now, hold_max)
            }
            // Not an identity we write: only its times can say it will never give it back.
            None => held_too_long(times, now, hold_max),
        };
        Ok(match why {
            Some(why) => Look::Open(id, why),
            None => Look::Held(crate::text::outside(&id)),
        })
    }

    /// Every slot of `node`'s group as it is now, for `status`: one GET each.
    pub async fn look(&self, node: &Node) -> Result<Vec<SlotView>, ApiError> {
        let fleet = &self.settings.fleet;
        let group = super::group_of(fleet, node);
        let deadline = Instant::now() + self.clients.request_timeout;
        let mut views = Vec::new();
        for name in slot_names(fleet, &group) {
            let lease = self.read(&name, deadline).await?;
            let holder = lease.as_ref().and_then(identity).map(crate::text::outside);
            views.push(SlotView {
                since: lease
                    .as_ref()
                    .filter(|_| holder.is_some())
                    .and_then(renewed)
                    .map(|t| t.to_string()),
                name,
                holder,
            });
        }
        Ok(views)
    }
}

/// Whether the line as `ahead` last listed it holds a waiting Lease of `node`.
fn listed_holds(ahead: &Ahead, node: &str) -> bool {
    ahead
        .listed
        .iter()
        .flatten()
        .any(|l| holder_of(l).is_some_and(|h| h.node == node))
}

/// [`next_look`] on the slots' watch, if there is one; else only `until` ends it.
async fn next_look_of(
    watch: &mut Option<(Changes, Watched)>,
    until: Instant,
    every: std::time::Duration,
) {
    match watch {
        Some((changes, _)) => next_look(changes, until, every).await,
        None => tokio::time::sleep_until(until).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FleetSettings;

    /// A waiting node's next write of its waiting Lease: its join, then each renewal; a failed
    /// one 30 s later. The wait wakes for it, however far back the node is.
    #[test]
    fn a_waiting_lease_is_written_at_the_join_then_at_each_renewal() {
        let started = Instant::now();
        let mut waiting = Waiting {
            started,
            renewed: None,
            since: None,
            failed: None,
            listed: false,
        };
        assert_eq!(waiting.next_write(), started + queue::JOIN_AFTER);
        assert!(!waiting.may_hold());
        let failed = started + queue::JOIN_AFTER;
        waiting.failed = Some(failed);
        assert_eq!(waiting.next_write(), failed + queue::RETRY_AFTER);
        // The failed write may have been applied: given back at the end of the wait.
        assert!(waiting.may_hold() && !waiting.in_line());
        let joined = failed + queue::RETRY_AFTER;
        waiting.failed = None;
        waiting.renewed = Some(joined);
        assert_eq!(waiting.next_write(), joined + queue::RENEW);
    }

    /// A slot this node took in this boot minutes ago is kept as it is; one of another boot, or
    /// taken longer than half of `hold_max` ago, is written again.
    #[test]
    fn a_slot_taken_in_this_boot_lately_is_kept_without_a_write() {
        let fleet = FleetSettings::default();
        let me = Holder {
            node: "n1".into(),
            boot_id: "boot-2".into(),
        };
        let now: jiff::Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let taken_at = |ago: i64, holder: &Holder| {
            super::super::new_lease(
                "s",
                &fleet,
                "all",
                holder,
                now - jiff::SignedDuration::from_secs(ago),
            )
        };
        let hold_max = Duration::from_secs(3600);
        assert!(kept(&taken_at(60, &me), &me, now, hold_max));
        assert!(kept(&taken_at(1799, &me), &me, now, hold_max));
        assert!(
            !kept(&taken_at(1801, &me), &me, now, hold_max),
            "half of hold_max gone"
        );
        let before = Holder {
            boot_id: "boot-1".into(),
            ..me.clone()
        };
        assert!(
            !kept(&taken_at(60, &before), &me, now, hold_max),
            "another boot"
        );
        assert!(
            !kept(&taken_at(-60, &me), &me, now, hold_max),
            "taken in the future"
        );
    }
}
