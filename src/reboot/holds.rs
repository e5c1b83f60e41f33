//! What holds a node that needs a reboot: every reason it must wait, judged by one pure function
//! ([`judge`]) over what was read ([`Seen`], read by [`super::holds_read`]) and the instant. The
//! daemon's looker at the holds asks while a reboot is needed (`crate::daemon::reboot::look`),
//! and the one procedure of a reboot asks again after the slot and after the drain, before
//! logind's `Reboot` (`super::procedure`); an empty answer means the node may go. Before the
//! drain, the last forecast and the drain's estimated length weigh in (`forecast_blocks`, a
//! window that would close before the drain ends); after it, neither.
//!
//! The reasons, in this order, each with a stable key for metrics and `status`:
//! - `held`: the Node carries the annotation [`HOLD_ANNOTATION`] (any value); who set it is the
//!   field manager that owns it in managedFields, or else its value;
//! - `paused`: the Lease [`PAUSE_LEASE`] exists in `[fleet] lease_namespace` (whatever it holds):
//!   the whole fleet waits until it is deleted. A Lease because the shipped RBAC already lets
//!   every node identity `get` one there: the ClusterRole's `get` on Leases (granted for the
//!   kubelet's Lease in `kube-node-lease`) in any namespace, and the drain slots' Role in the
//!   default `lease_namespace`; a ConfigMap would need a new grant. The kubelet's own
//!   credentials may not read it (the Node authorizer allows a node only its own Lease): the
//!   pause is then `unknown` and the node waits. A node identity may create that Lease too (the
//!   slots' Role creates slot Leases), so a node can pause the fleet; none may delete it, so
//!   none can lift a pause;
//! - `blocking_pods`: a pod that `[reboot] blocking_pod_selector` selects runs on this node
//!   (kured's `--blocking-pod-selector`, `kubereboot/kured` `pkg/blockers/kubernetespod.go`):
//!   any phase but `Succeeded` and `Failed` holds (kured also lets `Unknown` go; a pod in an
//!   unknown phase may still run, so here it holds);
//! - `outside_window`: no maintenance window is open now; the message says when the next opens,
//!   in the windows' zone. A window that is open but closes before the drain would end, by an
//!   estimate from the forecast or from the last drain's report ([`Estimate`]), holds under the
//!   same key ([`past_close`]): a drain that would run past the window's end does not start;
//! - `forecast_blocks`: with `[daemon] forecast_interval` set, the last forecast's verdict is
//!   `blocked` (a pod the Eviction API would keep refusing). `cut at the deadline` does not
//!   hold: that drain completes, late, and the estimate above weighs its length;
//! - `unready_nodes`: with `[fleet] max_unready`, that many other nodes of the slot group, or
//!   more, are NotReady or cordoned by someone else ([`super::health`]);
//! - `alerts_firing`: with `[fleet.alerts]`, an alert of its Prometheus or Alertmanager that
//!   counts by kured's rules is active ([`super::health`]);
//! - `hook`: a pre-drain hook of the reboot itself did not pass (`super::procedure`): a command
//!   of `[[hook]]` that failed or ran past its timeout (named, with its last output line), or an
//!   operator's hook annotation still on the Node at `[fleet] hook_timeout`. Never read by the
//!   looker: the reboot that met it is called off, and the next try runs the hooks again;
//! - `unknown`: a read failed (the Node, the pause Lease, the node's pods, the group's Nodes,
//!   the alerts), never taken for a
//!   "may go". It stands where the reason it could not tell would stand, naming the object and
//!   the error.

use std::fmt;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};

pub use super::health::{Alerts, Group};
pub use super::reason::{Key, Reason};
use super::window::Windows;
use crate::api::ApiError;
use crate::config::reboot::RebootSettings;
use crate::config::selector::Selector;
use crate::config::{FleetSettings, Settings};
use crate::forecast::{Forecast, Verdict};
use crate::node::ownership::annotation_owners;
use crate::report::Report;

/// The Node annotation that holds the node's reboot, whatever its value.
pub const HOLD_ANNOTATION: &str = "kube-shutdown-drain/hold";
/// The Lease in `[fleet] lease_namespace` whose existence pauses the reboots of every node.
/// Not a drain slot: slot names end in `-slot-N` ([`crate::fleet::slot_names`]).
pub const PAUSE_LEASE: &str = "kube-shutdown-drain-pause";
/// The most pods a `blocking_pods` message names; the rest are counted.
const PODS_NAMED: usize = 10;
/// The most bytes of a hold annotation's value a message shows (an annotation may hold 256 KiB).
const VALUE_SHOWN: usize = 200;

