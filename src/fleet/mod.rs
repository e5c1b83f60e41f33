//! Drain slots (`[fleet]`, issue 20): at most `slots` nodes (per group) drain at once. A slot is
//! a Lease in `coordination.k8s.io/v1` (what the kubelet, leader election and
//! `poseidon/fleetlock` use), held by `NODE/BOOT_ID`. A node takes one before it cordons and
//! keeps it until its restore (the node's capacity is missing until then, not only while it
//! drains); a cancel or a restore gives it back. Every write is guarded by the resourceVersion
//! read (a JSON-patch `test`, as the Node writes of [`crate::api::guarded`]), or is a create that
//! fails when another node created the Lease first: two nodes never both hold one slot.
//!
//! A holder that will never give its slot back is recognised, not waited for: its Node is gone,
//! or its Node runs another boot and carries no marker of ours (it was restored without giving
//! the slot back), or it has held the slot longer than `[fleet] hold_max`. The last applies to
//! every Lease, whatever its `holderIdentity` says (one that is not `NODE/BOOT_ID`, so has no
//! Node to look at, is judged by its times alone), and a hold is judged from when it was taken:
//! a Lease is stale when its `acquireTime` or its `renewTime` is older than `hold_max`, so a
//! `renewTime` written far ahead cannot keep a slot taken long ago. A time ahead of this node's
//! clock by more than [`CLOCK_SKEW_MAX`] counts as the moment this node first saw the Lease with
//! it ([`sightings`]; a skewed or forged clock buys no time: it is as fresh as a take of that
//! moment, never fresher, and a Lease whose times all lie ahead ages from then). The same node is always its own
//! holder again (a daemon restarted during the drain, the stop phase's second stage, the next
//! boot).
//!
//! Nodes that wait for a slot wait in line ([`queue`]): only the first of them try a slot given
//! back, so a hand-off draws a few writes however many wait.
//!
//! This module is pure; [`slots`] makes the calls.

mod held;
pub mod queue;
pub mod sightings;
pub mod slots;
pub mod steer;
pub mod view;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde_json::json;

use crate::config::FleetSettings;
use crate::node::MARKER_ANNOTATION;

/// The label every slot Lease carries: its group (`all` without `[fleet] group_label`).
pub const GROUP_LABEL: &str = "kube-shutdown-drain/slot-group";
/// The group of every node when `[fleet] group_label` is not set.
pub const ALL: &str = "all";
/// The group of a node that lacks the configured label.
pub const UNLABELLED: &str = "unlabelled";

/// Who holds a slot: a node in one of its boots (`spec.holderIdentity` = `NODE/BOOT_ID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub node: String,
    pub boot_id: String,
}

/// The longest node name a holder names: a Node's name is a DNS subdomain (RFC 1123, as the API
/// server checks it), at most 253 bytes.
const NODE_NAME_MAX: usize = 253;
/// The longest boot ID a holder names: the kernel's is a 36-byte UUID
/// (`/proc/sys/kernel/random/boot_id`); the rest is room.
const BOOT_ID_MAX: usize = 64;

impl Holder {
    /// Reads `NODE/BOOT_ID`; `None` for anything else (a Lease we did not write, or a part longer
    /// than any node name or boot ID: what a holder names stays short wherever it is quoted).
    pub fn parse(identity: &str) -> Option<Holder> {
        let (node, boot_id) = identity.split_once('/')?;
        let sized = |part: &str, max: usize| !part.is_empty() && part.len() <= max;
        (sized(node, NODE_NAME_MAX) && sized(boot_id, BOOT_ID_MAX) && !boot_id.contains('/')).then(
            || Holder {
                node: node.to_string(),
                boot_id: boot_id.to_string(),
            },
        )
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.node, self.boot_id)
    }
}

/// The group `node` drains in: the value of `[fleet] group_label` ([`UNLABELLED`] when the
/// node lacks it), or [`ALL`].
pub fn group_of(fleet: &FleetSettings, node: &Node) -> String {
    let Some(key) = &fleet.group_label else {
        return ALL.to_string();
    };
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| UNLABELLED.to_string())
}

