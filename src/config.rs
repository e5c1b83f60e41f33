//! Configuration: the raw TOML shape, one pure function that validates it, and the typed `Settings`.
//!
//! Every key, its default and the reason for the default are documented in `config.example.toml`
//! at the top of the repository; `tests/config_example.rs` parses that file so the two cannot drift.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::selector::{Selector, SelectorError};

/// Where the configuration is read from when neither `--config` nor the environment names a file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/kube-shutdown-drain/config.toml";
/// The environment variable that overrides [`DEFAULT_CONFIG_PATH`].
pub const CONFIG_ENV: &str = "KUBE_SHUTDOWN_DRAIN_CONFIG";
/// The kubeconfig used when the file does not name one: a dedicated identity, so the taint works.
pub const DEFAULT_KUBECONFIG: &str = "/etc/kube-shutdown-drain/kubeconfig";
/// The state directory (last report); the deb/rpm create it.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/kube-shutdown-drain";
/// The kernel's boot ID: a new random UUID every boot.
pub const DEFAULT_BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// The taint key we own. Nothing else ever writes it.
pub const DEFAULT_TAINT_KEY: &str = "kube-shutdown-drain/shutdown";

/// The smallest `daemon.release_margin`: the daemon lets a drain overrun its deadline by up to
/// 500 ms (its overrun guard) before it drops it, so a margin must cover that with room to spare.
pub const MIN_RELEASE_MARGIN: Duration = Duration::from_secs(1);
/// The smallest `drain.retry_interval`: a refused eviction (403, 500) is retried at most ten
/// times a second per pod, so a typo like "1ms" cannot flood the API server.
pub const MIN_RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// The bounds of `drain.grace_period`: whole seconds (the API's `gracePeriodSeconds`), at least
/// 1 s because 0 s means an immediate force deletion, at most a day.
pub const MIN_GRACE_PERIOD: Duration = Duration::from_secs(1);
pub const MAX_GRACE_PERIOD: Duration = Duration::from_secs(24 * 3600);
/// The largest value any duration key accepts; nothing in a shutdown path waits a week.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A duration written as `500ms`, `90s`, `2m` or `1h`.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let ms = match unit {
        "ms" => n,
        "s" => n.checked_mul(1_000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// Renders a duration in the same syntax [`parse_duration`] accepts.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

// ---------------------------------------------------------------------------------------------
// Raw shape: exactly what the TOML may contain. Defaults live in `validate`, not here, so that
// "absent" and "given" stay distinguishable and every default is in one place.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    kubeconfig: Option<Spanned<String>>,
    node_name: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    request_timeout: Option<Spanned<String>>,
    #[serde(default)]
    taint: RawTaint,
    #[serde(default)]
    filters: RawFilters,
    #[serde(default)]
    rules: Vec<RawRule>,
    #[serde(default)]
    drain: RawDrain,
    #[serde(default)]
    daemon: RawDaemon,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTaint {
    enabled: Option<bool>,
    key: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
    effect: Option<TaintEffect>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilters {
    skip_tolerating_cordon: Option<bool>,
    skip_selector: Option<Spanned<String>>,
    skip_namespaces: Option<Vec<Spanned<String>>>,
    honour_capi_drain_label: Option<bool>,
    emptydir: Option<Policy>,
    unreplicated: Option<Policy>,
    completed: Option<Policy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    selector: Option<Spanned<String>>,
    namespaces: Option<Spanned<Vec<Spanned<String>>>>,
    action: Spanned<RuleActionName>,
    order: Option<Spanned<i32>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDrain {
    concurrency: Option<Spanned<i64>>,
    grace_period: Option<Spanned<String>>,
    retry_interval: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    on_deadline: Option<OnDeadline>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    release_margin: Option<Spanned<String>>,
    restore_ready_timeout: Option<Spanned<String>>,
}

// ---------------------------------------------------------------------------------------------
// Typed settings.

/// The effect of our own taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum TaintEffect {
    /// The scheduler avoids the node but may still use it (kured's choice; safe while cordoned).
    PreferNoSchedule,
    /// New pods that do not tolerate it are not scheduled.
    NoSchedule,
    /// Running pods that do not tolerate it are evicted by the taint manager, ignoring budgets.
    NoExecute,
}

impl TaintEffect {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// What to do with a class of pods (emptyDir, unreplicated, completed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Evict it like any other pod.
    Evict,
    /// Leave it alone.
    Skip,
}

/// What happens when the drain deadline is reached with pods left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnDeadline {
    /// Report the remaining pods and the budgets that blocked them, then stop.
    Report,
    /// Delete the remaining pods, ignoring their disruption budgets.
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum RuleActionName {
    Drain,
    Skip,
    WaitCompleted,
}

/// What a matching rule does with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    /// Evict it in the group `order` (lower orders finish first).
    Drain { order: i32 },
    /// Leave it alone.
    Skip,
    /// Do not evict it; the drain waits until it completes or goes.
    WaitCompleted,
}

/// One `[[rules]]` entry, in the spirit of Cluster API's MachineDrainRule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Pods whose labels match (an empty selector matches every pod).
    pub selector: Selector,
    /// Limits the rule to these namespaces; empty means every namespace.
    pub namespaces: Vec<String>,
    pub action: RuleAction,
}

