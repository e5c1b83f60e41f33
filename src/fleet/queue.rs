//! The line of nodes waiting for a drain slot (issue 31): who tries a slot given back, so that a
//! hand-off draws a few writes whatever the number waiting.
//!
//! Without a line every waiting node watches the slots, and a slot given back draws a take from
//! each of them: with 200 nodes waiting, 200 writes of which 199 fail (409 or 422). With it:
//!
//! - A node that has to wait says so in a **waiting Lease** of its own in `[fleet]
//!   lease_namespace`, `kube-shutdown-drain-waiting.NODE` (a slot's name never holds a dot, so
//!   the two never meet), labelled [`WAITING_LABEL`]`=GROUP`, held by `NODE/BOOT_ID` with
//!   `acquireTime` the start of its wait and `renewTime` its last sign of life. It writes it once
//!   it has waited [`JOIN_AFTER`], renews it every [`RENEW`] and gives it back (as a slot is given
//!   back) when its wait ends, however it ends (a wait dropped midway gives it back from a task of
//!   its own: `slots::line::LeaveOnDrop`).
//! - A waiting node does not watch the line: that would send every renewal of every waiting
//!   Lease to every waiting node, a load that grows with the square of the fleet (5,000 waiting:
//!   some 8 renewals a second, each to 5,000 watches). It reads the line when it joins, and
//!   then watches only the waiting Lease of the node just ahead of it ([`ahead`], one object by
//!   `metadata.name`): when that node leaves the line (it took a slot, gave its Lease back, its
//!   Lease went to another boot, or was not renewed for [`STALE`]), it reads the line again and
//!   watches the one now ahead. A renewal reaches one node; a node that takes a slot wakes one.
//! - Nor does it read the whole line (5,000 nodes joining a wave, each reading all the waits
//!   ahead of it, would be the square of the fleet again): by [`SINCE_LABEL`] it reads the waits
//!   that started up to its own, [`front_size`] + 1 at a time, until it has found that many
//!   ahead (fewer: it is in front, and read all of the line ahead); a node further back then
//!   reads the [`windows`] before its own start, the nearest first, until one holds the node
//!   just ahead (`slots::ahead`).
//! - Only the first nodes of the line (twice as many as the group has slots, [`in_front`]) watch
//!   the slots and read them at a pace ([`look_every`]: a holder that went stale writes nothing
//!   to its Lease); the others wait for the node ahead to move. A node in front drops from its list the
//!   nodes the slots show holding one (they took theirs), so the front moves up with the
//!   hand-offs it sees without a list. A node not in the line yet (its first [`JOIN_AFTER`]),
//!   or waiting out of it, watches the slots as without a line.
//! - The line is those Leases in order of `acquireTime`, then node name ([`order`]): the same
//!   order on every node, read at a join, when the node ahead leaves, and when a look finds a
//!   slot open. Only the first `open` nodes of it (as many as slots are open) try
//!   one, each starting with a different slot ([`first_slot`]); the others keep waiting. A node
//!   not in the line yet is behind all of it; a line of none lets everyone try, as without a
//!   line.
//! - A waiter that will not take its turn does not hold the line: a Lease not renewed for
//!   [`STALE`] is not in it (its node is down, or its daemon stopped); and a waiter ahead that
//!   left a slot open for [`PASS_OVER`] is passed over by the node that saw it ([`Line`]), until
//!   its Lease is renewed. A dead waiter costs each node behind it at most one `PASS_OVER` in
//!   all, never the fleet more than that at a hand-off.
//! - Correctness is the slots' own, not the line's: a take is still one guarded write, so two
//!   nodes never both hold a slot whatever the line says; a node that already holds a slot takes
//!   it again at once, without looking at the line; a look of one moment (`until` now) takes any
//!   open slot, as before; a line that cannot be read or written is no line (everyone tries).
//!
//! A jittered back-off was the other way: it needs no writes, but to keep a few writes per
//! hand-off its spread must grow with the number waiting (which no node knows) times the watch's
//! delay, past the second a hand-off may take with 200 waiting.
//!
//! This module is pure; [`super::slots`] makes the calls.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde_json::json;

use super::sightings::{Seen, Sightings};
use super::{CLOCK_SKEW_MAX, HeldTimes, Holder, fnv1a, guard, holder_of, identity};
use crate::config::FleetSettings;

