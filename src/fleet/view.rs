//! The fleet's reboot wave as one view (issue 43, `kube-shutdown-drain fleet`): what was read
//! from the cluster ([`Seen`]: the Nodes, the Leases of the lease namespace, the Node Events)
//! turned into one row per node that runs the daemon, the slots, the pause and the wave's
//! progress ([`view`]), and rendered for people ([`text`], [`progress_line`]) or as JSON (the
//! serde shape of [`FleetView`], `docs/fleet-view.md`). Pure: the reads are the caller's.
//!
//! A node is known by what the daemon writes: a slot or waiting Lease it holds, the marker, a
//! taint of ours, the hold annotation, the KEP-5683 conditions, an Event of our component. Its
//! state is derived from those objects alone, by rules taken in a fixed order (the first that
//! matches wins; `docs/fleet-view.md` states them, [`State`] lists them in that order):
//! rebooting, restoring, draining, drained, settling, holding-slot, held, waiting,
//! needs-reboot, idle; untraced for a Node without any trace (shown with `all`). The rules are
//! in `view_facts.rs`, the rendering in `view_text.rs`.
//!
//! Events are the weakest evidence: the API server keeps them an hour by default
//! (kube-apiserver `--event-ttl`), so a state that only an Event shows fades to `idle`, while
//! what the Leases, the marker and the conditions show stands as long as they do.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use serde::{Deserialize, Serialize};

use super::queue::{self, WAITING_LABEL};
use super::{GROUP_LABEL, HeldTimes, held_too_long, holder_of, shown, stale};
use crate::config::DEFAULT_HOLD_MAX;
use crate::reboot::holds::PAUSE_LEASE;

#[path = "view_facts.rs"]
mod facts;
#[path = "view_text.rs"]
mod render;

pub use render::{progress_line, text};

/// The version of the JSON shape: a key renamed or removed, or a meaning changed, makes it 2;
/// a key added keeps it.
pub const VERSION: u32 = 1;

/// The annotation on the pause Lease ([`PAUSE_LEASE`]) that says why the fleet is paused: what
/// `fleet pause --reason` writes; any text.
pub const PAUSE_REASON_ANNOTATION: &str = "kube-shutdown-drain/reason";

/// What the caller read from the cluster.
pub struct Seen {
    /// Every Node of the cluster.
    pub nodes: Vec<Node>,
    /// Every Lease of the lease namespace (`[fleet] lease_namespace`).
    pub leases: Vec<Lease>,
    /// core/v1 Events about Nodes, of all namespaces (ours live in `default`).
    pub events: Vec<Event>,
    /// The lease namespace.
    pub namespace: String,
}

/// The fleet as seen at one moment. Every key is always present (`null` when there is nothing
/// to say), in camelCase; `docs/fleet-view.md` documents each.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    /// [`VERSION`].
    pub version: u32,
    /// The moment the view was made.
    pub observed_at: Timestamp,
    /// The lease namespace the slots, the line and the pause were read in.
    pub namespace: String,
    /// One row per node, by name.
    pub nodes: Vec<NodeRow>,
    /// Every slot Lease, by group and slot.
    pub slots: Vec<SlotRow>,
    /// The fleet-wide pause, if its Lease exists.
    pub pause: Option<PauseRow>,
    pub progress: Progress,
}

/// A node's state, in the order the rules are taken: the first that matches wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    Rebooting,
    Restoring,
    Draining,
    Drained,
    Settling,
    HoldingSlot,
    Held,
    Waiting,
    NeedsReboot,
    Idle,
    Untraced,
}

impl State {
    /// Every state, in the order of precedence.
    pub const ALL: [State; 11] = [
        State::Rebooting,
        State::Restoring,
        State::Draining,
        State::Drained,
        State::Settling,
        State::HoldingSlot,
        State::Held,
        State::Waiting,
        State::NeedsReboot,
        State::Idle,
        State::Untraced,
    ];

    /// The name in the JSON and the text.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Rebooting => "rebooting",
            State::Restoring => "restoring",
            State::Draining => "draining",
            State::Drained => "drained",
            State::Settling => "settling",
            State::HoldingSlot => "holding-slot",
            State::Held => "held",
            State::Waiting => "waiting",
            State::NeedsReboot => "needs-reboot",
            State::Idle => "idle",
            State::Untraced => "untraced",
        }
    }

    /// Whether a node in this state is part of the wave still to do.
    fn to_do(self) -> bool {
        matches!(
            self,
            State::Rebooting
                | State::Restoring
                | State::Draining
                | State::Drained
                | State::HoldingSlot
                | State::Waiting
                | State::NeedsReboot
        )
    }
}