/// The names of a group's slot Leases: `kube-shutdown-drain-slot-I` for [`ALL`], else
/// `kube-shutdown-drain-GROUP-slot-I` with GROUP lower-cased and every character a name may not
/// hold turned into `-` (a label value is at most 63 characters, so the name stays short). When
/// that changed the value (`Zone_A`, `zone.a` and `zone-a` would all be `zone-a`), eight hex
/// digits of a hash of the value itself follow GROUP, so two groups never share slots.
pub fn slot_names(fleet: &FleetSettings, group: &str) -> Vec<String> {
    let prefix = if group == ALL {
        "kube-shutdown-drain".to_string()
    } else {
        let g: String = group
            .chars()
            .map(|c| c.to_ascii_lowercase())
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let g = g.trim_matches('-');
        if g == group {
            format!("kube-shutdown-drain-{g}")
        } else if g.is_empty() {
            format!("kube-shutdown-drain-{:08x}", fnv1a(group))
        } else {
            format!("kube-shutdown-drain-{g}-{:08x}", fnv1a(group))
        }
    };
    (0..fleet.slots)
        .map(|i| format!("{prefix}-slot-{i}"))
        .collect()
}

/// 32-bit FNV-1a of `text`: a hash every node's daemon computes alike, in every release (the
/// standard library's hasher promises no stable output).
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The holder a Lease names, if it names one we can have written.
pub fn holder_of(lease: &Lease) -> Option<Holder> {
    identity(lease).and_then(Holder::parse)
}

/// The boot ID `node`'s kubelet reports (`status.nodeInfo.bootID`), if any.
pub fn boot_of(node: &Node) -> Option<&str> {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.as_str())
        .filter(|b| !b.is_empty())
}

/// The holder a Lease names, as a message quotes it: its identity cut where it enters
/// ([`crate::text::outside`]), `?` without one.
pub fn shown(lease: &Lease) -> String {
    identity(lease).map_or_else(|| "?".to_string(), crate::text::outside)
}

fn identity(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|s| !s.is_empty())
}

/// When the holder last took or renewed the slot.
pub fn renewed(lease: &Lease) -> Option<jiff::Timestamp> {
    let spec = lease.spec.as_ref()?;
    spec.renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0)
}

/// How far ahead of this node's clock a Lease's time may be and still be read as written: a
/// minute of skew between two nodes' clocks (each node's NTP keeps it far smaller). A time
/// further ahead counts as the moment this node first saw it ([`held_too_long`]).
pub const CLOCK_SKEW_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// The times a slot Lease carries: when its holder took it (`acquireTime`) and last renewed it
/// (`renewTime`), as the holder's clock wrote them; and, for a Lease whose times all lie ahead of
/// this node's clock, when this node first saw it so ([`sightings`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldTimes {
    pub acquired: Option<jiff::Timestamp>,
    pub renewed: Option<jiff::Timestamp>,
    /// When this node first saw the Lease with these times, by its own clock: what a time more
    /// than [`CLOCK_SKEW_MAX`] ahead counts as (`None`: now).
    pub first_seen: Option<jiff::Timestamp>,
}

impl HeldTimes {
    /// The times `lease` carries.
    pub fn of(lease: &Lease) -> HeldTimes {
        let spec = lease.spec.as_ref();
        HeldTimes {
            acquired: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0),
            renewed: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            first_seen: None,
        }
    }

    /// Whether the Lease carries a time and every one it carries lies more than
    /// [`CLOCK_SKEW_MAX`] ahead of `now`: nothing in it says how long it has been held.
    pub fn all_ahead_of(&self, now: jiff::Timestamp) -> bool {
        let times = [self.acquired, self.renewed];
        times.iter().any(Option::is_some) && times.iter().flatten().all(|&t| ahead(t, now))
    }
}

/// Whether `t` lies more than [`CLOCK_SKEW_MAX`] ahead of `now`.
fn ahead(t: jiff::Timestamp, now: jiff::Timestamp) -> bool {
    let skew = jiff::SignedDuration::try_from(CLOCK_SKEW_MAX).unwrap_or(jiff::SignedDuration::ZERO);
    now.duration_until(t) > skew
}

