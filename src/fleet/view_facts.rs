//! What the objects show about one node, and its state by the rules of `docs/fleet-view.md`,
//! taken in [`State::ALL`]'s order.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, NodeCondition};

use super::{Hold, InLine, LastDrain, Mark, NodeRow, Outcome, Source, State, label};
use crate::events::{COMPONENT, Reason};
use crate::fleet::{GROUP_LABEL, HeldTimes, Holder, holder_of};
use crate::node::conditions::Type as ConditionType;
use crate::node::marker::OUR_TAINT_PREFIX;
use crate::node::{MARKER_ANNOTATION, Marker, MarkerRead, read_marker};
use crate::reboot::holds::HOLD_ANNOTATION;
use crate::text;

/// The Events that tell a node's reboot from its need to its restore; the latest of them says
/// where a node without a slot or a marker stands.
const STORY: [Reason; 12] = [
    Reason::RebootRequired,
    Reason::RebootWaiting,
    Reason::RebootStarted,
    Reason::SlotUnavailable,
    Reason::HookFailed,
    Reason::SlotTaken,
    Reason::DrainStarted,
    Reason::DrainFinished,
    Reason::DrainIncomplete,
    Reason::DrainDeadline,
    Reason::Restored,
    Reason::SlotReleased,
];

/// The Events after which a reboot is still to come: it waits (or has just started and waits
/// for a slot).
const WAITS: [Reason; 4] = [
    Reason::RebootWaiting,
    Reason::RebootStarted,
    Reason::SlotUnavailable,
    Reason::HookFailed,
];

/// The Events after which a reboot is still needed.
const NEEDS: [Reason; 5] = [
    Reason::RebootRequired,
    Reason::RebootWaiting,
    Reason::RebootStarted,
    Reason::SlotUnavailable,
    Reason::HookFailed,
];

/// The Events that say how a drain ended.
const DRAIN_ENDS: [Reason; 3] = [
    Reason::DrainFinished,
    Reason::DrainIncomplete,
    Reason::DrainDeadline,
];

/// One Event of ours, as read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Said<'a> {
    reason: &'a str,
    message: &'a str,
    /// The latest of its times: `series.lastObservedTime`, `lastTimestamp`, `eventTime`,
    /// `firstTimestamp`, its creation.
    at: Option<Timestamp>,
}

impl Said<'_> {
    fn is(&self, reasons: &[Reason]) -> bool {
        reasons.iter().any(|r| r.as_str() == self.reason)
    }
}

/// Our component's Events about Nodes, by node, oldest first.
pub(super) fn said_by_node(events: &[Event]) -> BTreeMap<&str, Vec<Said<'_>>> {
    let mut by: BTreeMap<&str, Vec<Said<'_>>> = BTreeMap::new();
    for e in events {
        let ours = e.reporting_component.as_deref() == Some(COMPONENT)
            || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(COMPONENT);
        let about = &e.involved_object;
        let (Some("Node"), Some(node), true) = (about.kind.as_deref(), about.name.as_deref(), ours)
        else {
            continue;
        };
        let at = [
            e.series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref())
                .map(|t| t.0),
            e.last_timestamp.as_ref().map(|t| t.0),
            e.event_time.as_ref().map(|t| t.0),
            e.first_timestamp.as_ref().map(|t| t.0),
            e.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ]
        .into_iter()
        .flatten()
        .max();
        by.entry(node).or_default().push(Said {
            reason: e.reason.as_deref().unwrap_or_default(),
            message: e.message.as_deref().unwrap_or_default(),
            at,
        });
    }
    for said in by.values_mut() {
        said.sort_by_key(|s| s.at);
    }
    by
}

/// Everything read about one node.
pub(super) struct Facts<'a> {
    name: &'a str,
    node: &'a Node,
    boot: Option<&'a str>,
    ready: Option<&'a NodeCondition>,
    marker: MarkerRead,
    hold: Option<&'a str>,
    said: &'a [Said<'a>],
    /// The slot Leases that name this node as holder (in any boot).
    slots: Vec<(&'a Lease, Holder)>,
    line: Option<&'a InLine>,
}

