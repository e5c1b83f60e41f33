//! The checked values of the config file: one newtype per bounded value (durations with bounds,
//! node names, taint keys and values, namespaces, selectors, enum names), each checked while toml
//! deserializes it, so a refusal carries the value's span (see [`checked`]) and reads
//! "PROBLEM; allowed: WHAT IS ALLOWED" ([`Invalid`]).

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};

use super::duration::{format_duration, parse_duration};
use super::names::{is_dns_label, is_dns_subdomain, is_label_value, is_qualified_name};
use super::selector::Selector;

/// The most characters of a configured value an error repeats.
pub const ECHO_LIMIT: usize = 200;

/// `s` quoted for an error message, cut after [`ECHO_LIMIT`] characters.
pub fn quote(s: &str) -> String {
    let count = s.chars().count();
    if count <= ECHO_LIMIT {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(ECHO_LIMIT).collect();
    format!("{head:?}... ({count} characters)")
}

/// Any TOML value where one key's value belongs; a [`FromValue`] impl checks its type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(String),
    Integer(i64),
    Float,
    Boolean(bool),
    Array,
    /// An inline table or a date-time: never allowed where a value is read.
    Table,
}

impl Value {
    /// The type, as error messages name it.
    fn kind(&self) -> &'static str {
        match self {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Array => "an array",
            Value::Table => "a table or date-time",
        }
    }
}

/// Why one value was refused, and what the key allows. Displayed as "PROBLEM; allowed: WHAT".
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    problem: String,
    allowed: String,
}

impl Invalid {
    pub fn new(problem: impl fmt::Display, allowed: impl Into<String>) -> Invalid {
        Invalid {
            problem: problem.to_string(),
            allowed: allowed.into(),
        }
    }

    /// A value of another type than `expected`.
    pub fn wrong_type(expected: &str, found: &Value, allowed: impl Into<String>) -> Invalid {
        Invalid::new(
            format!("expected {expected}, found {}", found.kind()),
            allowed,
        )
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; allowed: {}", self.problem, self.allowed)
    }
}

/// A value checked as it is read: the counterpart of `TryFrom<Value>`.
pub trait FromValue: Sized {
    fn from_value(value: Value) -> Result<Self, Invalid>;
}

/// Deserializes any TOML value and checks it with [`FromValue`] inside the visitor. serde's
/// `#[serde(try_from)]` would convert only after toml's value deserializer has returned, and toml
/// then blames the enclosing key or array (`skip_namespaces = ["a", 1]` at the `[`); checked
/// here, the error carries the span of the very value.
pub fn checked<'de, D: Deserializer<'de>, T: FromValue>(d: D) -> Result<T, D::Error> {
    struct Checked<T>(PhantomData<T>);
    impl<T: FromValue> Checked<T> {
        fn check<E: de::Error>(v: Value) -> Result<T, E> {
            T::from_value(v).map_err(E::custom)
        }
    }
    impl<'de, T: FromValue> Visitor<'de> for Checked<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a TOML value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
            Self::check(Value::Boolean(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            Self::check(Value::Integer(v))
        }
        // TOML integers are i64; a larger one is out of every range anyway.
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            Self::check(Value::Integer(i64::try_from(v).unwrap_or(i64::MAX)))
        }
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
            let clamped = v.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
            Self::check(Value::Integer(i64::try_from(clamped).unwrap_or(i64::MAX)))
        }
        fn visit_u128<E: de::Error>(self, _: u128) -> Result<T, E> {
            Self::check(Value::Integer(i64::MAX))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
            Self::check(Value::Float)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            Self::check(Value::String(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<T, E> {
            Self::check(Value::String(v))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Self::check(Value::Array)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Self::check(Value::Table)
        }
    }
    d.deserialize_any(Checked(PhantomData))
}

/// `impl Deserialize` through [`checked`] for each type.
macro_rules! deserialize_checked {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::config::values::checked(d)
            }
        }
    )*};
}
pub(crate) use deserialize_checked;

/// A string value, or the wrong-type error naming what `allowed` says.
/// The value as a string, or the wrong-type error that lists `allowed`.
pub(super) fn string(value: Value, allowed: &str) -> Result<String, Invalid> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(Invalid::wrong_type("a string", &other, allowed)),
    }
}

/// An enum written as one of a fixed set of names; the names are listed once, in `NAMES`, and
/// serve parsing, errors and `as_str`.
pub trait Named: Copy + PartialEq + 'static {
    const NAMES: &'static [(&'static str, Self)];

    /// The name this value is written as.
    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, v)| *v == self)
            .map_or("", |(n, _)| n)
    }
}

impl<T: Named> FromValue for T {
    fn from_value(value: Value) -> Result<T, Invalid> {
        let names: Vec<String> = T::NAMES.iter().map(|(n, _)| format!("{n:?}")).collect();
        let allowed = format!("one of {}", names.join(", "));
        let name = string(value, &allowed)?;
        T::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| Invalid::new(format!("unknown value {}", quote(&name)), allowed))
    }
}

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

/// What an array of `Self` is called and what each element may be, for errors.
pub trait ListElement {
    const LIST: &'static str;
    const ALLOWED: &'static str;
}

/// An array whose elements are each read as a `T` of their own, so an error points at the
/// element; anything but an array is refused with what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct List<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de> + ListElement> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Elements<T>(std::marker::PhantomData<T>);
        fn wrong<T: ListElement, E: de::Error>(found: Value) -> Result<List<T>, E> {
            // Every list of ours holds strings.
            Err(E::custom(Invalid::wrong_type(
                "an array of strings",
                &found,
                T::ALLOWED,
            )))
        }
        impl<'de, T: Deserialize<'de> + ListElement> Visitor<'de> for Elements<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::LIST)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(List(items))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<List<T>, E> {
                wrong(Value::Boolean(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<List<T>, E> {
                wrong(Value::Integer(v))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<List<T>, E> {
                wrong(Value::Integer(i64::MAX))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<List<T>, E> {
                wrong(Value::Float)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<List<T>, E> {
                wrong(Value::String(String::new()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<List<T>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                wrong(Value::Table)
            }
        }
        d.deserialize_any(Elements(std::marker::PhantomData))
    }
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
