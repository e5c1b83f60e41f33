//! The raw shape of the config file: serde structs that mirror the TOML exactly
//! (`deny_unknown_fields`), every leaf a checked newtype from `values`. An absent key stays
//! `None`; its default (stated on each field) is applied in `validate`, so "absent" and "given"
//! stay distinguishable and every default is applied in one place.

use std::fmt;

use serde::Deserialize;
use toml::Spanned;

use super::from_value::List;
use super::table::{Table, table};
use super::values::{
    AbsolutePath, ActionName, Concurrency, Delay, Flag, GracePeriod, Interval, LabelKey, Namespace,
    Namespaces, NodeCondition, NodeName, Order, PodSelector, Positive, ReleaseMargin,
    RetryInterval, Slots, TaintKey, TaintValue, TextfilePath,
};
use super::{DaemonSetPolicy, OnDeadline, OnNoSlot, Policy, ShutdownPolicy, TaintEffect};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "the file to be a table of the keys documented in config.example.toml"
)]
pub struct RawConfig {
    /// The kubeconfig. Default: [`super::DEFAULT_KUBECONFIG`].
    pub kubeconfig: Option<AbsolutePath>,
    /// The Node to drain. Default: the host name, lower-cased, checked like this key.
    pub node_name: Option<NodeName>,
    /// Where the last report is written. Default: [`super::DEFAULT_STATE_DIR`].
    pub state_dir: Option<AbsolutePath>,
    /// The timeout of every API request. Default: [`super::DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Option<Positive>,
    #[serde(default, deserialize_with = "table")]
    pub taint: RawTaint,
    #[serde(default, deserialize_with = "table")]
    pub filters: RawFilters,
    /// Default: no rules.
    #[serde(default)]
    pub rules: RawRules,
    #[serde(default, deserialize_with = "table")]
    pub drain: RawDrain,
    #[serde(default, deserialize_with = "table")]
    pub daemon: RawDaemon,
    #[serde(default, deserialize_with = "table")]
    pub metrics: RawMetrics,
    #[serde(default, deserialize_with = "table")]
    pub shutdown: RawShutdown,
    #[serde(default, deserialize_with = "table")]
    pub restore: RawRestore,
    #[serde(default, deserialize_with = "table")]
    pub fleet: RawFleet,
    #[serde(default, deserialize_with = "table")]
    pub reboot: super::reboot::RawReboot,
    #[serde(default, deserialize_with = "table")]
    pub fleetlock: super::fleetlock::RawFleetLock,
    #[serde(default, deserialize_with = "table")]
    pub node: RawNode,
    /// Default: no hook.
    #[serde(default)]
    pub hook: Vec<Spanned<super::hooks::HookEntry>>,
}

/// `[node]`: what the daemon says on its Node besides its marker.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    /// Default: false.
    pub lifecycle_conditions: Option<Flag>,
}

impl Table for RawNode {
    const EXPECTING: &'static str = "`node` to be a [node] table (key lifecycle_conditions)";
}

/// `[taint]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTaint {
    /// Default: true.
    pub enabled: Option<Flag>,
    /// Default: [`super::DEFAULT_TAINT_KEY`].
    pub key: Option<TaintKey>,
    /// Default: "true"; "" means no value.
    pub value: Option<TaintValue>,
    /// Default: PreferNoSchedule.
    pub effect: Option<TaintEffect>,
}

/// `[filters]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilters {
    /// Default: true.
    pub skip_tolerating_cordon: Option<Flag>,
    /// Default: none.
    pub skip_selector: Option<PodSelector>,
    /// Default: none (an empty list skips nothing, so it is allowed here).
    pub skip_namespaces: Option<Namespaces>,
    /// Default: true.
    pub honour_capi_drain_label: Option<Flag>,
    /// Default: evict.
    pub emptydir: Option<Policy>,
    /// Default: evict.
    pub unreplicated: Option<Policy>,
    /// Default: skip.
    pub completed: Option<Policy>,
}

/// One `[[rules]]` entry. Spans are kept for the checks that span several keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// Default: every pod (but a rule needs a selector or namespaces).
    pub selector: Option<Spanned<PodSelector>>,
    /// Default: every namespace; an empty list is refused, as it would mean the same.
    pub namespaces: Option<Spanned<Namespaces>>,
    /// Required.
    pub action: Option<Spanned<ActionName>>,
    /// Only with action = "drain". Default: 0.
    pub order: Option<Spanned<Order>>,
}

/// The `[[rules]]` array; its own type only so a wrong shape names the key `rules`, and so each
/// entry must be a table ([`table`]).
#[derive(Debug, Default)]
pub struct RawRules(pub Vec<Spanned<RawRule>>);

impl<'de> Deserialize<'de> for RawRules {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rules;
        impl<'de> serde::de::Visitor<'de> for Rules {
            type Value = RawRules;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`rules` to be an array of [[rules]] tables")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RawRules, A::Error> {
                let mut rules = Vec::new();
                while let Some(rule) = seq.next_element::<Spanned<Entry>>()? {
                    let span = rule.span();
                    rules.push(Spanned::new(span, rule.into_inner().0));
                }
                Ok(RawRules(rules))
            }
        }
        d.deserialize_seq(Rules)
    }
}