/// The `[taint]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct TaintSettings {
    pub enabled: bool,
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
}

/// The `[filters]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterSettings {
    pub skip_tolerating_cordon: bool,
    pub skip_selector: Option<Selector>,
    pub skip_namespaces: BTreeSet<String>,
    pub honour_capi_drain_label: bool,
    pub emptydir: Policy,
    pub unreplicated: Policy,
    pub completed: Policy,
}

/// The `[drain]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainSettings {
    pub concurrency: usize,
    pub grace_period: Option<Duration>,
    pub retry_interval: Duration,
    pub timeout: Duration,
    pub on_deadline: OnDeadline,
}

/// The `[daemon]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSettings {
    pub release_margin: Duration,
    pub restore_ready_timeout: Duration,
}

/// Validated settings. Fields are public so tests and the CLI can override single values
/// (`--node`, `boot_id_path`) after loading.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The file these settings came from, if any.
    pub source: Option<PathBuf>,
    pub kubeconfig: PathBuf,
    pub node_name: String,
    pub state_dir: PathBuf,
    pub request_timeout: Duration,
    /// Not a TOML key: the kernel's boot ID file, replaceable in tests.
    pub boot_id_path: PathBuf,
    pub taint: TaintSettings,
    pub filters: FilterSettings,
    pub rules: Vec<Rule>,
    pub drain: DrainSettings,
    pub daemon: DaemonSettings,
}

/// A configuration that could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}:{line}:{column}: key `{key}`: {message}; allowed: {allowed}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        key: String,
        message: String,
        allowed: String,
    },
    #[error("{path}: key `node_name` is not set and the host name cannot be read: {reason}")]
    NoNodeName { path: PathBuf, reason: String },
}

/// The text of a config file and the name to show in errors.
pub struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

