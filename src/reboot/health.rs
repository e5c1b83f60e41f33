//! The cluster's health as a hold, judged purely for [`super::holds::judge`] over what
//! [`super::holds_read`] read: the reasons `unready_nodes` (`[fleet] max_unready`) and
//! `alerts_firing` (`[fleet.alerts]`), and their `unknown` when a read failed.
//!
//! - `unready_nodes`: `max_unready` is how many nodes of the node's slot group (`[fleet]
//!   group_label`, as `crate::fleet::group_of` tells it) may be out at once, this node's own
//!   reboot included, as the Machine Config Operator's pool `maxUnavailable` counts the node it
//!   updates. A node is out when its Ready condition is not `True` (NotReady, or Unknown since its
//!   kubelet stopped posting), or when it is cordoned by someone else: `spec.unschedulable` with
//!   no marker of ours saying our drain cordoned it (a node our daemon drains holds a drain slot,
//!   and the slots count it). So the node waits while `max_unready` or more other nodes of its
//!   group are out: its reboot would put one more out.
//! - `alerts_firing`: an alert of the configured Prometheus or Alertmanager counts as kured's
//!   Prometheus blocker counts it (`kubereboot/kured` `pkg/blockers/prometheus.go`): with
//!   `firing_only`, only a firing one (not a pending one); with a `filter`, one whose name it does
//!   not match, or, with `match_only`, one whose name it matches. Any alert that counts holds.
//! - An unreadable group or alert list holds as `unknown` (kured takes a failed Prometheus query
//!   for a block too): the gate is there for an outage, which is when the monitoring is most
//!   likely down or cut off; a reboot that went ahead because the check failed would turn the
//!   gate off exactly then. The next judging, a minute later, asks again.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;

use super::alerts::{Alert, AlertsError};
use super::reason::{Key, Reason};
use crate::api::ApiError;
use crate::config::FleetSettings;
use crate::config::gates::AlertsSettings;
use crate::node::{MarkerRead, is_ready, read_marker};

/// The most nodes or alerts a message names; the rest are counted.
const NAMED: usize = 10;

/// The Nodes of this node's slot group as read, for `max_unready`.
#[derive(Debug, Clone)]
pub enum Group {
    /// `max_unready` is not set, or this node's own Node could not be read (its group unknown).
    NotAsked,
    /// The Nodes listed (the judge keeps those of this node's group).
    Listed(Vec<Node>),
    Unreadable(ApiError),
}

/// The alerts of `[fleet.alerts]` as read.
#[derive(Debug, Clone)]
pub enum Alerts {
    /// No `[fleet.alerts]`: nothing was asked.
    NotAsked,
    Listed(Vec<Alert>),
    Unreadable(AlertsError),
}

/// `unready_nodes` when `max_unready` or more other nodes of the group are out; an `unknown`
/// when the group could not be read. `node` is this node's Node as read.
pub fn unready(
    me: &str,
    fleet: &FleetSettings,
    node: &Result<Node, ApiError>,
    group: &Group,
) -> Option<Reason> {
    let max = fleet.max_unready?;
    let unknown = |why: String| {
        Some(Reason::new(
            Key::Unknown,
            format!(
                "cannot tell how many nodes of node {me}'s group are unready (max_unready {max}): {why}"
            ),
        ))
    };
    let (own, nodes) = match (node, group) {
        (Ok(own), Group::Listed(nodes)) => (own, nodes),
        (Err(e), _) => return unknown(format!("its group is not known: {e}")),
        (Ok(_), Group::Unreadable(e)) => return unknown(e.to_string()),
        // The reader did not do its part; never a "may go".
        (Ok(_), Group::NotAsked) => return unknown("the group's Nodes were not read".to_string()),
    };
    let group = crate::fleet::group_of(fleet, own);
    let others: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(me))
        .filter(|n| crate::fleet::group_of(fleet, n) == group)
        .collect();
    let size = others.len() + 1;
    let limit = max.limit(size);
    let out: Vec<String> = others
        .iter()
        .filter_map(|n| {
            let why = out_why(n)?;
            Some(format!(
                "{} {why}",
                n.metadata.name.as_deref().unwrap_or("?")
            ))
        })
        .collect();
    if out.len() < limit {
        return None;
    }
    Some(Reason::new(
        Key::UnreadyNodes,
        format!(
            "{} of node {me}'s group {group} {} out ({}): max_unready {max} lets at most {} of \
             its {} out at once, this node's reboot included, so node {me} waits",
            crate::words::count(out.len(), "other node", "other nodes"),
            if out.len() == 1 { "is" } else { "are" },
            named(&out),
            crate::words::count(limit, "node", "nodes"),
            crate::words::count(size, "node", "nodes"),
        ),
    ))
}

/// Why a node of the group is out, if it is.
fn out_why(n: &Node) -> Option<&'static str> {
    if !is_ready(n) {
        return Some("NotReady");
    }
    let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    let ours = matches!(read_marker(n), MarkerRead::Ours(m) if m.cordoned);
    (unschedulable && !ours).then_some("cordoned by someone else")
}

/// `alerts_firing` when an alert that counts is active; an `unknown` when the alerts could not
/// be read.
pub fn firing(me: &str, fleet: &FleetSettings, alerts: &Alerts) -> Option<Reason> {
    let settings = fleet.alerts.as_ref()?;
    let list = match alerts {
        Alerts::Listed(list) => list,
        Alerts::Unreadable(e) => {
            return Some(Reason::new(
                Key::Unknown,
                format!(
                    "cannot tell whether an alert of {} fires, so node {me} waits: {e}",
                    settings.source
                ),
            ));
        }
        Alerts::NotAsked => {
            return Some(Reason::new(
                Key::Unknown,
                format!(
                    "the alerts of {} {} were not read for node {me}",
                    settings.source,
                    settings.endpoint()
                ),
            ));
        }
    };
    let names: BTreeSet<String> = list
        .iter()
        .filter(|a| counts(settings, a))
        .map(|a| {
            let name = if a.name.is_empty() {
                "(no alertname)"
            } else {
                &a.name
            };
            if a.firing {
                name.to_string()
            } else {
                format!("{name} (pending)")
            }
        })
        .collect();
    if names.is_empty() {
        return None;
    }
    let names: Vec<String> = names.into_iter().collect();
    Some(Reason::new(
        Key::AlertsFiring,
        format!(
            "{} {} at {} {}: {}; node {me} waits until none does",
            crate::words::count(names.len(), "alert", "alerts"),
            if names.len() == 1 {
                "is active"
            } else {
                "are active"
            },
            settings.source,
            settings.base,
            named(&names)
        ),
    ))
}

/// Whether `alert` holds the reboot, by kured's rules.
pub fn counts(settings: &AlertsSettings, alert: &Alert) -> bool {
    let state = !settings.firing_only || alert.firing;
    let name = settings
        .filter
        .as_ref()
        .is_none_or(|f| f.0.is_match(&alert.name) == settings.match_only);
    state && name
}

/// The first [`NAMED`] of `items`, and how many more.
fn named(items: &[String]) -> String {
    let mut list = items
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > NAMED {
        list.push_str(&format!(" and {} more", items.len() - NAMED));
    }
    list
}