/// The longest pause between two looks at a full group whose Leases do not change (a holder
/// that went stale writes nothing): the take's pace, and the line's (`super::slots`).
pub const WAIT_MAX: Duration = Duration::from_secs(5);

/// The label of a waiting Lease: the group whose slots its node waits for.
pub const WAITING_LABEL: &str = "kube-shutdown-drain/waiting-in";

/// The label of a waiting Lease that says when its wait started (`acquireTime`, whole
/// milliseconds since the Unix epoch): a node reads the part of the line just ahead of it with a label
/// selector's `<` and `>` (apimachinery's `labels.Parse` compares such values as integers),
/// not the whole line ([`windows`]).
pub const SINCE_LABEL: &str = "kube-shutdown-drain/waiting-since";

/// The spans, in milliseconds before its own start, in which a node far back looks for the node
/// just ahead of it, one list each, the nearest first: 100 ms, then four times longer each time
/// up to some five days; after the last, the whole line ahead. A fleet-wide wave puts a few
/// nodes in the first tenth of a second; a line that fills over hours, a few in a span of
/// minutes. Pure.
pub fn windows() -> impl Iterator<Item = Option<u64>> {
    (0..12u32).map(|i| Some(100 * 4u64.pow(i))).chain([None])
}

/// How many nodes a node counts ahead of it in `leases` (part of the group's waiting Leases),
/// the waiters `passed_over` left out: those before it in [`order`]. Pure but for the memory of
/// [`order`].
pub fn count_ahead<L: Borrow<Lease>>(
    leases: &[L],
    me: &str,
    passed_over: impl Fn(&Waiter) -> bool,
    now: jiff::Timestamp,
) -> usize {
    let line: Vec<Waiter> = order(leases, now)
        .into_iter()
        .filter(|w| w.node == me || !passed_over(w))
        .collect();
    place(&line, me)
}

/// How often a waiting node renews its waiting Lease: one write per node every ten minutes, the
/// line's whole cost while nothing is handed off (200 waiting: one write every 3 s in all).
pub const RENEW: Duration = Duration::from_secs(600);

/// How long a node waits before it joins the line: a wait shorter than that (a slot back within
/// seconds, two nodes by hand) writes nothing more than the take; the waits a herd is made of
/// last minutes. One look of [`WAIT_MAX`].
pub const JOIN_AFTER: Duration = WAIT_MAX;

/// How long after a failed read of the line, or write of its waiting Lease, a node tries again:
/// meanwhile it waits as if there were no line.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// A waiting Lease not renewed for this long is not in the line: three renewals missed.
pub const STALE: Duration = Duration::from_secs(1800);

/// How long the first nodes of the line have to take an open slot before the next ones try: a
/// live waiter reacts to the slot's watch event in milliseconds, and looks every
/// [`WAIT_MAX`] without one.
pub const PASS_OVER: Duration = Duration::from_secs(2);

const PREFIX: &str = "kube-shutdown-drain-waiting.";

/// Whether the node at `place` in line is among its first: twice as many as the group has
/// `slots`, so that a node ahead that died while it waited (its Lease stays in line until
/// [`STALE`]) is passed over by live ones that see the slot it leaves open. A node in front
/// watches the slots and reads them at a pace ([`look_every`]); a node further back waits for
/// the node ahead of it to leave the line. Pure.
pub fn in_front(place: usize, slots: usize) -> bool {
    place < front_size(slots)
}

/// How many nodes are [`in_front`] of a line for `slots` slots. Pure.
pub fn front_size(slots: usize) -> usize {
    slots.max(1).saturating_mul(2)
}

/// The longest pause between two full looks (slots and their holders read) of a node in front.
pub const LOOK_MAX: Duration = Duration::from_secs(60);

/// How often the node at `place` in line reads the slots and their holders when no watch event
/// calls it (a holder gone stale writes nothing): the first `slots` every [`WAIT_MAX`], the next
/// ones less often, by the hand-offs ahead of them, at most [`LOOK_MAX`]. Only the nodes
/// [`in_front`] look at all. Pure.
pub fn look_every(place: usize, slots: usize) -> Duration {
    let rounds = u32::try_from(place / slots.max(1)).unwrap_or(u32::MAX);
    WAIT_MAX
        .saturating_mul(rounds.saturating_add(1))
        .min(LOOK_MAX)
}

