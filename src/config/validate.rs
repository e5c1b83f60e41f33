//! The one pure function from the raw file to `Settings`: applies every default and the checks
//! that span several keys (a rule's action with its order, a rule that would match every pod,
//! the host name standing in for `node_name`). Single values were checked as they were read.

use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::from_value::{Invalid, List, quote};
use super::raw::{
    RawConfig, RawDaemon, RawDrain, RawFilters, RawFleet, RawRule, RawShutdown, RawTaint,
};
use super::selector::Selector;
use super::values::{ActionName, DurationIn, Flag, NodeName};
use super::{
    ConfigError, DEFAULT_BOOT_ID_PATH, DEFAULT_KUBECONFIG, DEFAULT_KUBELET_CONFIG,
    DEFAULT_KUBELET_CONFIG_DIR, DEFAULT_REQUEST_TIMEOUT, DEFAULT_STATE_DIR, DEFAULT_TAINT_KEY,
    DaemonSetPolicy, DaemonSettings, DrainSettings, FilterSettings, FleetSettings, MetricsSettings,
    OnDeadline, Policy, RestoreSettings, Rule, RuleAction, Settings, ShutdownSettings, Source,
    TaintEffect, TaintSettings,
};

/// Turns the raw file into settings. Pure: the host name is passed in (`Err(reason)` when it
/// could not be read), so this can be table-tested without touching the machine.
pub fn settings(
    raw: RawConfig,
    src: &Source<'_>,
    hostname: Result<&str, &str>,
) -> Result<Settings, ConfigError> {
    let node_name = match raw.node_name {
        Some(NodeName(n)) => n,
        None => node_name_from_host(src, hostname)?,
    };
    let rules = raw
        .rules
        .0
        .iter()
        .enumerate()
        .map(|(i, r)| rule(src, i, r))
        .collect::<Result<Vec<_>, _>>()?;
    let drain = drain(raw.drain);
    let daemon = daemon(raw.daemon, &drain);
    let fleet = fleet(raw.fleet, src)?;
    let fleetlock = super::fleetlock::settings(raw.fleetlock, src)?;
    let reboot = super::reboot::settings(raw.reboot, fleetlock.is_some(), src)?;
    Ok(Settings {
        source: Some(src.path.to_path_buf()),
        kubeconfig: raw
            .kubeconfig
            .map_or_else(|| PathBuf::from(DEFAULT_KUBECONFIG), |p| p.0),
        node_name,
        state_dir: raw
            .state_dir
            .map_or_else(|| PathBuf::from(DEFAULT_STATE_DIR), |p| p.0),
        request_timeout: raw
            .request_timeout
            .map_or(DEFAULT_REQUEST_TIMEOUT, |DurationIn(d)| d),
        boot_id_path: PathBuf::from(DEFAULT_BOOT_ID_PATH),
        schedule_dir: PathBuf::from(super::SCHEDULE_DIR),
        gate_pass: super::DEFAULT_GATE_PASS,
        landing_window: super::DEFAULT_LANDING_WINDOW,
        taint: taint(raw.taint),
        filters: filters(raw.filters),
        rules,
        drain,
        daemon,
        metrics: MetricsSettings {
            textfile: raw.metrics.textfile.and_then(|t| t.0),
        },
        shutdown: shutdown(raw.shutdown),
        fleet,
        reboot,
        fleetlock,
        lifecycle_conditions: raw.node.lifecycle_conditions.is_some_and(|f| f.0),
        hooks: super::hooks::settings(&raw.hook, src)?,
        restore: RestoreSettings {
            wait_for_pods: raw.restore.wait_for_pods.map(|s| s.0),
            wait_for_conditions: raw
                .restore
                .wait_for_conditions
                .map(|List(c)| c)
                .unwrap_or_default(),
        },
    })
}

/// A flag as set, else its default.
fn flag(f: Option<Flag>, default: bool) -> bool {
    f.map_or(default, |Flag(b)| b)
}