/// One node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub node: String,
    pub state: State,
    /// What the state is about, in words: what it waits for, its place in line, its slot, who
    /// holds it and why.
    pub detail: String,
    /// Since when the state holds, as far as the objects tell.
    pub since: Option<Timestamp>,
    /// The slot group of the slot it holds or the line it waits in.
    pub group: Option<String>,
    /// The slot Lease it holds (in any boot).
    pub slot: Option<String>,
    /// Its place in its group's waiting line.
    pub place: Option<Place>,
    /// The hold annotation.
    pub hold: Option<Hold>,
    /// `status.nodeInfo.bootID`.
    pub boot_id: Option<String>,
    /// The status of the Node's `Ready` condition (`True`, `False`, `Unknown`).
    pub ready: Option<String>,
    pub last_drain: LastDrain,
    /// What shows that the daemon runs there: `slot`, `waiting-lease`, `marker`, `taint`,
    /// `hold`, `conditions`, `events`.
    pub traces: Vec<String>,
}

/// A place in a group's waiting line (`fleet::queue::order`), counted from 1.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Place {
    pub group: String,
    pub number: usize,
    pub of: usize,
}

/// The hold annotation: its value and the field managers that set it (managedFields).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    pub value: String,
    pub by: Vec<String>,
}

/// How the node's last drain ended, as far as the objects tell.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LastDrain {
    pub outcome: Outcome,
    /// The drain report's summary (`node N drained: 3 evicted in 4.1 s`) or the Event's message.
    pub message: Option<String>,
    pub at: Option<Timestamp>,
    /// Where it was read: `condition` (`Drained`), `event`, or `none`.
    pub from: Source,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Complete,
    Incomplete,
    DeadlineReached,
    Unknown,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Condition,
    Event,
    None,
}

/// One slot Lease (labelled `kube-shutdown-drain/slot-group`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SlotRow {
    pub group: String,
    /// The Lease's name.
    pub slot: String,
    /// N of a name ending in `-slot-N`.
    pub number: Option<u32>,
    /// `spec.holderIdentity` (`NODE/BOOT_ID`); none: the slot is free.
    pub holder: Option<String>,
    /// The node the holder names.
    pub node: Option<String>,
    /// `acquireTime`.
    pub since: Option<Timestamp>,
    /// `renewTime`.
    pub renewed: Option<Timestamp>,
    /// Why the holder will never give it back (`fleet::stale`, with the Lease's
    /// `leaseDurationSeconds` as `hold_max`); none: not stale, or free.
    pub stale: Option<String>,
}

/// The fleet-wide pause: the Lease `kube-shutdown-drain-pause`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PauseRow {
    /// Its `creationTimestamp`.
    pub since: Option<Timestamp>,
    /// The field managers that wrote it (managedFields).
    pub by: Vec<String>,
    /// Its [`PAUSE_REASON_ANNOTATION`].
    pub reason: Option<String>,
}

/// How far the wave has come.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Nodes restored since the wave began and not to do again.
    pub done: usize,
    /// Nodes that need a reboot, wait for one or are in one.
    pub to_do: usize,
    /// The nodes holding slots now.
    pub wave: Vec<String>,
    /// The earliest `RebootRequired` or `RebootStarted` Event among the rows.
    pub wave_started: Option<Timestamp>,
    /// None until a node is done, or when none is left.
    pub estimate: Option<Estimate>,
}

/// When the wave should end, at the pace it kept so far.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    pub finishes_at: Timestamp,
    /// Nodes done per hour since the wave began.
    pub per_hour: f64,
}

/// The view of what was `seen` at `now`: a row per node with a trace of the daemon (with
/// `all`, every Node), the slots, the pause and the progress. Pure.
pub fn view(seen: &Seen, now: Timestamp, all: bool) -> FleetView {
    let nodes: BTreeMap<&str, &Node> = seen
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let slots: Vec<&Lease> = seen
        .leases
        .iter()
        .filter(|l| label(l, GROUP_LABEL).is_some())
        .collect();
    let said = facts::said_by_node(&seen.events);
    let lines = lines(&seen.leases, now);
    let mut rows = Vec::new();
    let mut marks = Vec::new();
    for (name, node) in &nodes {
        let facts = facts::Facts::of(node, name, &said, &slots, lines.get(*name));
        if facts.traces().is_empty() && !all {
            continue;
        }
        let (row, mark) = facts.row();
        rows.push(row);
        marks.push(mark);
    }
    let slot_rows = slot_rows(&slots, &nodes, now);
    let progress = progress(&rows, &marks, &slot_rows, now);
    FleetView {
        version: VERSION,
        observed_at: now,
        namespace: seen.namespace.clone(),
        nodes: rows,
        slots: slot_rows,
        pause: pause(seen),
        progress,
    }
}

/// What a row adds to the progress, besides its state.
#[derive(Debug, Clone, Copy, Default)]
struct Mark {
    /// Whether the node needs a reboot: a `held` one is to do then.
    needs: bool,
    /// The last restore the node shows.
    restored: Option<Timestamp>,
    /// Its earliest `RebootRequired` or `RebootStarted`.
    wave_start: Option<Timestamp>,
}