impl Source<'_> {
    /// 1-based line and column of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
        (line, column)
    }

    fn invalid(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        message: impl fmt::Display,
        allowed: &str,
    ) -> ConfigError {
        let (line, column) = self.position(span.start);
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            column,
            key: key.to_string(),
            message: message.to_string(),
            allowed: allowed.to_string(),
        }
    }

    fn duration(&self, value: &Spanned<String>, key: &str) -> Result<Duration, ConfigError> {
        parse_duration(value.get_ref()).ok_or_else(|| {
            self.invalid(
                value.span(),
                key,
                format!("{:?} is not a duration", value.get_ref()),
                "a whole number followed by ms, s, m or h, e.g. \"500ms\", \"90s\", \"2m\"",
            )
        })
    }

    fn positive_duration(
        &self,
        value: &Spanned<String>,
        key: &str,
    ) -> Result<Duration, ConfigError> {
        let d = self.duration(value, key)?;
        if d.is_zero() {
            return Err(self.invalid(
                value.span(),
                key,
                "must be longer than zero",
                "a duration above zero, e.g. \"90s\"",
            ));
        }
        Ok(d)
    }

    /// A duration of at least `min` and at most `max`.
    fn bounded_duration(
        &self,
        value: &Spanned<String>,
        key: &str,
        min: Duration,
        max: Duration,
    ) -> Result<Duration, ConfigError> {
        let d = self.duration(value, key)?;
        if d < min || d > max {
            return Err(self.invalid(
                value.span(),
                key,
                format!("{:?} is out of range", value.get_ref()),
                &format!(
                    "a duration from {} to {}",
                    format_duration(min),
                    format_duration(max)
                ),
            ));
        }
        Ok(d)
    }

    /// A label selector that selects something: an empty one would match every pod.
    /// A grace period: whole seconds within [`MIN_GRACE_PERIOD`]..=[`MAX_GRACE_PERIOD`].
    fn grace_period(&self, value: &Spanned<String>, key: &str) -> Result<Duration, ConfigError> {
        let d = self.bounded_duration(value, key, MIN_GRACE_PERIOD, MAX_GRACE_PERIOD)?;
        if d.subsec_nanos() != 0 {
            return Err(self.invalid(
                value.span(),
                key,
                format!("{:?} is not a whole number of seconds", value.get_ref()),
                "whole seconds from 1s to 24h, e.g. \"30s\" or \"2m\"",
            ));
        }
        Ok(d)
    }

    fn selector(&self, value: &Spanned<String>, key: &str) -> Result<Selector, ConfigError> {
        if value.get_ref().trim().is_empty() {
            return Err(self.invalid(
                value.span(),
                key,
                "an empty selector matches every pod",
                "a non-empty label selector such as \"app=web\" (leave the key out for none)",
            ));
        }
        Selector::parse(value.get_ref()).map_err(|e: SelectorError| {
            self.invalid(
                value.span(),
                key,
                e,
                "a label selector such as \"app=web,tier in (a,b),!canary\"",
            )
        })
    }

    fn namespaces(
        &self,
        values: &[Spanned<String>],
        key: &str,
    ) -> Result<Vec<String>, ConfigError> {
        values
            .iter()
            .map(|ns| {
                if is_dns_label(ns.get_ref()) {
                    Ok(ns.get_ref().clone())
                } else {
                    Err(self.invalid(
                        ns.span(),
                        key,
                        format!("{:?} is not a namespace name", ns.get_ref()),
                        "lower-case DNS labels (a-z, 0-9, '-'), at most 63 characters",
                    ))
                }
            })
            .collect()
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS subdomain (node names, label prefixes).
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A qualified name as used by label and taint keys: optional `prefix/` and a name of at most
/// 63 characters of alphanumerics, '-', '_', '.', starting and ending alphanumeric.
pub(crate) fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return false;
    }
    is_label_value(name) && !name.is_empty()
}

/// A label value: empty, or at most 63 alphanumerics, '-', '_', '.', alphanumeric at both ends.
pub(crate) fn is_label_value(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    let b = s.as_bytes();
    s.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Parses and validates a configuration text. Pure: the host name is passed in (`Err(reason)`
/// when it could not be read), so this can be table-tested without touching the machine.
pub fn from_toml(
    source: &Source<'_>,
    hostname: Result<&str, &str>,
) -> Result<Settings, ConfigError> {
    let raw: RawConfig = toml::from_str(source.text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| source.position(s.start));
        ConfigError::Syntax {
            path: source.path.to_path_buf(),
            line,
            column,
            message: e.message().to_string(),
        }
    })?;
    validate(raw, source, hostname)
}