/// `[taint]` with its defaults: on, our key, value "true" (an empty value: none),
/// PreferNoSchedule.
fn taint(t: RawTaint) -> TaintSettings {
    TaintSettings {
        enabled: flag(t.enabled, true),
        key: t.key.map_or_else(|| DEFAULT_TAINT_KEY.to_string(), |k| k.0),
        value: match t.value {
            None => Some("true".to_string()),
            Some(v) => Some(v.0).filter(|v| !v.is_empty()),
        },
        effect: t.effect.unwrap_or(TaintEffect::PreferNoSchedule),
    }
}

/// `[filters]` with their defaults.
fn filters(f: RawFilters) -> FilterSettings {
    FilterSettings {
        skip_tolerating_cordon: flag(f.skip_tolerating_cordon, true),
        skip_selector: f.skip_selector.map(|s| s.0),
        skip_namespaces: f
            .skip_namespaces
            .map(|n| n.0)
            .unwrap_or_default()
            .into_iter()
            .collect(),
        honour_capi_drain_label: flag(f.honour_capi_drain_label, true),
        emptydir: f.emptydir.unwrap_or(Policy::Evict),
        unreplicated: f.unreplicated.unwrap_or(Policy::Evict),
        completed: f.completed.unwrap_or(Policy::Skip),
    }
}

/// `[drain]` with its defaults.
fn drain(d: RawDrain) -> DrainSettings {
    DrainSettings {
        concurrency: d.concurrency.map_or(10, |c| c.0),
        grace_period: d.grace_period.map(|g| g.0),
        retry_interval: d
            .retry_interval
            .map_or(Duration::from_secs(5), |DurationIn(d)| d),
        timeout: d
            .timeout
            .map_or(Duration::from_secs(120), |DurationIn(d)| d),
        on_deadline: d.on_deadline.unwrap_or(OnDeadline::Report),
        exclude_from_load_balancers: flag(d.exclude_from_load_balancers, true),
        wait_for_detach: flag(d.wait_for_detach, true),
        fit_grace_to_deadline: flag(d.fit_grace_to_deadline, true),
        daemonsets: d.daemonsets.unwrap_or(DaemonSetPolicy::Leave),
    }
}

/// `[daemon]` with its defaults; a scheduled drain starts `drain`'s timeout ahead unless
/// `scheduled_lead` says otherwise.
fn daemon(d: RawDaemon, drain: &DrainSettings) -> DaemonSettings {
    DaemonSettings {
        release_margin: d
            .release_margin
            .map_or(Duration::from_secs(5), |DurationIn(d)| d),
        restore_ready_timeout: d
            .restore_ready_timeout
            .map_or(Duration::from_secs(600), |DurationIn(d)| d),
        kubelet_config: d
            .kubelet_config
            .map_or_else(|| PathBuf::from(DEFAULT_KUBELET_CONFIG), |p| p.0),
        kubelet_config_dir: d
            .kubelet_config_dir
            .map_or_else(|| PathBuf::from(DEFAULT_KUBELET_CONFIG_DIR), |p| p.0),
        drain_when_scheduled: flag(d.drain_when_scheduled, true),
        scheduled_lead: d.scheduled_lead.map_or(drain.timeout, |DurationIn(d)| d),
        forecast_interval: d.forecast_interval.and_then(|i| i.0),
    }
}

/// `[shutdown]`: each kind as set, else [`ShutdownSettings::default`]'s.
fn shutdown(s: RawShutdown) -> ShutdownSettings {
    let d = ShutdownSettings::default();
    ShutdownSettings {
        reboot: s.reboot.unwrap_or(d.reboot),
        poweroff: s.poweroff.unwrap_or(d.poweroff),
        halt: s.halt.unwrap_or(d.halt),
        kexec: s.kexec.unwrap_or(d.kexec),
        soft_reboot: s.soft_reboot.unwrap_or(d.soft_reboot),
        unknown: s.unknown.unwrap_or(d.unknown),
    }
}

