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

// Every leaf is read as a [`Leaf`] with its span, so that a value of the wrong type or an unknown
// enum name is reported by `validate` with its key and what is allowed, not by serde without one.

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "the file to be a table of the keys documented in config.example.toml"
)]
struct RawConfig {
    kubeconfig: Option<Spanned<Leaf>>,
    node_name: Option<Spanned<Leaf>>,
    state_dir: Option<Spanned<Leaf>>,
    request_timeout: Option<Spanned<Leaf>>,
    #[serde(default)]
    taint: RawTaint,
    #[serde(default)]
    filters: RawFilters,
    #[serde(default)]
    rules: RawRules,
    #[serde(default)]
    drain: RawDrain,
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    metrics: RawMetrics,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "`taint` to be a [taint] table (keys enabled, key, value, effect)"
)]
struct RawTaint {
    enabled: Option<Spanned<Leaf>>,
    key: Option<Spanned<Leaf>>,
    value: Option<Spanned<Leaf>>,
    effect: Option<Spanned<Leaf>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "`filters` to be a [filters] table (keys skip_tolerating_cordon, skip_selector, \
                 skip_namespaces, honour_capi_drain_label, emptydir, unreplicated, completed)"
)]
struct RawFilters {
    skip_tolerating_cordon: Option<Spanned<Leaf>>,
    skip_selector: Option<Spanned<Leaf>>,
    skip_namespaces: Option<Spanned<Leaf>>,
    honour_capi_drain_label: Option<Spanned<Leaf>>,
    emptydir: Option<Spanned<Leaf>>,
    unreplicated: Option<Spanned<Leaf>>,
    completed: Option<Spanned<Leaf>>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "each `rules` entry to be a [[rules]] table (keys selector, namespaces, action, order)"
)]
struct RawRule {
    selector: Option<Spanned<Leaf>>,
    namespaces: Option<Spanned<Leaf>>,
    action: Option<Spanned<Leaf>>,
    order: Option<Spanned<Leaf>>,
}

/// The `[[rules]]` array; its own type only so a wrong shape names the key `rules`.
#[derive(Debug, Default)]
struct RawRules(Vec<Spanned<RawRule>>);

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
                while let Some(rule) = seq.next_element()? {
                    rules.push(rule);
                }
                Ok(RawRules(rules))
            }
        }
        d.deserialize_seq(Rules)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "`drain` to be a [drain] table (keys concurrency, grace_period, retry_interval, \
                 timeout, on_deadline)"
)]
struct RawDrain {
    concurrency: Option<Spanned<Leaf>>,
    grace_period: Option<Spanned<Leaf>>,
    retry_interval: Option<Spanned<Leaf>>,
    timeout: Option<Spanned<Leaf>>,
    on_deadline: Option<Spanned<Leaf>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "`daemon` to be a [daemon] table (keys release_margin, restore_ready_timeout)"
)]
struct RawDaemon {
    release_margin: Option<Spanned<Leaf>>,
    restore_ready_timeout: Option<Spanned<Leaf>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "`metrics` to be a [metrics] table (key textfile)"
)]
struct RawMetrics {
    textfile: Option<Spanned<Leaf>>,
}

/// Any TOML value where a single key's value belongs; `validate` checks its type.
#[derive(Debug, Clone)]
enum Leaf {
    String(String),
    Integer(i64),
    Float,
    Boolean(bool),
    Array(Vec<Spanned<Leaf>>),
    /// An inline table or a date-time: never allowed where a leaf is read.
    Table,
}

impl Leaf {
    /// The type, as error messages name it.
    fn kind(&self) -> &'static str {
        match self {
            Leaf::String(_) => "a string",
            Leaf::Integer(_) => "an integer",
            Leaf::Float => "a float",
            Leaf::Boolean(_) => "a boolean",
            Leaf::Array(_) => "an array",
            Leaf::Table => "a table or date-time",
        }
    }
}