/// A state, what it is about, and since when.
struct Found {
    state: State,
    detail: String,
    since: Option<Timestamp>,
}

impl Found {
    fn new(state: State, detail: String, since: Option<Timestamp>) -> Found {
        Found {
            state,
            detail,
            since,
        }
    }
}

/// Whether, and since when, a node needs a reboot.
struct Needed {
    since: Option<Timestamp>,
}

impl<'a> Facts<'a> {
    pub(super) fn of(
        node: &'a Node,
        name: &'a str,
        said: &'a BTreeMap<&str, Vec<Said<'a>>>,
        slots: &[&'a Lease],
        line: Option<&'a InLine>,
    ) -> Facts<'a> {
        let boot = crate::fleet::boot_of(node);
        let mut held: Vec<(&Lease, Holder)> = slots
            .iter()
            .filter_map(|l| Some((*l, holder_of(l).filter(|h| h.node == name)?)))
            .collect();
        // A slot of this boot first: the one a drain or a settling holds.
        held.sort_by_key(|(_, h)| Some(h.boot_id.as_str()) != boot);
        Facts {
            name,
            node,
            boot,
            ready: condition(node, "Ready"),
            marker: read_marker(node),
            hold: annotation(node, HOLD_ANNOTATION),
            said: said.get(name).map_or(&[], Vec::as_slice),
            slots: held,
            line,
        }
    }