/// `[fleet]` with [`FleetSettings::default`]'s values; a gate without slots is an error (the
/// gate follows the slots).
fn fleet(f: RawFleet, src: &Source<'_>) -> Result<FleetSettings, ConfigError> {
    let d = FleetSettings::default();
    let slots = f.slots.map_or(d.slots, |n| n.0);
    let gate = match f.gate {
        Some(g) if g.get_ref().0 && slots == 0 => {
            return Err(src.invalid(
                g.span(),
                "fleet.gate",
                Invalid::new(
                    "the reboot gate follows the drain slots, and there are none",
                    "`slots = N` (N > 0) in [fleet] together with `gate = true`",
                ),
            ));
        }
        Some(g) => g.get_ref().0,
        None => d.gate,
    };
    let hold_max = f.hold_max.map_or(d.hold_max, |DurationIn(h)| h);
    let release_delay = match f.release_delay {
        Some(r) if slots == 0 && !r.get_ref().0.is_zero() => {
            return Err(src.invalid(
                r.span(),
                "fleet.release_delay",
                Invalid::new(
                    "it keeps a drain slot after the restore, and there are none",
                    "`slots = N` (N > 0) in [fleet] together with it",
                ),
            ));
        }
        Some(r) if r.get_ref().0 >= hold_max => {
            return Err(src.invalid(
                r.span(),
                "fleet.release_delay",
                Invalid::new(
                    format!(
                        "a slot kept {} s after the restore would be free to others by then \
                         (hold_max is {} s)",
                        r.get_ref().0.as_secs(),
                        hold_max.as_secs()
                    ),
                    "a delay shorter than `hold_max`",
                ),
            ));
        }
        Some(r) => r.get_ref().0,
        None => d.release_delay,
    };
    let settle_max = settle_max(src, f.settle_max, hold_max, release_delay)?;
    Ok(FleetSettings {
        slots,
        gate,
        hold_max,
        release_delay,
        settle_max,
        lease_namespace: f.lease_namespace.map_or(d.lease_namespace, |n| n.0),
        group_label: f.group_label.map(|k| k.0),
        on_no_slot: f.on_no_slot.unwrap_or(d.on_no_slot),
        max_unready: f.max_unready,
        alerts: super::gates::alerts(f.alerts, src)?,
        hook_timeout: f.hook_timeout.map_or(d.hook_timeout, |DurationIn(t)| t),
    })
}

/// `[fleet] settle_max`: zero, or between `release_delay` (the floor) and `hold_max` (a slot
/// kept that long reads as stale to the others). Unset: the default, at most half `hold_max`.
fn settle_max(
    src: &Source<'_>,
    set: Option<Spanned<super::values::Delay>>,
    hold_max: Duration,
    release_delay: Duration,
) -> Result<Duration, ConfigError> {
    let Some(s) = set else {
        return Ok(crate::config::DEFAULT_SETTLE_MAX
            .min(hold_max / 2)
            .max(release_delay));
    };
    let max = s.get_ref().0;
    let invalid = |problem: String, fix: &str| {
        Err(src.invalid(s.span(), "fleet.settle_max", Invalid::new(problem, fix)))
    };
    if max.is_zero() {
        return Ok(max);
    }
    // Without slots there is no slot to keep: the ceiling is checked, and bounds nothing.
    if max >= hold_max || max < release_delay {
        return invalid(
            format!(
                "{} s is not between release_delay ({} s, the floor) and hold_max ({} s: a slot \
                 kept that long is free to others)",
                max.as_secs(),
                release_delay.as_secs(),
                hold_max.as_secs()
            ),
            "a ceiling at least `release_delay` and shorter than `hold_max`, or \"0s\" to give \
             the slot back without waiting for the budgets",
        );
    }
    Ok(max)
}

/// The kubelet registers the node under the lower-cased host name by default; that name must
/// pass the same check as `node_name`, as it ends up in the same request paths.
fn node_name_from_host(
    src: &Source<'_>,
    hostname: Result<&str, &str>,
) -> Result<String, ConfigError> {
    let path = src.path.to_path_buf();
    let host = hostname.map_err(|reason| ConfigError::NoNodeName {
        path: path.clone(),
        reason: reason.to_string(),
    })?;
    match NodeName::parse(&host.to_lowercase()) {
        Ok(NodeName(n)) => Ok(n),
        Err(_) => Err(ConfigError::HostName {
            path,
            problem: Invalid::new(
                format!("the host name {} is not a node name", quote(host)),
                format!("set `node_name` (or --node) to {}", NodeName::ALLOWED),
            ),
        }),
    }
}