/// The name of `node`'s waiting Lease: `kube-shutdown-drain-waiting.NODE`, or, for a node name
/// too long to follow the prefix in an object's 253 characters, its first 200 characters, `-`
/// and eight hex digits of a hash of the whole name.
pub fn wait_name(node: &str) -> String {
    if PREFIX.len() + node.len() <= 253 {
        return format!("{PREFIX}{node}");
    }
    let head: String = node.chars().take(200).collect();
    format!("{PREFIX}{head}-{:08x}", fnv1a(node))
}

/// One node in the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub node: String,
    /// When it started to wait (`acquireTime`, else `renewTime`).
    pub since: jiff::Timestamp,
    /// Its last sign of life (`renewTime`, else `acquireTime`).
    pub renewed: jiff::Timestamp,
}

/// The line of `leases` (the waiting Leases of a group) at `now`: every Lease held by a
/// `NODE/BOOT_ID` and renewed within [`STALE`], by `acquireTime`, then node name. A `renewTime`
/// more than [`CLOCK_SKEW_MAX`] ahead counts as the moment this process first saw the Lease with
/// it ([`super::sightings`]), so a waiter that wrote its renewal far ahead, then died, leaves
/// the line [`STALE`] after it was first seen so, not never. Pure but for that memory.
pub fn order<L: Borrow<Lease>>(leases: &[L], now: jiff::Timestamp) -> Vec<Waiter> {
    let skew = jiff::SignedDuration::try_from(CLOCK_SKEW_MAX).unwrap_or_default();
    let stale = jiff::SignedDuration::try_from(STALE).unwrap_or(jiff::SignedDuration::MAX);
    let mut line: Vec<Waiter> = leases
        .iter()
        .filter_map(|lease| {
            let lease = lease.borrow();
            let holder = holder_of(lease)?;
            let times = HeldTimes::of(lease);
            let renewed = times.renewed.or(times.acquired)?;
            let as_read = if now.duration_until(renewed) > skew {
                first_seen(lease, times, now)
            } else {
                renewed
            };
            (now.duration_since(as_read) <= stale).then(|| Waiter {
                node: holder.node,
                since: times.acquired.unwrap_or(renewed),
                renewed,
            })
        })
        .collect();
    line.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.node.cmp(&b.node)));
    line
}

/// When this process first saw `lease` with these `times` (one of them ahead of its clock), on
/// its clock at `now`.
fn first_seen(lease: &Lease, times: HeldTimes, now: jiff::Timestamp) -> jiff::Timestamp {
    let name = format!(
        "{}/{}",
        lease.metadata.namespace.as_deref().unwrap_or_default(),
        lease.metadata.name.as_deref().unwrap_or_default()
    );
    let holder = identity(lease).unwrap_or_default().to_string();
    let at = tokio::time::Instant::now();
    let first = Sightings::of_this_process().first_seen(Seen::new(name, holder, times), at);
    let since = jiff::SignedDuration::try_from(at.saturating_duration_since(first))
        .unwrap_or(jiff::SignedDuration::MAX);
    now.checked_sub(since).unwrap_or(jiff::Timestamp::MIN)
}

/// Where `node` stands in `line`: its place, or behind every other node when it is not in it.
/// Pure.
pub fn place(line: &[Waiter], node: &str) -> usize {
    line.iter()
        .position(|w| w.node == node)
        .unwrap_or_else(|| line.iter().filter(|w| w.node != node).count())
}

/// The node just ahead of `me` in `line`: the one whose leaving moves `me` up. The last of the
/// line when `me` is not in it; `None` for the first. Pure.
pub fn ahead<'a>(line: &'a [Waiter], me: &str) -> Option<&'a Waiter> {
    match line.iter().position(|w| w.node == me) {
        Some(at) => at.checked_sub(1).and_then(|i| line.get(i)),
        None => line.last(),
    }
}

/// Which of `open` open slots the node at `place` tries first: the first `open` nodes each a
/// different one. Pure.
pub fn first_slot(place: usize, open: usize) -> usize {
    place.checked_rem(open).unwrap_or(0)
}