impl<'de> Deserialize<'de> for Leaf {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnyLeaf;
        impl<'de> serde::de::Visitor<'de> for AnyLeaf {
            type Value = Leaf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a TOML value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Leaf, E> {
                Ok(Leaf::Boolean(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Leaf, E> {
                Ok(Leaf::Integer(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Leaf, E> {
                // TOML integers are i64; a larger one is out of every range anyway.
                Ok(Leaf::Integer(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Leaf, E> {
                Ok(Leaf::Float)
            }
            fn visit_str<E>(self, v: &str) -> Result<Leaf, E> {
                Ok(Leaf::String(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Leaf, E> {
                Ok(Leaf::String(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Leaf, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Leaf::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Leaf, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Leaf::Table)
            }
        }
        d.deserialize_any(AnyLeaf)
    }
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

/// The `[metrics]` table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricsSettings {
    /// node_exporter textfile to write (`None`: off, the default).
    pub textfile: Option<PathBuf>,
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
    pub metrics: MetricsSettings,
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

    fn wrong_type(
        &self,
        value: &Spanned<Leaf>,
        key: &str,
        expected: &str,
        allowed: &str,
    ) -> ConfigError {
        self.invalid(
            value.span(),
            key,
            format!("expected {expected}, found {}", value.get_ref().kind()),
            allowed,
        )
    }

    /// A string value, keeping its span.
    fn string(
        &self,
        value: &Spanned<Leaf>,
        key: &str,
        allowed: &str,
    ) -> Result<Spanned<String>, ConfigError> {
        match value.get_ref() {
            Leaf::String(s) => Ok(Spanned::new(value.span(), s.clone())),
            _ => Err(self.wrong_type(value, key, "a string", allowed)),
        }
    }

    /// A boolean, or `default` when the key is absent.
    fn boolean(
        &self,
        value: &Option<Spanned<Leaf>>,
        key: &str,
        default: bool,
    ) -> Result<bool, ConfigError> {
        match value {
            None => Ok(default),
            Some(v) => match v.get_ref() {
                Leaf::Boolean(b) => Ok(*b),
                _ => Err(self.wrong_type(v, key, "a boolean", "true or false")),
            },
        }
    }

    /// An integer within `range`.
    fn integer(
        &self,
        value: &Spanned<Leaf>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, ConfigError> {
        let allowed = format!("an integer from {} to {}", range.start(), range.end());
        match value.get_ref() {
            Leaf::Integer(n) if range.contains(n) => Ok(*n),
            Leaf::Integer(n) => {
                Err(self.invalid(value.span(), key, format!("{n} is out of range"), &allowed))
            }
            _ => Err(self.wrong_type(value, key, "an integer", &allowed)),
        }
    }

    /// One of a fixed set of names, or `default` when the key is absent.
    fn choice<T: Copy>(
        &self,
        value: &Option<Spanned<Leaf>>,
        key: &str,
        choices: &[(&str, T)],
        default: T,
    ) -> Result<T, ConfigError> {
        let Some(value) = value else {
            return Ok(default);
        };
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
        let allowed = format!("one of {}", names.join(", "));
        let name = self.string(value, key, &allowed)?;
        choices
            .iter()
            .find(|(n, _)| n == name.get_ref())
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                self.invalid(
                    value.span(),
                    key,
                    format!("unknown value {:?}", name.get_ref()),
                    &allowed,
                )
            })
    }

    /// An array of strings, each keeping its span.
    fn strings(
        &self,
        value: &Spanned<Leaf>,
        key: &str,
        allowed: &str,
    ) -> Result<Vec<Spanned<String>>, ConfigError> {
        match value.get_ref() {
            Leaf::Array(items) => items.iter().map(|i| self.string(i, key, allowed)).collect(),
            _ => Err(self.wrong_type(value, key, "an array of strings", allowed)),
        }
    }

    fn duration(&self, value: &Spanned<Leaf>, key: &str) -> Result<Duration, ConfigError> {
        let text = self.string(value, key, DURATION_ALLOWED)?;
        parse_duration(text.get_ref()).ok_or_else(|| {
            self.invalid(
                value.span(),
                key,
                format!("{:?} is not a duration", text.get_ref()),
                DURATION_ALLOWED,
            )
        })
    }

    /// A duration of at least `min` and at most `max`, or `default` when the key is absent.
    fn bounded_duration(
        &self,
        value: &Option<Spanned<Leaf>>,
        key: &str,
        (min, max): (Duration, Duration),
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        let Some(value) = value else {
            return Ok(default);
        };
        let d = self.duration(value, key)?;
        if d < min || d > max {
            return Err(self.invalid(
                value.span(),
                key,
                format!("{:?} is out of range", format_duration(d)),
                &format!(
                    "a duration from {} to {}",
                    format_duration(min),
                    format_duration(max)
                ),
            ));
        }
        Ok(d)
    }

    /// A grace period: whole seconds within [`MIN_GRACE_PERIOD`]..=[`MAX_GRACE_PERIOD`].
    fn grace_period(&self, value: &Spanned<Leaf>, key: &str) -> Result<Duration, ConfigError> {
        let bounds = (MIN_GRACE_PERIOD, MAX_GRACE_PERIOD);
        let d = self.bounded_duration(&Some(value.clone()), key, bounds, MIN_GRACE_PERIOD)?;
        if d.subsec_nanos() != 0 {
            return Err(self.invalid(
                value.span(),
                key,
                format!("{:?} is not a whole number of seconds", format_duration(d)),
                "whole seconds from 1s to 24h, e.g. \"30s\" or \"2m\"",
            ));
        }
        Ok(d)
    }

    /// A label selector that selects something: an empty one would match every pod.
    fn selector(&self, value: &Spanned<Leaf>, key: &str) -> Result<Selector, ConfigError> {
        let text = self.string(value, key, SELECTOR_ALLOWED)?;
        if text.get_ref().trim().is_empty() {
            return Err(self.invalid(
                value.span(),
                key,
                "an empty selector matches every pod",
                "a non-empty label selector such as \"app=web\" (leave the key out for none)",
            ));
        }
        Selector::parse(text.get_ref())
            .map_err(|e: SelectorError| self.invalid(value.span(), key, e, SELECTOR_ALLOWED))
    }

    fn namespaces(&self, value: &Spanned<Leaf>, key: &str) -> Result<Vec<String>, ConfigError> {
        const ALLOWED: &str = "lower-case DNS labels (a-z, 0-9, '-'), at most 63 characters";
        self.strings(value, key, ALLOWED)?
            .into_iter()
            .map(|ns| {
                if is_dns_label(ns.get_ref()) {
                    Ok(ns.into_inner())
                } else {
                    Err(self.invalid(
                        ns.span(),
                        key,
                        format!("{:?} is not a namespace name", ns.get_ref()),
                        ALLOWED,
                    ))
                }
            })
            .collect()
    }
}

const DURATION_ALLOWED: &str =
    "a whole number followed by ms, s, m or h, e.g. \"500ms\", \"90s\", \"2m\"";
const SELECTOR_ALLOWED: &str = "a label selector such as \"app=web,tier in (a,b),!canary\"";
/// Any positive duration, up to [`MAX_DURATION`].
const POSITIVE: (Duration, Duration) = (Duration::from_millis(1), MAX_DURATION);

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
    let path_key = |v: &Option<Spanned<Leaf>>, key: &str, default: &str| match v {
        None => Ok(PathBuf::from(default)),
        Some(v) => {
            let p = src.string(v, key, "an absolute path")?;
            if p.get_ref().starts_with('/') {
                Ok(PathBuf::from(p.into_inner()))
            } else {
                Err(src.invalid(
                    p.span(),
                    key,
                    format!("{:?} is not an absolute path", p.get_ref()),
                    "an absolute path",
                ))
            }
        }
    };
    let kubeconfig = path_key(&raw.kubeconfig, "kubeconfig", DEFAULT_KUBECONFIG)?;
    let state_dir = path_key(&raw.state_dir, "state_dir", DEFAULT_STATE_DIR)?;

    const NODE_NAME_ALLOWED: &str = "a lower-case DNS subdomain, e.g. \"worker-1\"";
    let node_name = match &raw.node_name {
        Some(v) => {
            let n = src.string(v, "node_name", NODE_NAME_ALLOWED)?;
            if !is_dns_subdomain(n.get_ref()) {
                return Err(src.invalid(
                    n.span(),
                    "node_name",
                    format!("{:?} is not a node name", n.get_ref()),
                    NODE_NAME_ALLOWED,
                ));
            }
            n.into_inner()
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

    let request_timeout = src.bounded_duration(
        &raw.request_timeout,
        "request_timeout",
        POSITIVE,
        Duration::from_secs(10),
    )?;

    const TAINT_KEY_ALLOWED: &str = "a qualified name such as \"example.com/shutdown\"";
    let taint_key = match &raw.taint.key {
        None => DEFAULT_TAINT_KEY.to_string(),
        Some(v) => {
            let k = src.string(v, "taint.key", TAINT_KEY_ALLOWED)?;
            if !is_qualified_name(k.get_ref()) {
                return Err(src.invalid(
                    k.span(),
                    "taint.key",
                    format!("{:?} is not a taint key", k.get_ref()),
                    TAINT_KEY_ALLOWED,
                ));
            }
            k.into_inner()
        }
    };
    const TAINT_VALUE_ALLOWED: &str =
        "at most 63 characters of a-z, A-Z, 0-9, '-', '_', '.' (\"\" for no value)";
    let taint_value = match &raw.taint.value {
        None => Some("true".to_string()),
        Some(v) => {
            let t = src.string(v, "taint.value", TAINT_VALUE_ALLOWED)?;
            if !is_label_value(t.get_ref()) {
                return Err(src.invalid(
                    t.span(),
                    "taint.value",
                    format!("{:?} is not a taint value", t.get_ref()),
                    TAINT_VALUE_ALLOWED,
                ));
            }
            Some(t.into_inner()).filter(|t| !t.is_empty())
        }
    };
    let taint = TaintSettings {
        enabled: src.boolean(&raw.taint.enabled, "taint.enabled", true)?,
        key: taint_key,
        value: taint_value,
        effect: src.choice(
            &raw.taint.effect,
            "taint.effect",
            &[
                ("PreferNoSchedule", TaintEffect::PreferNoSchedule),
                ("NoSchedule", TaintEffect::NoSchedule),
                ("NoExecute", TaintEffect::NoExecute),
            ],
            TaintEffect::PreferNoSchedule,
        )?,
    };

    let policies = [("evict", Policy::Evict), ("skip", Policy::Skip)];
    let f = &raw.filters;
    let filters = FilterSettings {
        skip_tolerating_cordon: src.boolean(
            &f.skip_tolerating_cordon,
            "filters.skip_tolerating_cordon",
            true,
        )?,
        skip_selector: match &f.skip_selector {
            Some(s) => Some(src.selector(s, "filters.skip_selector")?),
            None => None,
        },
        // An empty list skips nothing, so it is fine here (unlike in a rule).
        skip_namespaces: match &f.skip_namespaces {
            Some(v) => src
                .namespaces(v, "filters.skip_namespaces")?
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        },
        honour_capi_drain_label: src.boolean(
            &f.honour_capi_drain_label,
            "filters.honour_capi_drain_label",
            true,
        )?,
        emptydir: src.choice(&f.emptydir, "filters.emptydir", &policies, Policy::Evict)?,
        unreplicated: src.choice(
            &f.unreplicated,
            "filters.unreplicated",
            &policies,
            Policy::Evict,
        )?,
        completed: src.choice(&f.completed, "filters.completed", &policies, Policy::Skip)?,
    };

    #[derive(Clone, Copy)]
    enum ActionName {
        Drain,
        Skip,
        WaitCompleted,
    }
    let mut rules = Vec::with_capacity(raw.rules.0.len());
    for (i, spanned) in raw.rules.0.iter().enumerate() {
        let r = spanned.get_ref();
        let key = |k: &str| format!("rules[{i}].{k}");
        let selector = match &r.selector {
            Some(s) => src.selector(s, &key("selector"))?,
            None => Selector::everything(),
        };
        let namespaces = match &r.namespaces {
            None => Vec::new(),
            Some(v) => {
                let ns = src.namespaces(v, &key("namespaces"))?;
                if ns.is_empty() {
                    return Err(src.invalid(
                        v.span(),
                        &key("namespaces"),
                        "an empty list would mean every namespace",
                        "a non-empty list of namespaces (leave the key out for every namespace)",
                    ));
                }
                ns
            }
        };
        let actions = [
            ("drain", ActionName::Drain),
            ("skip", ActionName::Skip),
            ("wait-completed", ActionName::WaitCompleted),
        ];
        let Some(action_leaf) = &r.action else {
            return Err(src.invalid(
                spanned.span(),
                &key("action"),
                "a rule needs an action",
                "action = one of \"drain\", \"skip\", \"wait-completed\"",
            ));
        };
        let name = src.choice(
            &Some(action_leaf.clone()),
            &key("action"),
            &actions,
            ActionName::Drain,
        )?;
        let action = match (name, &r.order) {
            (ActionName::Drain, None) => RuleAction::Drain { order: 0 },
            (ActionName::Drain, Some(order)) => {
                let order = src.integer(
                    order,
                    &key("order"),
                    i64::from(i32::MIN)..=i64::from(i32::MAX),
                )?;
                RuleAction::Drain {
                    // In range: checked just above.
                    order: i32::try_from(order).unwrap_or_default(),
                }
            }
            (ActionName::Skip, None) => RuleAction::Skip,
            (ActionName::WaitCompleted, None) => RuleAction::WaitCompleted,
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
                action_leaf.span(),
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
        // In range: 1 to 1000.
        Some(c) => usize::try_from(src.integer(c, "drain.concurrency", 1..=1000)?).unwrap_or(1),
    };
    let drain = DrainSettings {
        concurrency,
        grace_period: match &d.grace_period {
            Some(g) => Some(src.grace_period(g, "drain.grace_period")?),
            None => None,
        },
        retry_interval: src.bounded_duration(
            &d.retry_interval,
            "drain.retry_interval",
            (MIN_RETRY_INTERVAL, MAX_DURATION),
            Duration::from_secs(5),
        )?,
        timeout: src.bounded_duration(
            &d.timeout,
            "drain.timeout",
            POSITIVE,
            Duration::from_secs(120),
        )?,
        on_deadline: src.choice(
            &d.on_deadline,
            "drain.on_deadline",
            &[
                ("report", OnDeadline::Report),
                ("delete", OnDeadline::Delete),
            ],
            OnDeadline::Report,
        )?,
    };

    let daemon = DaemonSettings {
        release_margin: src.bounded_duration(
            &raw.daemon.release_margin,
            "daemon.release_margin",
            (MIN_RELEASE_MARGIN, MAX_DURATION),
            Duration::from_secs(5),
        )?,
        restore_ready_timeout: src.bounded_duration(
            &raw.daemon.restore_ready_timeout,
            "daemon.restore_ready_timeout",
            POSITIVE,
            Duration::from_secs(600),
        )?,
    };

    const TEXTFILE_ALLOWED: &str = "an absolute path ending in .prom, or \"\" (off)";
    let metrics = MetricsSettings {
        textfile: match &raw.metrics.textfile {
            None => None,
            Some(v) => {
                let p = src.string(v, "metrics.textfile", TEXTFILE_ALLOWED)?;
                let text = p.get_ref();
                if text.is_empty() {
                    None
                } else if text.starts_with('/') && text.ends_with(".prom") {
                    Some(PathBuf::from(text))
                } else {
                    // node_exporter reads only *.prom files.
                    return Err(src.invalid(
                        p.span(),
                        "metrics.textfile",
                        format!("{text:?} is not an absolute path ending in .prom"),
                        TEXTFILE_ALLOWED,
                    ));
                }
            }
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
        metrics,
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
                &["drain.timeout", "\"0s\" is out of range", "from 1ms"],
            ),
            (
                "wrong type",
                "[drain]\ntimeout = 90",
                2,
                11,
                &[
                    "key `drain.timeout`",
                    "expected a string, found an integer",
                    "ms, s, m or h",
                ],
            ),
            (
                "bad effect",
                "[taint]\neffect = \"Sometimes\"",
                2,
                10,
                &[
                    "key `taint.effect`",
                    "unknown value \"Sometimes\"",
                    "\"PreferNoSchedule\", \"NoSchedule\", \"NoExecute\"",
                ],
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
                &[
                    "key `filters.emptydir`",
                    "unknown value \"keep\"",
                    "one of \"evict\", \"skip\"",
                ],
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
                &[
                    "key `drain.on_deadline`",
                    "unknown value \"panic\"",
                    "one of \"report\", \"delete\"",
                ],
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
                &[
                    "key `rules[0].action`",
                    "unknown value \"evict\"",
                    "\"drain\", \"skip\", \"wait-completed\"",
                ],
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
                "a namespace of the wrong type",
                "[filters]\nskip_namespaces = [\"a\", 1]",
                2,
                25,
                &["filters.skip_namespaces", "found an integer", "DNS labels"],
            ),
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
                &[
                    "daemon.release_margin",
                    "\"500ms\" is out of range",
                    "from 1s",
                ],
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

    /// A value of the wrong type, or a table of the wrong shape, names its key and what is
    /// allowed, at the value's line and column, for every key.
    #[test]
    fn metrics_textfile_is_off_by_default_and_must_be_an_absolute_prom_file() {
        assert_eq!(parse("").unwrap().metrics.textfile, None);
        assert_eq!(
            parse("[metrics]\ntextfile = \"\"")
                .unwrap()
                .metrics
                .textfile,
            None
        );
        assert_eq!(
            parse("[metrics]\ntextfile = \"/var/lib/node_exporter/textfile_collector/k.prom\"")
                .unwrap()
                .metrics
                .textfile,
            Some(PathBuf::from(
                "/var/lib/node_exporter/textfile_collector/k.prom"
            ))
        );
        for bad in ["\"k.prom\"", "\"/tmp/k.txt\"", "1"] {
            let e = parse(&format!("[metrics]\ntextfile = {bad}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("key `metrics.textfile`") && e.contains(".prom"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn wrong_types_name_the_key() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("kubeconfig = 1", "kubeconfig", &["an absolute path"]),
            ("node_name = true", "node_name", &["DNS subdomain"]),
            ("state_dir = []", "state_dir", &["found an array"]),
            (
                "request_timeout = 1.5",
                "request_timeout",
                &["found a float"],
            ),
            (
                "[taint]\nenabled = \"yes\"",
                "taint.enabled",
                &["true or false"],
            ),
            ("[taint]\nkey = 3", "taint.key", &["qualified name"]),
            ("[taint]\nvalue = true", "taint.value", &["63 characters"]),
            ("[taint]\neffect = 1", "taint.effect", &["\"NoExecute\""]),
            (
                "node_name = \"n\"\n\n[taint]\neffect = \"Bogus\"",
                "taint.effect",
                &["unknown value \"Bogus\""],
            ),
            (
                "[filters]\nskip_tolerating_cordon = 1",
                "filters.skip_tolerating_cordon",
                &["true or false"],
            ),
            (
                "[filters]\nhonour_capi_drain_label = \"no\"",
                "filters.honour_capi_drain_label",
                &["found a string", "true or false"],
            ),
            (
                "[filters]\nskip_selector = 1",
                "filters.skip_selector",
                &["label selector"],
            ),
            (
                "[filters]\nskip_namespaces = \"prod\"",
                "filters.skip_namespaces",
                &["expected an array of strings, found a string"],
            ),
            (
                "[filters]\nemptydir = true",
                "filters.emptydir",
                &["\"evict\", \"skip\""],
            ),
            (
                "[filters]\nunreplicated = \"keep\"",
                "filters.unreplicated",
                &["\"skip\""],
            ),
            (
                "[filters]\ncompleted = {}",
                "filters.completed",
                &["found a table"],
            ),
            (
                "[[rules]]\naction = \"skip\"\nselector = 1",
                "rules[0].selector",
                &["label selector"],
            ),
            (
                "[[rules]]\naction = \"skip\"\nnamespaces = \"x\"",
                "rules[0].namespaces",
                &["DNS labels"],
            ),
            (
                "[[rules]]\nselector = \"a\"\naction = 2",
                "rules[0].action",
                &["\"drain\""],
            ),
            (
                "[[rules]]\nselector = \"a\"\naction = \"drain\"\norder = \"1\"",
                "rules[0].order",
                &["expected an integer, found a string"],
            ),
            (
                "[[rules]]\nselector = \"a\"\naction = \"drain\"\norder = 9999999999",
                "rules[0].order",
                &["out of range", "2147483647"],
            ),
            (
                "[drain]\nconcurrency = \"ten\"",
                "drain.concurrency",
                &["1 to 1000"],
            ),
            (
                "[drain]\nconcurrency = 1.0",
                "drain.concurrency",
                &["found a float"],
            ),
            (
                "[drain]\ngrace_period = 30",
                "drain.grace_period",
                &["ms, s, m or h"],
            ),
            (
                "[drain]\nretry_interval = true",
                "drain.retry_interval",
                &["ms, s, m or h"],
            ),
            (
                "[drain]\ntimeout = 1979-05-27",
                "drain.timeout",
                &["date-time"],
            ),
            (
                "[drain]\non_deadline = 1",
                "drain.on_deadline",
                &["\"delete\""],
            ),
            (
                "[daemon]\nrelease_margin = 5",
                "daemon.release_margin",
                &["ms, s, m or h"],
            ),
            (
                "[daemon]\nrestore_ready_timeout = [\"1m\"]",
                "daemon.restore_ready_timeout",
                &["found an array"],
            ),
        ];
        for (text, key, needles) in cases {
            let msg = parse(text).expect_err(text).to_string();
            let last = text.lines().last().unwrap_or_default();
            let line = text.lines().count();
            let column = last.find(" = ").unwrap() + 4;
            let prefix = format!("/etc/x.toml:{line}:{column}: key `{key}`: ");
            assert!(
                msg.starts_with(&prefix),
                "{text:?}: {msg:?} lacks {prefix:?}"
            );
            assert!(msg.contains("; allowed: "), "{text:?}: {msg}");
            for n in *needles {
                assert!(msg.contains(n), "{text:?}: {msg:?} lacks {n:?}");
            }
        }
        // A table of the wrong shape names its key too.
        let shapes: &[(&str, &str)] = &[
            ("taint = 3", "`taint` to be a [taint] table"),
            ("filters = \"x\"", "`filters` to be a [filters] table"),
            ("drain = []", "`drain` to be a [drain] table"),
            ("daemon = 1", "`daemon` to be a [daemon] table"),
            ("rules = 3", "`rules` to be an array of [[rules]] tables"),
            ("rules = [1]", "each `rules` entry to be a [[rules]] table"),
            (
                "[[rules]]\nselector = \"a\"",
                "key `rules[0].action`: a rule needs an action",
            ),
        ];
        for (text, needle) in shapes {
            let msg = parse(text).expect_err(text).to_string();
            assert!(msg.starts_with("/etc/x.toml:"), "{text:?}: {msg}");
            assert!(msg.contains(needle), "{text:?}: {msg:?} lacks {needle:?}");
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