/// One `[[rules]]` entry, `rules[i]`.
fn rule(src: &Source<'_>, i: usize, spanned: &Spanned<RawRule>) -> Result<Rule, ConfigError> {
    let r = spanned.get_ref();
    let key = |k: &str| format!("rules[{i}].{k}");
    let Some(action_name) = &r.action else {
        return Err(src.invalid(
            spanned.span(),
            &key("action"),
            Invalid::new(
                "a rule needs an action",
                "action = one of \"drain\", \"skip\", \"wait-completed\"",
            ),
        ));
    };
    if let Some(ns) = &r.namespaces
        && ns.get_ref().0.is_empty()
    {
        return Err(src.invalid(
            ns.span(),
            &key("namespaces"),
            Invalid::new(
                "an empty list would mean every namespace",
                "a non-empty list of namespaces (leave the key out for every namespace)",
            ),
        ));
    }
    let action = match (*action_name.get_ref(), &r.order) {
        (ActionName::Drain, order) => RuleAction::Drain {
            order: order.as_ref().map_or(0, |o| o.get_ref().0),
        },
        (ActionName::Skip, None) => RuleAction::Skip,
        (ActionName::WaitCompleted, None) => RuleAction::WaitCompleted,
        (_, Some(order)) => {
            return Err(src.invalid(
                order.span(),
                &key("order"),
                Invalid::new(
                    "an order only applies to action = \"drain\"",
                    "`order` together with action = \"drain\"",
                ),
            ));
        }
    };
    if r.selector.is_none() && r.namespaces.is_none() {
        return Err(src.invalid(
            action_name.span(),
            &key("selector"),
            Invalid::new(
                "a rule needs a selector or namespaces, or it would match every pod",
                "`selector = \"...\"` and/or `namespaces = [...]`",
            ),
        ));
    }
    Ok(Rule {
        selector: r
            .selector
            .as_ref()
            .map_or_else(Selector::everything, |s| s.get_ref().0.clone()),
        namespaces: r
            .namespaces
            .as_ref()
            .map(|n| n.get_ref().0.clone())
            .unwrap_or_default(),
        action,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{ConfigError, Source, from_toml};

    #[test]
    fn missing_host_name_is_an_error_only_without_node_name() {
        let src = Source {
            path: Path::new("/c.toml"),
            text: "",
        };
        let err = from_toml(&src, Err("no uts")).unwrap_err();
        assert!(
            err.to_string().contains("/c.toml") && err.to_string().contains("no uts"),
            "{err}"
        );
        let src = Source {
            path: Path::new("/c.toml"),
            text: "node_name = \"n1\"",
        };
        assert_eq!(from_toml(&src, Err("no uts")).unwrap().node_name, "n1");
    }

    /// Without `node_name`, the host name becomes the node name only if it passes the same check;
    /// otherwise it is a configuration error naming the file, the host name and what to set, and
    /// never a name pasted into a request path.
    #[test]
    fn a_host_name_stands_in_for_node_name_only_if_it_is_a_node_name() {
        let src = Source {
            path: Path::new("/c.toml"),
            text: "",
        };
        assert_eq!(
            from_toml(&src, Ok("Worker-1.Example")).unwrap().node_name,
            "worker-1.example"
        );
        for host in ["node-1/status", "x?y=1", "node_1", "a..b", "n%2F"] {
            let err = from_toml(&src, Ok(host)).unwrap_err();
            assert!(matches!(err, ConfigError::HostName { .. }), "{host}: {err}");
            assert_eq!(
                err.to_string(),
                format!(
                    "/c.toml: key `node_name` is not set and the host name {host:?} is not a node \
                     name; allowed: set `node_name` (or --node) to a lower-case DNS subdomain, e.g. \
                     \"worker-1\""
                )
            );
            // A valid node_name makes the host name irrelevant.
            let set = Source {
                path: Path::new("/c.toml"),
                text: "node_name = \"n1\"",
            };
            assert_eq!(from_toml(&set, Ok(host)).unwrap().node_name, "n1");
        }
    }
}