/// Everything that holds the node now; none: it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holds {
    pub node: String,
    /// In the order of [`Key::ALL`], an `unknown` where its read failed.
    pub reasons: Vec<Reason>,
}

impl Holds {
    /// The holds could not be read at all (no client): one `unknown` reason saying `why`.
    pub fn unknown(node: &str, why: &str) -> Holds {
        Holds {
            node: node.to_string(),
            reasons: vec![Reason::new(
                Key::Unknown,
                format!("cannot read what holds the reboot of node {node}: {why}"),
            )],
        }
    }

    /// A pre-drain hook of the reboot did not pass: one `hook` reason, `message` naming the node
    /// and the hook.
    pub fn hook(node: &str, message: String) -> Holds {
        Holds {
            node: node.to_string(),
            reasons: vec![Reason::new(Key::Hook, message)],
        }
    }

    /// Nothing holds the node.
    pub fn may_go(&self) -> bool {
        self.reasons.is_empty()
    }

    /// The keys of the reasons, each once, in the order of [`Key::ALL`].
    pub fn keys(&self) -> Vec<Key> {
        Key::ALL
            .into_iter()
            .filter(|k| self.reasons.iter().any(|r| r.key == *k))
            .collect()
    }
}

impl fmt::Display for Holds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            return write!(f, "nothing holds the reboot of node {}", self.node);
        }
        let messages: Vec<&str> = self.reasons.iter().map(|r| r.message.as_str()).collect();
        f.write_str(&messages.join("; "))
    }
}

/// What the last forecast said, as the judge takes it (the forecast is made elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForecastSaid<'a> {
    pub verdict: Verdict,
    /// Its one-line summary (it names the pods and budgets).
    pub summary: &'a str,
}

impl<'a> From<&'a Forecast> for ForecastSaid<'a> {
    fn from(f: &'a Forecast) -> ForecastSaid<'a> {
        ForecastSaid {
            verdict: f.verdict,
            summary: &f.summary,
        }
    }
}

/// Where an estimate of the drain's length comes from; the message says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EstimateFrom {
    /// The forecast's `estimate_seconds`.
    Forecast,
    /// The length of the last drain, from its report.
    LastReport,
}

/// How long the drain is expected to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub drain: Duration,
    pub from: EstimateFrom,
}

impl Estimate {
    /// The forecast's estimate; none when the forecast has none (blocked pods hold the drain
    /// until its deadline).
    pub fn from_forecast(f: &Forecast) -> Option<Estimate> {
        let drain = Duration::try_from_secs_f64(f.estimate_seconds?).ok()?;
        Some(Estimate {
            drain,
            from: EstimateFrom::Forecast,
        })
    }

    /// The last drain's length; none for a dry run (it evicted nothing) or a drain that did not
    /// complete (its length says only when it stopped).
    pub fn from_report(r: &Report) -> Option<Estimate> {
        (r.complete && !r.dry_run).then(|| Estimate {
            drain: Duration::from_millis(r.duration_ms),
            from: EstimateFrom::LastReport,
        })
    }
}

/// What the judge weighs besides what was read.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub node: &'a str,
    /// `[fleet] lease_namespace`, where [`PAUSE_LEASE`] is looked for.
    pub lease_namespace: &'a str,
    /// `[reboot] blocking_pod_selector`; none: the node's pods are not read.
    pub blocking_pod_selector: Option<&'a Selector>,
    pub windows: &'a Windows,
    /// The last forecast; none without `[daemon] forecast_interval` or before the first.
    pub forecast: Option<ForecastSaid<'a>>,
    /// The drain's expected length, when the caller has one and the drain is still to come
    /// (not before the reboot that follows a drain).
    pub estimate: Option<Estimate>,
    /// `[fleet]`: the slot group, `max_unready` and `[fleet.alerts]`.
    pub fleet: &'a FleetSettings,
    /// Whether the cluster-health gates count ([`super::health`]): before the drain, not after
    /// it: they keep a node from taking a slot and draining into an unhealthy cluster, and an
    /// alert the node's own drain raised must not call off the reboot it drained for.
    pub gates: bool,
}

