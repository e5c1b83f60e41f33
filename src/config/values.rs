//! The checked values of the config file: one newtype per bounded value (durations with bounds,
//! node names, taint keys and values, namespaces, selectors, enum names), each checked while toml
//! deserializes it, so a refusal carries the value's span (see [`checked`]) and reads
//! "PROBLEM; allowed: WHAT IS ALLOWED" ([`Invalid`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::Deserializer;

use super::duration::{format_duration, parse_duration};
use super::from_value::{
    ECHO_LIMIT, FromValue, Invalid, List, ListElement, Named, Value, checked, deserialize_checked,
    quote, string,
};
use super::names::{is_dns_label, is_dns_subdomain, is_label_value, is_qualified_name};
use super::selector::Selector;

/// A `rules[].action` name; `validate` combines it with `order` into a `RuleAction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionName {
    Drain,
    Skip,
    WaitCompleted,
}

impl Named for ActionName {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("drain", ActionName::Drain),
        ("skip", ActionName::Skip),
        ("wait-completed", ActionName::WaitCompleted),
    ];
}

/// `true` or `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl FromValue for Flag {
    fn from_value(value: Value) -> Result<Flag, Invalid> {
        match value {
            Value::Boolean(b) => Ok(Flag(b)),
            other => Err(Invalid::wrong_type("a boolean", &other, "true or false")),
        }
    }
}

/// An absolute file or directory path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbsolutePath(pub PathBuf);

impl FromValue for AbsolutePath {
    fn from_value(value: Value) -> Result<AbsolutePath, Invalid> {
        const ALLOWED: &str = "an absolute path";
        let p = string(value, ALLOWED)?;
        if p.starts_with('/') {
            Ok(AbsolutePath(PathBuf::from(p)))
        } else {
            Err(Invalid::new(
                format!("{} is not an absolute path", quote(&p)),
                ALLOWED,
            ))
        }
    }
}

/// `metrics.textfile`: `""` (off) or an absolute path ending in `.prom` (node_exporter's textfile
/// collector reads only `*.prom` files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextfilePath(pub Option<PathBuf>);

impl FromValue for TextfilePath {
    fn from_value(value: Value) -> Result<TextfilePath, Invalid> {
        const ALLOWED: &str = "an absolute path ending in .prom, or \"\" (off)";
        let p = string(value, ALLOWED)?;
        if p.is_empty() {
            Ok(TextfilePath(None))
        } else if p.starts_with('/') && p.ends_with(".prom") {
            Ok(TextfilePath(Some(PathBuf::from(p))))
        } else {
            Err(Invalid::new(
                format!("{} is not an absolute path ending in .prom", quote(&p)),
                ALLOWED,
            ))
        }
    }
}

/// `daemon.forecast_interval`: `"off"` or a duration from 1s to a week.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval(pub Option<Duration>);

impl FromValue for Interval {
    fn from_value(value: Value) -> Result<Interval, Invalid> {
        const ALLOWED: &str = "\"off\" or a duration from 1s to 168h, e.g. \"6h\"";
        let text = string(value, ALLOWED)?;
        if text == "off" {
            return Ok(Interval(None));
        }
        match parse_duration(&text) {
            Some(d)
                if d >= Duration::from_secs(1) && d <= Duration::from_millis(MAX_DURATION_MS) =>
            {
                Ok(Interval(Some(d)))
            }
            Some(_) => Err(Invalid::new(
                format!("{} is out of range", quote(&text)),
                ALLOWED,
            )),
            None => Err(Invalid::new(
                format!("{} is neither \"off\" nor a duration", quote(&text)),
                ALLOWED,
            )),
        }
    }
}

/// A Node name: a lower-case DNS subdomain. Checked the same way whether it comes from
/// `node_name`, the host name or `--node`, so only such a name is ever put in a request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeName(pub String);

impl NodeName {
    pub const ALLOWED: &'static str = "a lower-case DNS subdomain, e.g. \"worker-1\"";

    pub fn parse(name: &str) -> Result<NodeName, Invalid> {
        if is_dns_subdomain(name) {
            Ok(NodeName(name.to_string()))
        } else {
            Err(Invalid::new(
                format!("{} is not a node name", quote(name)),
                Self::ALLOWED,
            ))
        }
    }
}

impl FromValue for NodeName {
    fn from_value(value: Value) -> Result<NodeName, Invalid> {
        NodeName::parse(&string(value, Self::ALLOWED)?)
    }
}

const DURATION_ALLOWED: &str =
    "a whole number followed by ms, s, m or h, e.g. \"500ms\", \"90s\", \"2m\"";