fn validate(
    raw: RawConfig,
    src: &Source<'_>,
    hostname: Result<&str, &str>,
) -> Result<Settings, ConfigError> {
    let path_key = |v: &Option<Spanned<String>>, key: &str, default: &str| match v {
        None => Ok(PathBuf::from(default)),
        Some(p) if p.get_ref().starts_with('/') => Ok(PathBuf::from(p.get_ref())),
        Some(p) => Err(src.invalid(
            p.span(),
            key,
            format!("{:?} is not an absolute path", p.get_ref()),
            "an absolute path",
        )),
    };
    let kubeconfig = path_key(&raw.kubeconfig, "kubeconfig", DEFAULT_KUBECONFIG)?;
    let state_dir = path_key(&raw.state_dir, "state_dir", DEFAULT_STATE_DIR)?;

    let node_name = match &raw.node_name {
        Some(n) => {
            if !is_dns_subdomain(n.get_ref()) {
                return Err(src.invalid(
                    n.span(),
                    "node_name",
                    format!("{:?} is not a node name", n.get_ref()),
                    "a lower-case DNS subdomain, e.g. \"worker-1\"",
                ));
            }
            n.get_ref().clone()
        }
        // The kubelet registers the node under the lower-cased host name by default.
        None => match hostname {
            Ok(h) => h.to_lowercase(),
            Err(reason) => {
                return Err(ConfigError::NoNodeName {
                    path: src.path.to_path_buf(),
                    reason: reason.to_string(),
                });
            }
        },
    };

    let request_timeout = match &raw.request_timeout {
        Some(v) => src.positive_duration(v, "request_timeout")?,
        None => Duration::from_secs(10),
    };

    let taint_key = match &raw.taint.key {
        Some(k) if !is_qualified_name(k.get_ref()) => {
            return Err(src.invalid(
                k.span(),
                "taint.key",
                format!("{:?} is not a taint key", k.get_ref()),
                "a qualified name such as \"example.com/shutdown\"",
            ));
        }
        Some(k) => k.get_ref().clone(),
        None => DEFAULT_TAINT_KEY.to_string(),
    };
    let taint_value = match &raw.taint.value {
        Some(v) if !is_label_value(v.get_ref()) => {
            return Err(src.invalid(
                v.span(),
                "taint.value",
                format!("{:?} is not a taint value", v.get_ref()),
                "at most 63 characters of a-z, A-Z, 0-9, '-', '_', '.'",
            ));
        }
        Some(v) if v.get_ref().is_empty() => None,
        Some(v) => Some(v.get_ref().clone()),
        None => Some("true".to_string()),
    };
    let taint = TaintSettings {
        enabled: raw.taint.enabled.unwrap_or(true),
        key: taint_key,
        value: taint_value,
        effect: raw.taint.effect.unwrap_or(TaintEffect::PreferNoSchedule),
    };

    let f = &raw.filters;
    let filters = FilterSettings {
        skip_tolerating_cordon: f.skip_tolerating_cordon.unwrap_or(true),
        skip_selector: match &f.skip_selector {
            Some(s) => Some(src.selector(s, "filters.skip_selector")?),
            None => None,
        },
        skip_namespaces: src
            .namespaces(
                f.skip_namespaces.as_deref().unwrap_or_default(),
                "filters.skip_namespaces",
            )?
            .into_iter()
            .collect(),
        honour_capi_drain_label: f.honour_capi_drain_label.unwrap_or(true),
        emptydir: f.emptydir.unwrap_or(Policy::Evict),
        unreplicated: f.unreplicated.unwrap_or(Policy::Evict),
        completed: f.completed.unwrap_or(Policy::Skip),
    };

    let mut rules = Vec::with_capacity(raw.rules.len());
    for (i, r) in raw.rules.iter().enumerate() {
        let key = |k: &str| format!("rules[{i}].{k}");
        let selector = match &r.selector {
            Some(s) => src.selector(s, &key("selector"))?,
            None => Selector::everything(),
        };
        if let Some(ns) = &r.namespaces
            && ns.get_ref().is_empty()
        {
            return Err(src.invalid(
                ns.span(),
                &key("namespaces"),
                "an empty list would mean every namespace",
                "a non-empty list of namespaces (leave the key out for every namespace)",
            ));
        }
        let namespaces = src.namespaces(
            r.namespaces.as_ref().map_or(&[][..], |n| n.get_ref()),
            &key("namespaces"),
        )?;
        let action = match (r.action.get_ref(), &r.order) {
            (RuleActionName::Drain, order) => RuleAction::Drain {
                order: order.as_ref().map_or(0, |o| *o.get_ref()),
            },
            (RuleActionName::Skip, None) => RuleAction::Skip,
            (RuleActionName::WaitCompleted, None) => RuleAction::WaitCompleted,
            (_, Some(order)) => {
                return Err(src.invalid(
                    order.span(),
                    &key("order"),
                    "an order only applies to action = \"drain\"",
                    "`order` together with action = \"drain\"",
                ));
            }
        };
        if r.selector.is_none() && r.namespaces.is_none() {
            return Err(src.invalid(
                r.action.span(),
                &key("selector"),
                "a rule needs a selector or namespaces, or it would match every pod",
                "`selector = \"...\"` and/or `namespaces = [...]`",
            ));
        }
        rules.push(Rule {
            selector,
            namespaces,
            action,
        });
    }

    let d = &raw.drain;
    let concurrency = match &d.concurrency {
        None => 10,
        Some(c) if (1..=1000).contains(c.get_ref()) => *c.get_ref() as usize,
        Some(c) => {
            return Err(src.invalid(
                c.span(),
                "drain.concurrency",
                format!("{} is out of range", c.get_ref()),
                "an integer from 1 to 1000",
            ));
        }
    };
    let drain = DrainSettings {
        concurrency,
        grace_period: match &d.grace_period {
            Some(g) => Some(src.grace_period(g, "drain.grace_period")?),
            None => None,
        },
        retry_interval: match &d.retry_interval {
            Some(v) => {
                src.bounded_duration(v, "drain.retry_interval", MIN_RETRY_INTERVAL, MAX_DURATION)?
            }
            None => Duration::from_secs(5),
        },
        timeout: match &d.timeout {
            Some(v) => src.positive_duration(v, "drain.timeout")?,
            None => Duration::from_secs(120),
        },
        on_deadline: d.on_deadline.unwrap_or(OnDeadline::Report),
    };

    let daemon = DaemonSettings {
        release_margin: match &raw.daemon.release_margin {
            Some(v) => src.bounded_duration(
                v,
                "daemon.release_margin",
                MIN_RELEASE_MARGIN,
                MAX_DURATION,
            )?,
            None => Duration::from_secs(5),
        },
        restore_ready_timeout: match &raw.daemon.restore_ready_timeout {
            Some(v) => src.positive_duration(v, "daemon.restore_ready_timeout")?,
            None => Duration::from_secs(600),
        },
    };

    Ok(Settings {
        source: Some(src.path.to_path_buf()),
        kubeconfig,
        node_name,
        state_dir,
        request_timeout,
        boot_id_path: PathBuf::from(DEFAULT_BOOT_ID_PATH),
        taint,
        filters,
        rules,
        drain,
        daemon,
    })
}