impl<'a> Context<'a> {
    /// The context of the configured node; `forecast` (the last one's verdict,
    /// `ForecastSaid::from(&forecast)`) counts only with `[daemon] forecast_interval` set:
    /// without it the daemon makes none, and a forecast made once by hand holds nothing.
    pub fn new(
        settings: &'a Settings,
        reboot: &'a RebootSettings,
        windows: &'a Windows,
        forecast: Option<ForecastSaid<'a>>,
        estimate: Option<Estimate>,
    ) -> Context<'a> {
        Context {
            node: &settings.node_name,
            lease_namespace: &settings.fleet.lease_namespace,
            blocking_pod_selector: reboot.blocking_pod_selector.as_ref(),
            windows,
            forecast: forecast.filter(|_| settings.daemon.forecast_interval.is_some()),
            estimate,
            fleet: &settings.fleet,
            gates: true,
        }
    }
}

/// The pause Lease as read.
#[derive(Debug, Clone)]
pub enum Pause {
    /// Not there (404): no pause.
    Absent,
    Present(Box<Lease>),
    Unreadable(ApiError),
}

/// The node's pods as read, for `blocking_pod_selector`.
#[derive(Debug, Clone)]
pub enum Pods {
    /// No selector is configured: nothing was read.
    NotAsked,
    Listed(Vec<Pod>),
    Unreadable(ApiError),
}

/// What [`super::holds_read::read`] read.
#[derive(Debug, Clone)]
pub struct Seen {
    pub node: Result<Node, ApiError>,
    pub pause: Pause,
    pub pods: Pods,
    pub group: Group,
    pub alerts: Alerts,
}

/// Every reason the node must wait at `now`, in the order of [`Key::ALL`].
pub fn judge(cx: &Context<'_>, seen: &Seen, now: Timestamp) -> Holds {
    let node = cx.node;
    let mut reasons = Vec::new();
    match &seen.node {
        Ok(n) => reasons.extend(held(node, n)),
        Err(e) => reasons.push(Reason::new(
            Key::Unknown,
            format!("cannot tell whether node {node} is held ({HOLD_ANNOTATION}): {e}"),
        )),
    }
    match &seen.pause {
        Pause::Absent => {}
        Pause::Present(lease) => reasons.push(paused(node, cx.lease_namespace, lease)),
        Pause::Unreadable(e) => reasons.push(Reason::new(
            Key::Unknown,
            format!(
                "cannot tell whether the fleet is paused (Lease {}/{PAUSE_LEASE}), so node \
                 {node} waits: {e}",
                cx.lease_namespace
            ),
        )),
    }
    if let Some(selector) = cx.blocking_pod_selector {
        match &seen.pods {
            Pods::Listed(pods) => reasons.extend(blocking(node, selector, pods)),
            Pods::Unreadable(e) => reasons.push(Reason::new(
                Key::Unknown,
                format!(
                    "cannot tell whether pods selected by blocking_pod_selector {:?} run on \
                     node {node}: {e}",
                    selector.to_string()
                ),
            )),
            // A selector with nothing read: the reader did not do its part; never a "may go".
            Pods::NotAsked => reasons.push(Reason::new(
                Key::Unknown,
                format!(
                    "the pods of node {node} were not read for blocking_pod_selector {:?}",
                    selector.to_string()
                ),
            )),
        }
    }
    reasons.extend(window(node, cx.windows, now, cx.estimate.as_ref()));
    if let Some(said) = cx.forecast
        && said.verdict == Verdict::Blocked
    {
        reasons.push(Reason::new(
            Key::ForecastBlocks,
            format!(
                "the forecast for node {node} says its drain would block: {}",
                said.summary
            ),
        ));
    }
    if cx.gates {
        reasons.extend(super::health::unready(
            cx.node,
            cx.fleet,
            &seen.node,
            &seen.group,
        ));
        reasons.extend(super::health::firing(cx.node, cx.fleet, &seen.alerts));
    }
    Holds {
        node: node.to_string(),
        reasons,
    }
}

/// `held`, when the Node carries [`HOLD_ANNOTATION`].
fn held(node: &str, n: &Node) -> Option<Reason> {
    let value = n.metadata.annotations.as_ref()?.get(HOLD_ANNOTATION)?;
    let owners = annotation_owners(n, HOLD_ANNOTATION);
    let who = if !owners.is_empty() {
        format!("set by field manager {}", owners.join(", "))
    } else if !value.trim().is_empty() {
        format!("value {:?}", crate::text::clean(value, VALUE_SHOWN))
    } else {
        "empty, and the server names no field manager".to_string()
    };
    Some(Reason::new(
        Key::Held,
        format!(
            "node {node} is held by its annotation {HOLD_ANNOTATION} ({who}): remove the \
             annotation to let it reboot"
        ),
    ))
}