/// A duration string.
fn duration(value: Value) -> Result<Duration, Invalid> {
    let text = string(value, DURATION_ALLOWED)?;
    parse_duration(&text).ok_or_else(|| {
        Invalid::new(
            format!("{} is not a duration", quote(&text)),
            DURATION_ALLOWED,
        )
    })
}

/// A duration from `MIN_MS` to `MAX_MS` milliseconds, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationIn<const MIN_MS: u64, const MAX_MS: u64>(pub Duration);

impl<const MIN_MS: u64, const MAX_MS: u64> FromValue for DurationIn<MIN_MS, MAX_MS> {
    fn from_value(value: Value) -> Result<Self, Invalid> {
        let (min, max) = (Duration::from_millis(MIN_MS), Duration::from_millis(MAX_MS));
        let d = duration(value)?;
        if d < min || d > max {
            return Err(Invalid::new(
                format!("{:?} is out of range", format_duration(d)),
                format!(
                    "a duration from {} to {}",
                    format_duration(min),
                    format_duration(max)
                ),
            ));
        }
        Ok(DurationIn(d))
    }
}

impl<'de, const MIN_MS: u64, const MAX_MS: u64> Deserialize<'de> for DurationIn<MIN_MS, MAX_MS> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked(d)
    }
}

/// The largest value any duration key accepts, in ms: nothing in a shutdown path waits a week.
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;
/// Any positive duration up to a week.
pub type Positive = DurationIn<1, MAX_DURATION_MS>;
/// A duration up to a week, zero included (a wait that may be off).
pub type Delay = DurationIn<0, MAX_DURATION_MS>;
/// `drain.retry_interval`: see [`super::MIN_RETRY_INTERVAL`].
pub type RetryInterval = DurationIn<100, MAX_DURATION_MS>;
/// `daemon.release_margin`: see [`super::MIN_RELEASE_MARGIN`].
pub type ReleaseMargin = DurationIn<1000, MAX_DURATION_MS>;

/// `drain.grace_period`: whole seconds from [`super::MIN_GRACE_PERIOD`] to
/// [`super::MAX_GRACE_PERIOD`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GracePeriod(pub Duration);

impl FromValue for GracePeriod {
    fn from_value(value: Value) -> Result<GracePeriod, Invalid> {
        let DurationIn(d) = DurationIn::<1000, { 24 * 3600 * 1000 }>::from_value(value)?;
        if d.subsec_nanos() != 0 {
            return Err(Invalid::new(
                format!("{:?} is not a whole number of seconds", format_duration(d)),
                "whole seconds from 1s to 24h, e.g. \"30s\" or \"2m\"",
            ));
        }
        Ok(GracePeriod(d))
    }
}

/// A taint key: a qualified name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintKey(pub String);

impl FromValue for TaintKey {
    fn from_value(value: Value) -> Result<TaintKey, Invalid> {
        const ALLOWED: &str = "a qualified name such as \"example.com/shutdown\"";
        let k = string(value, ALLOWED)?;
        if is_qualified_name(&k) {
            Ok(TaintKey(k))
        } else {
            Err(Invalid::new(
                format!("{} is not a taint key", quote(&k)),
                ALLOWED,
            ))
        }
    }
}

/// A taint value: a label value (empty means no value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintValue(pub String);

impl FromValue for TaintValue {
    fn from_value(value: Value) -> Result<TaintValue, Invalid> {
        const ALLOWED: &str =
            "at most 63 characters of a-z, A-Z, 0-9, '-', '_', '.' (\"\" for no value)";
        let v = string(value, ALLOWED)?;
        if is_label_value(&v) {
            Ok(TaintValue(v))
        } else {
            Err(Invalid::new(
                format!("{} is not a taint value", quote(&v)),
                ALLOWED,
            ))
        }
    }
}

/// An integer from `range`, or the error naming it.
fn integer(value: Value, range: std::ops::RangeInclusive<i64>) -> Result<i64, Invalid> {
    let allowed = format!("an integer from {} to {}", range.start(), range.end());
    match value {
        Value::Integer(n) if range.contains(&n) => Ok(n),
        Value::Integer(n) => Err(Invalid::new(format!("{n} is out of range"), allowed)),
        other => Err(Invalid::wrong_type("an integer", &other, allowed)),
    }
}

/// `drain.concurrency`: 1 to 1000 evictions in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency(pub usize);

impl FromValue for Concurrency {
    fn from_value(value: Value) -> Result<Concurrency, Invalid> {
        let n = integer(value, 1..=1000)?;
        Ok(Concurrency(usize::try_from(n).unwrap_or(1)))
    }
}

/// `fleet.slots`: 0 (off) to 1000 drain slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots(pub u32);

impl FromValue for Slots {
    fn from_value(value: Value) -> Result<Slots, Invalid> {
        let n = integer(value, 0..=1000)?;
        Ok(Slots(u32::try_from(n).unwrap_or(0)))
    }
}