fn label<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A node in a waiting line: its place, and since when it waits (its waiting Lease's
/// `acquireTime`).
struct InLine {
    place: Place,
    since: Timestamp,
}

/// Every node's place in its group's waiting line, by [`queue::order`] and [`queue::place`].
fn lines(leases: &[Lease], now: Timestamp) -> BTreeMap<String, InLine> {
    let mut groups: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    for lease in leases {
        if let Some(group) = label(lease, WAITING_LABEL) {
            groups.entry(group).or_default().push(lease);
        }
    }
    let mut places = BTreeMap::new();
    for (group, leases) in groups {
        let line = queue::order(&leases, now);
        for w in &line {
            places.entry(w.node.clone()).or_insert_with(|| InLine {
                place: Place {
                    group: group.to_string(),
                    number: queue::place(&line, &w.node) + 1,
                    of: line.len(),
                },
                since: w.since,
            });
        }
    }
    places
}

/// The slot rows, by group and slot number.
fn slot_rows(slots: &[&Lease], nodes: &BTreeMap<&str, &Node>, now: Timestamp) -> Vec<SlotRow> {
    let mut rows: Vec<SlotRow> = slots
        .iter()
        .map(|lease| {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let times = HeldTimes::of(lease);
            let hold_max = lease
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .filter(|&s| s > 0)
                .map_or(DEFAULT_HOLD_MAX, std::time::Duration::from_secs);
            let holder = holder_of(lease);
            let held = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                .is_some_and(|h| !h.is_empty());
            let stale = match &holder {
                Some(h) => stale(h, nodes.get(h.node.as_str()).copied(), times, now, hold_max),
                None if held => held_too_long(times, now, hold_max),
                None => None,
            };
            SlotRow {
                group: label(lease, GROUP_LABEL).unwrap_or_default().to_string(),
                number: name.rsplit_once("-slot-").and_then(|(_, n)| n.parse().ok()),
                slot: name,
                holder: held.then(|| shown(lease)),
                node: holder.map(|h| h.node),
                since: times.acquired,
                renewed: times.renewed,
                stale,
            }
        })
        .collect();
    rows.sort_by(|a, b| (&a.group, a.number, &a.slot).cmp(&(&b.group, b.number, &b.slot)));
    rows
}

/// The pause row, when the pause Lease is among the Leases read.
fn pause(seen: &Seen) -> Option<PauseRow> {
    let lease = seen
        .leases
        .iter()
        .find(|l| l.metadata.name.as_deref() == Some(PAUSE_LEASE))?;
    let mut by: Vec<String> = Vec::new();
    for e in lease.metadata.managed_fields.iter().flatten() {
        if let Some(m) = &e.manager
            && !by.contains(m)
        {
            by.push(m.clone());
        }
    }
    Some(PauseRow {
        since: lease.metadata.creation_timestamp.as_ref().map(|t| t.0),
        by,
        reason: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSE_REASON_ANNOTATION))
            .map(|r| crate::text::outside(r)),
    })
}

/// The wave's progress: to do, done since it began, the nodes holding slots, and an estimate
/// at the pace of the nodes done so far.
fn progress(rows: &[NodeRow], marks: &[Mark], slots: &[SlotRow], now: Timestamp) -> Progress {
    let to_do: Vec<bool> = rows
        .iter()
        .zip(marks)
        .map(|(r, m)| r.state.to_do() || m.needs)
        .collect();
    let wave_started = marks.iter().filter_map(|m| m.wave_start).min();
    let done = match wave_started {
        Some(start) => marks
            .iter()
            .zip(&to_do)
            .filter(|(m, to_do)| !**to_do && m.restored.is_some_and(|r| r >= start))
            .count(),
        None => 0,
    };
    let to_do = to_do.iter().filter(|t| **t).count();
    let mut wave: Vec<String> = slots
        .iter()
        .filter(|s| s.stale.is_none())
        .filter_map(|s| s.node.clone())
        .collect();
    wave.sort();
    wave.dedup();
    let estimate = wave_started
        .filter(|_| done > 0 && to_do > 0)
        .and_then(|start| estimate(done, to_do, start, now));
    Progress {
        done,
        to_do,
        wave,
        wave_started,
        estimate,
    }
}

/// `to_do` more nodes at the pace of `done` since `start`. The pace is taken over at least a
/// minute, so a node done in the wave's first seconds does not promise thousands an hour.
fn estimate(done: usize, to_do: usize, start: Timestamp, now: Timestamp) -> Option<Estimate> {
    let elapsed = now.duration_since(start).max(SignedDuration::from_mins(1));
    let per_hour = done as f64 * 3600.0 / elapsed.as_secs_f64();
    let left = SignedDuration::try_from_secs_f64(to_do as f64 * 3600.0 / per_hour).ok()?;
    Some(Estimate {
        finishes_at: now.checked_add(left).ok()?,
        per_hour,
    })
}

#[cfg(test)]
#[path = "view_tests.rs"]
mod tests;