/// The machine's host name, as the kubelet would register it (before lower-casing).
pub fn hostname() -> Result<String, String> {
    nix::unistd::gethostname()
        .map_err(|e| e.to_string())?
        .into_string()
        .map_err(|_| "the host name is not valid UTF-8".to_string())
}

impl Settings {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Settings::from_str_at(path, &text)
    }

    /// Validates a configuration text as if it had been read from `path`.
    pub fn from_str_at(path: &Path, text: &str) -> Result<Settings, ConfigError> {
        let host = hostname();
        from_toml(
            &Source { path, text },
            host.as_deref().map_err(String::as_str),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, ConfigError> {
        from_toml(
            &Source {
                path: Path::new("/etc/x.toml"),
                text,
            },
            Ok("Worker-1"),
        )
    }

    #[test]
    fn durations() {
        for (text, ms) in [
            ("500ms", 500),
            ("90s", 90_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("0s", 0),
        ] {
            assert_eq!(
                parse_duration(text),
                Some(Duration::from_millis(ms)),
                "{text}"
            );
            assert_eq!(
                parse_duration(&format_duration(Duration::from_millis(ms))),
                Some(Duration::from_millis(ms))
            );
        }
        for bad in [
            "",
            "90",
            "s",
            "1.5s",
            "-1s",
            "10 d",
            "5sec",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let s = parse("").unwrap();
        assert_eq!(s.node_name, "worker-1");
        assert_eq!(s.kubeconfig, PathBuf::from(DEFAULT_KUBECONFIG));
        assert_eq!(s.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(s.request_timeout, Duration::from_secs(10));
        assert_eq!(s.taint.effect, TaintEffect::PreferNoSchedule);
        assert!(s.taint.enabled);
        assert_eq!(s.taint.key, DEFAULT_TAINT_KEY);
        assert!(s.filters.skip_tolerating_cordon && s.filters.honour_capi_drain_label);
        assert_eq!(s.filters.emptydir, Policy::Evict);
        assert_eq!(s.filters.unreplicated, Policy::Evict);
        assert_eq!(s.filters.completed, Policy::Skip);
        assert_eq!(s.drain.timeout, Duration::from_secs(120));
        assert_eq!(s.drain.retry_interval, Duration::from_secs(5));
        assert_eq!(s.drain.concurrency, 10);
        assert_eq!(s.drain.on_deadline, OnDeadline::Report);
        assert_eq!(s.daemon.release_margin, Duration::from_secs(5));
        assert_eq!(s.daemon.restore_ready_timeout, Duration::from_secs(600));
    }

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

    #[test]
    fn rules_parse() {
        let s = parse(
            r#"
[[rules]]
selector = "app=db"
namespaces = ["prod"]
action = "drain"
order = 10
[[rules]]
selector = "app=batch"
action = "wait-completed"
[[rules]]
namespaces = ["monitoring"]
action = "skip"
"#,
        )
        .unwrap();
        assert_eq!(s.rules.len(), 3);
        assert_eq!(s.rules[0].action, RuleAction::Drain { order: 10 });
        assert_eq!(s.rules[0].namespaces, vec!["prod".to_string()]);
        assert_eq!(s.rules[1].action, RuleAction::WaitCompleted);
        assert_eq!(s.rules[2].action, RuleAction::Skip);
        assert_eq!(s.rules[2].selector, Selector::everything());
    }

    /// Every bad-config case: the error names the file, the line and column, the key and what is
    /// allowed.
    #[test]
    fn bad_values_name_file_line_column_key_and_allowed() {
        let cases: &[(&str, &str, usize, usize, &[&str])] = &[
            (
                "unknown key",
                "nonsense = 1",
                1,
                1,
                &["unknown field `nonsense`", "kubeconfig"],
            ),
            (
                "unknown key in table",
                "[drain]\ntimout = \"5s\"",
                2,
                1,
                &["unknown field `timout`", "timeout"],
            ),
            (
                "unknown table",
                "[drian]\n",
                1,
                2,
                &["unknown field `drian`", "drain"],
            ),
            (
                "bad duration",
                "[drain]\ntimeout = \"5 minutes\"",
                2,
                11,
                &["drain.timeout", "\"5 minutes\"", "ms, s, m or h"],
            ),
            (
                "zero timeout",
                "[drain]\ntimeout = \"0s\"",
                2,
                11,
                &["drain.timeout", "above zero"],
            ),
            ("wrong type", "[drain]\ntimeout = 90", 2, 11, &["string"]),
            (
                "bad effect",
                "[taint]\neffect = \"Sometimes\"",
                2,
                10,
                &["unknown variant `Sometimes`", "PreferNoSchedule"],
            ),
            (
                "bad taint key",
                "[taint]\nkey = \"not a key\"",
                2,
                7,
                &["taint.key", "qualified name"],
            ),
            (
                "bad taint value",
                "[taint]\nvalue = \"a b\"",
                2,
                9,
                &["taint.value", "63 characters"],
            ),
            (
                "bad policy",
                "[filters]\nemptydir = \"keep\"",
                2,
                12,
                &["unknown variant `keep`", "evict", "skip"],
            ),
            (
                "bad selector",
                "[filters]\nskip_selector = \"app in (a\"",
                2,
                17,
                &["filters.skip_selector", "label selector"],
            ),
            (
                "bad namespace",
                "[filters]\nskip_namespaces = [\"Kube_System\"]",
                2,
                20,
                &["filters.skip_namespaces", "DNS labels"],
            ),
            (
                "bad concurrency",
                "[drain]\nconcurrency = 0",
                2,
                15,
                &["drain.concurrency", "1 to 1000"],
            ),
            (
                "bad on_deadline",
                "[drain]\non_deadline = \"panic\"",
                2,
                15,
                &["unknown variant `panic`", "report", "delete"],
            ),
            (
                "relative path",
                "kubeconfig = \"kc.yaml\"",
                1,
                14,
                &["kubeconfig", "absolute path"],
            ),
            (
                "bad node name",
                "node_name = \"Node_1\"",
                1,
                13,
                &["node_name", "DNS subdomain"],
            ),
            (
                "bad rule action",
                "[[rules]]\nselector = \"a=b\"\naction = \"evict\"",
                3,
                10,
                &["unknown variant `evict`", "wait-completed"],
            ),
            (
                "order on skip",
                "[[rules]]\nselector = \"a=b\"\naction = \"skip\"\norder = 3",
                4,
                9,
                &["rules[0].order", "drain"],
            ),
            (
                "rule matching all",
                "[[rules]]\naction = \"skip\"",
                2,
                10,
                &["rules[0].selector", "namespaces"],
            ),
            ("bad syntax", "[drain\n", 1, 7, &["/etc/x.toml"]),
            (
                "zero release margin",
                "[daemon]\nrelease_margin = \"0s\"",
                2,
                18,
                &["daemon.release_margin", "from 1s"],
            ),
            (
                "release margin inside the overrun guard",
                "[daemon]\nrelease_margin = \"500ms\"",
                2,
                18,
                &["daemon.release_margin", "\"500ms\" is out of range", "from 1s"],
            ),
            (
                "zero grace period",
                "[drain]\ngrace_period = \"0s\"",
                2,
                16,
                &["drain.grace_period", "from 1s to 24h"],
            ),
            (
                "grace period under a second",
                "[drain]\ngrace_period = \"900ms\"",
                2,
                16,
                &["drain.grace_period", "from 1s to 24h"],
            ),
            (
                "grace period not whole seconds",
                "[drain]\ngrace_period = \"1500ms\"",
                2,
                16,
                &["drain.grace_period", "whole number of seconds"],
            ),
            (
                "grace period over a day",
                "[drain]\ngrace_period = \"25h\"",
                2,
                16,
                &["drain.grace_period", "from 1s to 24h"],
            ),
            (
                "retry interval of a millisecond",
                "[drain]\nretry_interval = \"1ms\"",
                2,
                18,
                &["drain.retry_interval", "from 100ms"],
            ),
            (
                "retry interval just under the floor",
                "[drain]\nretry_interval = \"99ms\"",
                2,
                18,
                &["drain.retry_interval", "from 100ms"],
            ),
            (
                "empty rule selector",
                "[[rules]]\nselector = \"\"\naction = \"skip\"",
                2,
                12,
                &["rules[0].selector", "matches every pod", "non-empty"],
            ),
            (
                "empty rule namespaces",
                "[[rules]]\nnamespaces = []\naction = \"skip\"",
                2,
                14,
                &["rules[0].namespaces", "every namespace", "non-empty"],
            ),
            (
                "empty skip selector",
                "[filters]\nskip_selector = \"\"",
                2,
                17,
                &["filters.skip_selector", "matches every pod"],
            ),
            (
                "blank skip selector",
                "[filters]\nskip_selector = \"  \"",
                2,
                17,
                &["filters.skip_selector", "matches every pod"],
            ),
        ];
        for (what, text, line, column, needles) in cases {
            let err = parse(text).expect_err(what);
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("/etc/x.toml:{line}:{column}: ")),
                "{what}: {msg}"
            );
            for n in *needles {
                assert!(msg.contains(n), "{what}: {msg:?} lacks {n:?}");
            }
        }
    }

    #[test]
    fn bounds_are_inclusive() {
        let s = parse(
            "[drain]\nretry_interval = \"100ms\"\ngrace_period = \"1s\"\n\
             [daemon]\nrelease_margin = \"1s\"",
        )
        .unwrap();
        assert_eq!(s.drain.retry_interval, Duration::from_millis(100));
        assert_eq!(s.drain.grace_period, Some(Duration::from_secs(1)));
        assert_eq!(s.daemon.release_margin, Duration::from_secs(1));
        let s = parse("[drain]\ngrace_period = \"24h\"").unwrap();
        assert_eq!(s.drain.grace_period, Some(Duration::from_secs(86_400)));
        // Skipping nothing is fine: an empty skip list selects no pod.
        let s = parse("[filters]\nskip_namespaces = []").unwrap();
        assert!(s.filters.skip_namespaces.is_empty());
    }

    #[test]
    fn empty_taint_value_means_no_value() {
        assert_eq!(parse("[taint]\nvalue = \"\"").unwrap().taint.value, None);
    }
}