/// `[drain]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDrain {
    /// Default: 10.
    pub concurrency: Option<Concurrency>,
    /// Default: each pod's own grace period.
    pub grace_period: Option<GracePeriod>,
    /// Default: 5s.
    pub retry_interval: Option<RetryInterval>,
    /// Default: 120s.
    pub timeout: Option<Positive>,
    /// Default: report.
    pub on_deadline: Option<OnDeadline>,
    /// Default: true.
    pub exclude_from_load_balancers: Option<Flag>,
    /// Default: true.
    pub wait_for_detach: Option<Flag>,
    /// Default: true.
    pub fit_grace_to_deadline: Option<Flag>,
    /// Default: leave.
    pub daemonsets: Option<DaemonSetPolicy>,
}

/// `[daemon]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDaemon {
    /// Default: 5s.
    pub release_margin: Option<ReleaseMargin>,
    /// Default: 10m.
    pub restore_ready_timeout: Option<Positive>,
    /// Default: [`super::DEFAULT_KUBELET_CONFIG`].
    pub kubelet_config: Option<AbsolutePath>,
    /// Default: [`super::DEFAULT_KUBELET_CONFIG_DIR`].
    pub kubelet_config_dir: Option<AbsolutePath>,
    /// Default: true.
    pub drain_when_scheduled: Option<Flag>,
    /// Default: `[drain] timeout`.
    pub scheduled_lead: Option<Positive>,
    /// Default: "off".
    pub forecast_interval: Option<Interval>,
}

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// Default: "" (off).
    pub textfile: Option<TextfilePath>,
}

/// `[restore]`: what the boot restore waits for after the kubelet's fresh heartbeat.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRestore {
    /// Default: none.
    pub wait_for_pods: Option<PodSelector>,
    /// Default: none.
    pub wait_for_conditions: Option<List<NodeCondition>>,
}

/// `[fleet]`: drain slots.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleet {
    /// Default: 0 (off).
    pub slots: Option<Slots>,
    /// Default: [`super::DEFAULT_LEASE_NAMESPACE`].
    pub lease_namespace: Option<Namespace>,
    /// Default: none (one group).
    pub group_label: Option<LabelKey>,
    /// Default: [`super::DEFAULT_HOLD_MAX`].
    pub hold_max: Option<Positive>,
    /// Default: 0 (none). Shorter than `hold_max`.
    pub release_delay: Option<Spanned<Delay>>,
    /// Default: [`super::DEFAULT_SETTLE_MAX`], at most half of `hold_max`; 0: not waited for.
    pub settle_max: Option<Spanned<Delay>>,
    /// Default: cordon.
    pub on_no_slot: Option<OnNoSlot>,
    /// Default: false. Needs `slots`.
    pub gate: Option<Spanned<Flag>>,
    /// Default: none (not judged).
    pub max_unready: Option<super::gates::MaxUnready>,
    /// `[fleet.alerts]`. Default: none (no alerts asked).
    #[serde(default)]
    pub alerts: Option<Spanned<super::gates::AlertsEntry>>,
    /// Default: [`super::DEFAULT_HOOK_WAIT`].
    pub hook_timeout: Option<Positive>,
}

/// `[shutdown]`: every key defaults to "drain".
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShutdown {
    pub reboot: Option<ShutdownPolicy>,
    pub poweroff: Option<ShutdownPolicy>,
    pub halt: Option<ShutdownPolicy>,
    pub kexec: Option<ShutdownPolicy>,
    pub soft_reboot: Option<ShutdownPolicy>,
    pub unknown: Option<ShutdownPolicy>,
}

/// One `[[rules]]` entry, read through [`table`].
struct Entry(RawRule);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        table(d).map(Entry)
    }
}

impl Table for RawTaint {
    const EXPECTING: &'static str =
        "`taint` to be a [taint] table (keys enabled, key, value, effect)";
}

impl Table for RawFilters {
    const EXPECTING: &'static str = "`filters` to be a [filters] table (keys skip_tolerating_cordon, skip_selector, \
         skip_namespaces, honour_capi_drain_label, emptydir, unreplicated, completed)";
}

impl Table for RawRule {
    const EXPECTING: &'static str =
        "each `rules` entry to be a [[rules]] table (keys selector, namespaces, action, order)";
}

impl Table for RawDrain {
    const EXPECTING: &'static str = "`drain` to be a [drain] table (keys concurrency, grace_period, retry_interval, \
         timeout, on_deadline, exclude_from_load_balancers, wait_for_detach, \
         fit_grace_to_deadline, daemonsets)";
}

impl Table for RawDaemon {
    const EXPECTING: &'static str = "`daemon` to be a [daemon] table (keys release_margin, restore_ready_timeout, \
         kubelet_config, kubelet_config_dir, drain_when_scheduled, scheduled_lead, \
         forecast_interval)";
}

impl Table for RawMetrics {
    const EXPECTING: &'static str = "`metrics` to be a [metrics] table (key textfile)";
}

impl Table for RawRestore {
    const EXPECTING: &'static str =
        "`restore` to be a [restore] table (keys wait_for_pods, wait_for_conditions)";
}

impl Table for RawFleet {
    const EXPECTING: &'static str = "`fleet` to be a [fleet] table (keys slots, lease_namespace, group_label, \
         hold_max, release_delay, settle_max, on_no_slot, gate, hook_timeout, max_unready, alerts)";
}

impl Table for RawShutdown {
    const EXPECTING: &'static str = "`shutdown` to be a [shutdown] table (keys reboot, poweroff, halt, kexec, \
         soft_reboot, unknown)";
}