/// Why a slot with these `times` has been held too long, whoever holds it: its `acquireTime` or
/// its `renewTime` is older than `hold_max`, or it carries neither. A time more than
/// [`CLOCK_SKEW_MAX`] ahead of `now` counts as the moment this node first saw the Lease with it
/// ([`HeldTimes::first_seen`], else `now`): a skewed or forged clock buys no time, and a hold
/// whose times all lie ahead ages from its first sighting. Pure.
pub fn held_too_long(
    times: HeldTimes,
    now: jiff::Timestamp,
    hold_max: std::time::Duration,
) -> Option<String> {
    let first_seen = times.first_seen.map_or(now, |t| t.min(now));
    let as_read = |t: jiff::Timestamp| if ahead(t, now) { first_seen } else { t };
    let max = jiff::SignedDuration::try_from(hold_max).unwrap_or(jiff::SignedDuration::MAX);
    let over = |t: Option<jiff::Timestamp>| t.filter(|&t| now.duration_since(as_read(t)) > max);
    let since = |t: jiff::Timestamp, field: &str| {
        if ahead(t, now) {
            format!(
                "{first_seen} (when this node first saw it: its {field} {t} is ahead of this \
                 node's clock)"
            )
        } else {
            format!("{t} ({field})")
        }
    };
    let ahead_too = times
        .renewed
        .filter(|&t| ahead(t, now) && times.acquired.is_some_and(|a| !ahead(a, now)))
        .map(|t| {
            format!(
                "; its renewTime {t} is ahead of this node's clock and counts from when this \
                 node first saw it"
            )
        })
        .unwrap_or_default();
    if let Some(t) = over(times.acquired) {
        return Some(format!(
            "held since {}, longer than hold_max ({} s){ahead_too}",
            since(t, "acquireTime"),
            hold_max.as_secs()
        ));
    }
    if let Some(t) = over(times.renewed) {
        return Some(format!(
            "held since {}, longer than hold_max ({} s)",
            since(t, "renewTime"),
            hold_max.as_secs()
        ));
    }
    // A Lease of ours always has a time; one without is not held for anyone.
    (times.acquired.is_none() && times.renewed.is_none())
        .then(|| "the Lease carries no time".to_string())
}

/// Why `holder` will never give its slot back, if it will not: `holder_node` is its Node as
/// read now (`None`: gone), `times` the Lease's ([`held_too_long`]). Pure.
pub fn stale(
    holder: &Holder,
    holder_node: Option<&Node>,
    times: HeldTimes,
    now: jiff::Timestamp,
    hold_max: std::time::Duration,
) -> Option<String> {
    let Some(node) = holder_node else {
        return Some(format!("node {} is gone", holder.node));
    };
    let boot = boot_of(node);
    let marked = node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MARKER_ANNOTATION));
    if let Some(boot) = boot
        && boot != holder.boot_id
        && !marked
    {
        return Some(format!(
            "node {} runs boot {boot} and was restored since it took the slot in boot {}",
            holder.node, holder.boot_id
        ));
    }
    held_too_long(times, now, hold_max).map(|why| format!("node {}'s slot: {why}", holder.node))
}

/// The spec of a slot held by `me` from `now`.
fn held_spec(me: &Holder, now: jiff::Timestamp, fleet: &FleetSettings) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(i32::try_from(fleet.hold_max.as_secs()).unwrap_or(i32::MAX)),
        ..LeaseSpec::default()
    }
}

/// A new slot Lease `name` of `group`, held by `me`.
pub fn new_lease(
    name: &str,
    fleet: &FleetSettings,
    group: &str,
    me: &Holder,
    now: jiff::Timestamp,
) -> Lease {
    let mut lease = Lease::default();
    lease.metadata.name = Some(name.to_string());
    lease.metadata.namespace = Some(fleet.lease_namespace.clone());
    lease.metadata.labels = Some([(GROUP_LABEL.to_string(), group.to_string())].into());
    lease.spec = Some(held_spec(me, now, fleet));
    lease
}

fn guard(lease: &Lease) -> serde_json::Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": lease.metadata.resource_version})
}

/// The write taking `lease` (as read) for `me`, or `None` when its holder is no longer
/// `expected` (the identity judged free, stale or ours when it was read: another node took it in
/// between, and the guarded write read it again).
pub fn take_patch(
    lease: &Lease,
    me: &Holder,
    expected: Option<&str>,
    now: jiff::Timestamp,
    fleet: &FleetSettings,
) -> Result<Option<(json_patch::Patch, ())>, serde_json::Error> {
    if identity(lease) != expected {
        return Ok(None);
    }
    let spec = serde_json::to_value(held_spec(me, now, fleet))?;
    let ops = vec![
        guard(lease),
        json!({"op": "add", "path": "/spec", "value": spec}),
    ];
    Ok(Some((crate::api::guarded::patch_of(ops)?, ())))
}

/// The write giving `lease` (as read) back, or `None` when node `node` does not hold it.
pub fn release_patch(
    lease: &Lease,
    node: &str,
) -> Result<Option<(json_patch::Patch, ())>, serde_json::Error> {
    if holder_of(lease).is_none_or(|h| h.node != node) {
        return Ok(None);
    }
    let duration = lease.spec.as_ref().and_then(|s| s.lease_duration_seconds);
    let ops = vec![
        guard(lease),
        json!({"op": "add", "path": "/spec", "value": {"leaseDurationSeconds": duration}}),
    ];
    Ok(Some((crate::api::guarded::patch_of(ops)?, ())))
}

#[cfg(test)]
mod tests;