/// What a node waiting in line remembers between its looks: since when a slot has been open, and
/// the waiters it passed over (each with the `renewTime` it had then: a renewal puts it back).
#[derive(Debug, Default)]
pub struct Line {
    open_since: Option<tokio::time::Instant>,
    passed: HashMap<String, jiff::Timestamp>,
}

impl Line {
    /// Whether the node `me` may try one of `open` open slots at `now`, the group's waiting Leases
    /// being `leases`: `Some(place)` when it is among the first `open` of the line (the waiters
    /// it passed over left out). A slot open for [`PASS_OVER`] passes over the `open` nodes
    /// then first, and starts the time again for the next ones. Pure but for the memory.
    pub fn turn<L: Borrow<Lease>>(
        &mut self,
        leases: &[L],
        me: &str,
        open: usize,
        now: jiff::Timestamp,
        at: tokio::time::Instant,
    ) -> Option<usize> {
        if open == 0 {
            self.open_since = None;
            return None;
        }
        let since = *self.open_since.get_or_insert(at);
        let mut line = order(leases, now);
        line.retain(|w| w.node == me || self.passed.get(&w.node) != Some(&w.renewed));
        if at.duration_since(since) >= PASS_OVER {
            for w in line.iter().take_while(|w| w.node != me).take(open) {
                tracing::info!(
                    node = %me,
                    "node {} waits ahead of node {me} for a drain slot and left one open for {} s: node {me} passes it over",
                    w.node,
                    PASS_OVER.as_secs()
                );
                self.passed.insert(w.node.clone(), w.renewed);
            }
            self.open_since = Some(at);
            line.retain(|w| w.node == me || !self.passed.contains_key(&w.node));
        }
        let place = place(&line, me);
        (place < open).then_some(place)
    }

    /// Whether `waiter` was passed over (and not renewed since).
    pub fn passed_over(&self, waiter: &Waiter) -> bool {
        self.passed.get(&waiter.node) == Some(&waiter.renewed)
    }

    /// When the next nodes of the line get to try, while a slot is open.
    pub fn next_turn(&self) -> Option<tokio::time::Instant> {
        self.open_since.map(|since| since + PASS_OVER)
    }
}

/// A new waiting Lease of `me` for a slot of `group`, from `now`.
pub fn new_wait(fleet: &FleetSettings, group: &str, me: &Holder, now: jiff::Timestamp) -> Lease {
    let mut lease = Lease::default();
    lease.metadata.name = Some(wait_name(&me.node));
    lease.metadata.namespace = Some(fleet.lease_namespace.clone());
    lease.metadata.labels = Some(wait_labels(group, now));
    lease.spec = Some(wait_spec(me, now, now));
    lease
}

/// The labels of a waiting Lease for a slot of `group` whose wait started at `since`.
fn wait_labels(group: &str, since: jiff::Timestamp) -> std::collections::BTreeMap<String, String> {
    [
        (WAITING_LABEL.to_string(), group.to_string()),
        (SINCE_LABEL.to_string(), since.as_millisecond().to_string()),
    ]
    .into()
}

fn wait_spec(me: &Holder, since: jiff::Timestamp, now: jiff::Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        acquire_time: Some(MicroTime(since)),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(i32::try_from(STALE.as_secs()).unwrap_or(i32::MAX)),
        ..LeaseSpec::default()
    }
}

/// The write renewing `lease` (as read) for `me` waiting for a slot of `group` at `now`: its wait
/// keeps its start when the Lease is already `me`'s (this boot) and in the line; else it starts
/// now. Guarded by the resourceVersion read.
pub fn wait_patch(
    lease: &Lease,
    me: &Holder,
    group: &str,
    now: jiff::Timestamp,
) -> Result<Option<(json_patch::Patch, ())>, serde_json::Error> {
    let line = order(std::slice::from_ref(lease), now);
    let since = line
        .first()
        .filter(|_| holder_of(lease).as_ref() == Some(me))
        .map_or(now, |w| w.since);
    let spec = serde_json::to_value(wait_spec(me, since, now))?;
    let ops = vec![
        guard(lease),
        json!({"op": "add", "path": "/metadata/labels", "value": wait_labels(group, since)}),
        json!({"op": "add", "path": "/spec", "value": spec}),
    ];
    Ok(Some((crate::api::guarded::patch_of(ops)?, ())))
}