/// `paused`: the pause Lease exists.
fn paused(node: &str, namespace: &str, lease: &Lease) -> Reason {
    let mut managers: Vec<&str> = Vec::new();
    for e in lease.metadata.managed_fields.iter().flatten() {
        if let Some(m) = e.manager.as_deref()
            && !managers.contains(&m)
        {
            managers.push(m);
        }
    }
    let who = if managers.is_empty() {
        String::new()
    } else {
        format!(" (written by field manager {})", managers.join(", "))
    };
    let since = lease
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| format!(" since {}", t.0))
        .unwrap_or_default();
    Reason::new(
        Key::Paused,
        format!(
            "the fleet's reboots are paused by Lease {namespace}/{PAUSE_LEASE}{since}{who}: node \
             {node} waits until it is deleted"
        ),
    )
}

/// `blocking_pods`: the pods `selector` selects that run on `node`.
fn blocking(node: &str, selector: &Selector, pods: &[Pod]) -> Option<Reason> {
    let names: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| !is_finished(p))
        .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&Default::default())))
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or("?"),
                p.metadata.name.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if names.is_empty() {
        return None;
    }
    let mut list = names
        .iter()
        .take(PODS_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > PODS_NAMED {
        list.push_str(&format!(" and {} more", names.len() - PODS_NAMED));
    }
    Some(Reason::new(
        Key::BlockingPods,
        format!(
            "node {node} runs {} selected by blocking_pod_selector {:?}: {list}",
            crate::words::count(names.len(), "pod", "pods"),
            selector.to_string()
        ),
    ))
}

/// A pod whose containers have all stopped for good: it holds nothing.
fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// `outside_window`: no window open at `now`, or one that closes before the estimated drain
/// would end.
fn window(
    node: &str,
    windows: &Windows,
    now: Timestamp,
    estimate: Option<&Estimate>,
) -> Option<Reason> {
    let zone = windows.zone();
    if !windows.contains(now) {
        let when = match windows.next_open(now) {
            Some(open) => format!("the next opens {}", local(open, zone)),
            None => format!("none opens in the next 15 days ({})", zone_name(zone)),
        };
        return Some(Reason::new(
            Key::OutsideWindow,
            format!("node {node} is outside its maintenance windows: {when}"),
        ));
    }
    past_close(node, zone, now, estimate?, windows.closes_at(now)?)
}

/// A drain that would run past the window's end does not start: `outside_window` when the
/// drain, started at `now` and taking `estimate`, would end after `closes` (ending at `closes`
/// fits). Pure; the caller says where the estimate comes from.
pub fn past_close(
    node: &str,
    zone: &TimeZone,
    now: Timestamp,
    estimate: &Estimate,
    closes: Timestamp,
) -> Option<Reason> {
    let length = SignedDuration::try_from(estimate.drain).unwrap_or(SignedDuration::MAX);
    let ends = now.checked_add(length).unwrap_or(Timestamp::MAX);
    if ends <= closes {
        return None;
    }
    let from = match estimate.from {
        EstimateFrom::Forecast => "by the forecast",
        EstimateFrom::LastReport => "by the last drain's report",
    };
    Some(Reason::new(
        Key::OutsideWindow,
        format!(
            "node {node}'s drain, estimated at {} {from}, would end {}, after its maintenance \
             window closes {}: it does not start in this window",
            crate::config::format_duration(estimate.drain),
            local(ends, zone),
            local(closes, zone)
        ),
    ))
}

/// `ts` in `zone` for people: `Sat 2026-12-05 22:30 CET (Europe/Berlin)`.
fn local(ts: Timestamp, zone: &TimeZone) -> String {
    let zoned = ts.to_zoned(zone.clone());
    let text = zoned.strftime("%a %Y-%m-%d %H:%M %Z").to_string();
    match zone.iana_name() {
        Some(name) if !text.ends_with(name) => format!("{text} ({name})"),
        _ => text,
    }
}

/// The zone's name for people.
fn zone_name(zone: &TimeZone) -> String {
    zone.iana_name().unwrap_or("the local zone").to_string()
}