/// A label key: a qualified name (`fleet.group_label`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelKey(pub String);

impl FromValue for LabelKey {
    fn from_value(value: Value) -> Result<LabelKey, Invalid> {
        const ALLOWED: &str = "a label key such as \"topology.kubernetes.io/zone\"";
        let k = string(value, ALLOWED)?;
        if is_qualified_name(&k) {
            Ok(LabelKey(k))
        } else {
            Err(Invalid::new(
                format!("{} is not a label key", quote(&k)),
                ALLOWED,
            ))
        }
    }
}

/// `rules[].order`: any i32, the scale of pod priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order(pub i32);

impl FromValue for Order {
    fn from_value(value: Value) -> Result<Order, Invalid> {
        let n = integer(value, i64::from(i32::MIN)..=i64::from(i32::MAX))?;
        Ok(Order(i32::try_from(n).unwrap_or_default()))
    }
}

const SELECTOR_ALLOWED: &str = "a label selector such as \"app=web,tier in (a,b),!canary\"";

/// A label selector that selects something: an empty one would match every pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSelector(pub Selector);

impl FromValue for PodSelector {
    fn from_value(value: Value) -> Result<PodSelector, Invalid> {
        let text = string(value, SELECTOR_ALLOWED)?;
        if text.trim().is_empty() {
            return Err(Invalid::new(
                "an empty selector matches every pod",
                "a non-empty label selector such as \"app=web\" (leave the key out for none)",
            ));
        }
        if text.chars().count() > ECHO_LIMIT {
            // The parser's reasons repeat the selector; a valid one is never this long anyway.
            return Err(Invalid::new(
                format!("{} is too long for a label selector", quote(&text)),
                SELECTOR_ALLOWED,
            ));
        }
        Selector::parse(&text)
            .map(PodSelector)
            .map_err(|e| Invalid::new(e, SELECTOR_ALLOWED))
    }
}

const NAMESPACES_ALLOWED: &str = "lower-case DNS labels (a-z, 0-9, '-'), at most 63 characters";

/// One namespace name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace(pub String);

impl FromValue for Namespace {
    fn from_value(value: Value) -> Result<Namespace, Invalid> {
        let ns = string(value, NAMESPACES_ALLOWED)?;
        if is_dns_label(&ns) {
            Ok(Namespace(ns))
        } else {
            Err(Invalid::new(
                format!("{} is not a namespace name", quote(&ns)),
                NAMESPACES_ALLOWED,
            ))
        }
    }
}

/// An array of namespace names. Each element is read as a [`Namespace`] of its own, so an error
/// points at the element; anything but an array is refused with what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespaces(pub Vec<String>);

impl ListElement for Namespace {
    const LIST: &'static str = "an array of namespace names";
    const ALLOWED: &'static str = NAMESPACES_ALLOWED;
}

impl<'de> Deserialize<'de> for Namespaces {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let List(names) = List::<Namespace>::deserialize(d)?;
        Ok(Namespaces(names.into_iter().map(|n| n.0).collect()))
    }
}

const CONDITION_ALLOWED: &str = "\"Type=Status\": a condition type (letters, digits, '.', '/', \
     '_', '-'; at most 316 characters) and True, False or Unknown, e.g. \"NetworkUnavailable=False\"";

/// One Node condition and the status it must have: `"Type=Status"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    pub type_: String,
    pub status: String,
}

impl fmt::Display for NodeCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.type_, self.status)
    }
}

impl FromValue for NodeCondition {
    fn from_value(value: Value) -> Result<NodeCondition, Invalid> {
        let text = string(value, CONDITION_ALLOWED)?;
        let bad = || {
            Invalid::new(
                format!("{} is not a condition", quote(&text)),
                CONDITION_ALLOWED,
            )
        };
        let (type_, status) = text.split_once('=').ok_or_else(bad)?;
        let type_ok = !type_.is_empty()
            && type_.len() <= 316
            && type_
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-'));
        if !type_ok || !matches!(status, "True" | "False" | "Unknown") {
            return Err(bad());
        }
        Ok(NodeCondition {
            type_: type_.to_string(),
            status: status.to_string(),
        })
    }
}

impl ListElement for NodeCondition {
    const LIST: &'static str = "an array of conditions";
    const ALLOWED: &'static str = CONDITION_ALLOWED;
}

deserialize_checked!(
    ActionName,
    Flag,
    AbsolutePath,
    TextfilePath,
    Interval,
    NodeName,
    GracePeriod,
    TaintKey,
    TaintValue,
    Concurrency,
    Slots,
    LabelKey,
    Order,
    PodSelector,
    Namespace,
    NodeCondition,
);