    /// What shows that the daemon runs on the node.
    pub(super) fn traces(&self) -> Vec<String> {
        let taint = self
            .node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key.starts_with(OUR_TAINT_PREFIX)));
        let conditions = [
            ConditionType::MaintenancePlanned,
            ConditionType::DrainInProgress,
            ConditionType::Drained,
        ]
        .iter()
        .any(|t| condition(self.node, t.as_str()).is_some());
        [
            (!self.slots.is_empty(), "slot"),
            (self.line.is_some(), "waiting-lease"),
            (annotation(self.node, MARKER_ANNOTATION).is_some(), "marker"),
            (taint, "taint"),
            (self.hold.is_some(), "hold"),
            (conditions, "conditions"),
            (!self.said.is_empty(), "events"),
        ]
        .into_iter()
        .filter(|(found, _)| *found)
        .map(|(_, name)| name.to_string())
        .collect()
    }

    /// The latest of our Events with one of `reasons`.
    fn latest(&self, reasons: &[Reason]) -> Option<&Said<'a>> {
        self.said.iter().rev().find(|s| s.is(reasons))
    }

    fn ready_status(&self) -> Option<&'a str> {
        self.ready.map(|c| c.status.as_str())
    }

    /// The Ready condition's last transition.
    fn ready_since(&self) -> Option<Timestamp> {
        self.ready
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
    }

    /// When our condition `kind` was last written: its heartbeat, else its transition.
    fn written(&self, kind: ConditionType) -> Option<(&'a NodeCondition, Option<Timestamp>)> {
        let c = condition(self.node, kind.as_str())?;
        let at = c
            .last_heartbeat_time
            .as_ref()
            .or(c.last_transition_time.as_ref())
            .map(|t| t.0);
        Some((c, at))
    }

    /// The last restore the node shows: a `Restored` Event, or a condition the restore wrote.
    fn restored(&self) -> Option<Timestamp> {
        let event = self.latest(&[Reason::Restored]).and_then(|s| s.at);
        let condition = [ConditionType::Drained, ConditionType::DrainInProgress]
            .into_iter()
            .filter_map(|k| self.written(k))
            .filter(|(c, _)| c.reason.as_deref() == Some("Restored"))
            .filter_map(|(_, at)| at)
            .max();
        event.max(condition)
    }

    /// How the last drain ended: the `Drained` condition a drain's end wrote, else the latest
    /// Event that says so.
    fn last_drain(&self) -> LastDrain {
        if let Some((c, at)) = self.written(ConditionType::Drained) {
            let outcome = match c.reason.as_deref() {
                Some("DrainCompleted") => Some(Outcome::Complete),
                Some("DrainIncomplete") => Some(Outcome::Incomplete),
                _ => None,
            };
            if let Some(outcome) = outcome {
                return LastDrain {
                    outcome,
                    message: c.message.as_deref().map(shown),
                    at,
                    from: Source::Condition,
                };
            }
        }
        match self.latest(&DRAIN_ENDS) {
            Some(s) => LastDrain {
                outcome: if s.reason == Reason::DrainDeadline.as_str() {
                    Outcome::DeadlineReached
                } else if s.reason == Reason::DrainIncomplete.as_str()
                    // The report's summary: "node N not drained: ..." (`Report::summary`).
                    || s.message.starts_with(&format!("node {} not drained", self.name))
                {
                    Outcome::Incomplete
                } else {
                    Outcome::Complete
                },
                message: Some(shown(s.message)),
                at: s.at,
                from: Source::Event,
            },
            None => LastDrain {
                outcome: Outcome::Unknown,
                message: None,
                at: None,
                from: Source::None,
            },
        }
    }

    /// The row, by the first rule that matches, and what it adds to the progress.
    pub(super) fn row(&self) -> (NodeRow, Mark) {
        let Found {
            mut state,
            mut detail,
            since,
        } = self.state();
        let traces = self.traces();
        if traces.is_empty() {
            state = State::Untraced;
            detail = "no trace of kube-shutdown-drain".to_string();
        } else if self.hold.is_some() && state != State::Held {
            detail.push_str(&format!("; held by {HOLD_ANNOTATION} as well"));
        }
        let slot = self.slots.first().map(|(l, _)| *l);
        let wave_start = self
            .said
            .iter()
            .filter(|s| s.is(&[Reason::RebootRequired, Reason::RebootStarted]))
            .filter_map(|s| s.at)
            .min();
        let mark = Mark {
            needs: self.needs().is_some(),
            restored: self.restored(),
            wave_start,
        };
        let row = NodeRow {
            node: self.name.to_string(),
            state,
            detail,
            since,
            group: slot
                .and_then(|l| label(l, GROUP_LABEL))
                .map(str::to_string)
                .or_else(|| self.line.map(|l| l.place.group.clone())),
            slot: slot.and_then(|l| l.metadata.name.clone()),
            place: self.line.map(|l| l.place.clone()),
            hold: self.hold.map(|value| Hold {
                value: text::outside(value),
                by: self.hold_setters().into_iter().map(|(m, _)| m).collect(),
            }),
            boot_id: self.boot.map(str::to_string),
            ready: self.ready_status().map(str::to_string),
            last_drain: self.last_drain(),
            traces,
        };
        (row, mark)
    }

    /// The state, its detail and since when, by the rules in order.
    fn state(&self) -> Found {
        if let MarkerRead::Ours(m) = &self.marker {
            return self.marked(m);
        }
        let not_ready = matches!(self.ready_status(), Some("False" | "Unknown"));
        // A drain without a marker (none could be written) that ended before the node went.
        if not_ready && self.latest(&STORY).is_some_and(|s| s.is(&DRAIN_ENDS)) {
            return Found::new(
                State::Rebooting,
                format!("drained, then Ready {}", self.ready_status().unwrap_or("?")),
                self.ready_since(),
            );
        }
        if let Some(found) = self.with_slot() {
            return found;
        }
        let waits = self.waits();
        if let Some(value) = self.hold {
            let setters = self.hold_setters();
            let who = if setters.is_empty() {
                "the server names no field manager".to_string()
            } else {
                let names: Vec<&str> = setters.iter().map(|(m, _)| m.as_str()).collect();
                format!("set by {}", names.join(", "))
            };
            let mut detail = format!("{HOLD_ANNOTATION}={:?} ({who})", text::outside(value));
            if let Some((w, _)) = &waits {
                detail.push_str(&format!("; its reboot waits: {w}"));
            }
            let since = match setters.as_slice() {
                [(_, at)] => *at,
                _ => None,
            };
            return Found::new(State::Held, detail, since);
        }
        if let Some((w, since)) = waits {
            return Found::new(State::Waiting, w, since);
        }
        if let Some(Needed { since }) = self.needs() {
            let why = self
                .latest(&[Reason::RebootRequired])
                .map_or("MaintenancePlanned is True", |s| s.message);
            return Found::new(State::NeedsReboot, shown(why), since);
        }
        let detail = match self.latest(&STORY) {
            Some(s) => format!("last: {} {}", s.reason, shown(s.message)),
            None => "nothing under way".to_string(),
        };
        Found::new(State::Idle, detail, self.restored())
    }

    /// The states of a node carrying our marker: rebooting, restoring, draining, drained.
    fn marked(&self, m: &Marker) -> Found {
        let marked_at: Option<Timestamp> = m.time.parse().ok();
        let why = shown(&m.why);
        let ready = self.ready_status().unwrap_or("unknown");
        if let Some(boot) = self.boot.filter(|b| *b != m.boot_id) {
            let since = self.ready_since().or(marked_at);
            return Found::new(
                State::Restoring,
                format!(
                    "back in boot {boot} (drained in boot {} for {why}), Ready {ready}; the \
                     restore has not cleared the marker yet",
                    m.boot_id
                ),
                since,
            );
        }
        if matches!(self.ready_status(), Some("False" | "Unknown")) {
            return Found::new(
                State::Rebooting,
                format!("drained for {why}, Ready {ready}"),
                self.ready_since().or(marked_at),
            );
        }
        let slot = self
            .slots
            .first()
            .and_then(|(l, _)| l.metadata.name.as_deref())
            .map(|s| format!(" in slot {s}"))
            .unwrap_or_default();
        let after_marker =
            |at: Option<Timestamp>| at.is_some_and(|at| marked_at.is_none_or(|m| at >= m));
        let ended = self
            .latest(&DRAIN_ENDS)
            .filter(|s| after_marker(s.at))
            .map(|s| s.at);
        let by_condition = self
            .written(ConditionType::Drained)
            .filter(|(c, _)| c.reason.as_deref() != Some("Restored"))
            .filter(|(_, at)| after_marker(*at))
            .map(|(_, at)| at);
        if let Some(at) = ended.or(by_condition) {
            return Found::new(
                State::Drained,
                format!(
                    "drained{slot} for {why}: its shutdown follows, or `restore` undoes a drain \
                     by hand"
                ),
                at,
            );
        }
        Found::new(
            State::Draining,
            format!("draining{slot} for {why}"),
            marked_at,
        )
    }

    /// Settling or holding-slot, for a node without a marker that holds a slot. The restore
    /// carries the slot into the new boot (`acquireTime` then) before it clears the marker
    /// (`Slots::carry_into`), so a restore after the take is the settling; a slot of an older
    /// boot was never carried, and every other node takes it for stale (`fleet::stale`).
    fn with_slot(&self) -> Option<Found> {
        let (lease, holder) = self.slots.first()?;
        let name = lease.metadata.name.as_deref().unwrap_or("?");
        let taken = HeldTimes::of(lease).acquired;
        let after_take = |at: Option<Timestamp>| at.is_some_and(|at| taken.is_none_or(|t| at >= t));
        if let Some(boot) = self.boot.filter(|b| *b != holder.boot_id) {
            return Some(Found::new(
                State::Settling,
                format!(
                    "restored into boot {boot}, but slot {name} is still held by its boot {}: \
                     stale to the other nodes, and given back when its daemon starts",
                    holder.boot_id
                ),
                taken,
            ));
        }
        let unsettled = self
            .latest(&[Reason::SlotUnsettled])
            .filter(|s| after_take(s.at));
        if let Some(s) = unsettled {
            return Some(Found::new(
                State::Settling,
                format!("gives back slot {name} unsettled: {}", shown(s.message)),
                s.at,
            ));
        }
        if let Some(restored) = self.restored().filter(|at| after_take(Some(*at))) {
            return Some(Found::new(
                State::Settling,
                format!(
                    "restored, keeps slot {name} until the PodDisruptionBudgets its drain \
                     disturbed are healthy again (at most [fleet] settle_max)"
                ),
                Some(restored),
            ));
        }
        let hooks = self
            .latest(&[Reason::WaitingForHooks])
            .filter(|s| after_take(s.at))
            .map(|s| format!("; {}", shown(s.message)))
            .unwrap_or_default();
        Some(Found::new(
            State::HoldingSlot,
            format!("slot {name}{hooks}"),
            taken,
        ))
    }

    /// What the node's reboot waits for, if it waits: its place in line, and the latest
    /// `RebootWaiting` (its message names the holds) or what ended its last try.
    fn waits(&self) -> Option<(String, Option<Timestamp>)> {
        let said = self
            .latest(&STORY)
            .filter(|s| s.is(&WAITS))
            .filter(|s| !self.need_withdrawn(s.at));
        let line = self.line.map(|l| {
            format!(
                "place {} of {} in line for a drain slot of group {}",
                l.place.number, l.place.of, l.place.group
            )
        });
        let said_text = said.map(|s| {
            if s.reason == Reason::RebootStarted.as_str() {
                "a drain slot (its reboot started)".to_string()
            } else {
                shown(s.message)
            }
        });
        let since = self.line.map(|l| l.since).or(said.and_then(|s| s.at));
        match (line, said_text) {
            (Some(l), Some(s)) => Some((format!("{l}; {s}"), since)),
            (Some(l), None) => Some((l, since)),
            (None, Some(s)) => Some((s, since)),
            (None, None) => None,
        }
    }

    /// Whether a `MaintenancePlanned` condition set back to False after `at` says the need
    /// is gone.
    fn need_withdrawn(&self, at: Option<Timestamp>) -> bool {
        self.written(ConditionType::MaintenancePlanned)
            .is_some_and(|(c, written)| c.status == "False" && written > at)
    }

    /// Whether, and since when, the node needs a reboot: a `RebootRequired` or a waiting Event
    /// not followed by the reboot, its place in line, or `MaintenancePlanned` True.
    fn needs(&self) -> Option<Needed> {
        if let Some(s) = self.latest(&STORY)
            && s.is(&NEEDS)
            && !self.need_withdrawn(s.at)
        {
            let since = self.latest(&[Reason::RebootRequired]).and_then(|r| r.at);
            return Some(Needed {
                since: since.or(s.at),
            });
        }
        if let Some(line) = self.line {
            return Some(Needed {
                since: Some(line.since),
            });
        }
        self.written(ConditionType::MaintenancePlanned)
            .filter(|(c, _)| c.status == "True")
            .map(|(c, at)| Needed {
                since: c.last_transition_time.as_ref().map(|t| t.0).or(at),
            })
    }

    /// The field managers that own the hold annotation, with the time of their entry.
    fn hold_setters(&self) -> Vec<(String, Option<Timestamp>)> {
        // RFC 6901: `/` in a key is `~1`.
        let pointer = format!(
            "/f:metadata/f:annotations/f:{}",
            HOLD_ANNOTATION.replace('~', "~0").replace('/', "~1")
        );
        let mut setters: Vec<(String, Option<Timestamp>)> = Vec::new();
        for e in self.node.metadata.managed_fields.iter().flatten() {
            let owns = e.fields_v1.as_ref().and_then(|f| f.0.pointer(&pointer));
            let Some(manager) = e.manager.as_deref().filter(|_| owns.is_some()) else {
                continue;
            };
            let name = match e.operation.as_deref() {
                Some("Update") | None => manager.to_string(),
                Some(op) => format!("{manager} ({op})"),
            };
            if !setters.iter().any(|(n, _)| *n == name) {
                setters.push((name, e.time.as_ref().map(|t| t.0)));
            }
        }
        setters
    }
}

/// A message from the cluster as a row quotes it: cut where it enters.
fn shown(message: &str) -> String {
    text::cut(message, text::EVENT_MESSAGE_MAX)
}

fn condition<'a>(node: &'a Node, kind: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}
