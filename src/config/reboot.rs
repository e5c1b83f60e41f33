//! The `[reboot]` table and its `[[reboot.window]]` entries: raw serde types, checked values and
//! the validation into [`RebootSettings`], which the daemon's reboot follower
//! (`crate::daemon::reboot`) acts on.
//!
//! ```toml
//! [reboot]
//! sentinel_file = "/var/run/reboot-required"            # Debian, Ubuntu
//! sentinel_command = ["/usr/bin/needs-restarting", "-r"] # RHEL, Fedora: exit 1 = needed
//! check_interval = "1h"                                 # how often the command runs
//! command_timeout = "1m"                                # how long one run may take
//! update_engine = true                                  # Flatcar
//! time_zone = "Europe/Berlin"                           # or "localtime"; default UTC
//! blocking_pod_selector = "app=backup"                  # kured's: wait while one runs here
//!
//! [[reboot.window]]                                     # zincati's periodic windows
//! days = ["Sat", "Sun"]
//! start_time = "22:30"
//! length_minutes = 120
//! ```

use std::path::PathBuf;
use std::time::Duration;

use jiff::civil::Weekday;
use serde::Deserialize;
use toml::Spanned;

use super::from_value::{
    FromValue, Invalid, List, ListElement, Value, deserialize_checked, quote, string,
};
use super::selector::Selector;
use super::table::{Table, table};
use super::values::{AbsolutePath, DurationIn, Flag, MAX_DURATION_MS, PodSelector, Positive};
use super::{ConfigError, Source};

/// Minutes in a week: a window's longest length, and the weekly calendar's span (from 0,
/// Monday 00:00, to this, excluded; `crate::reboot::window`).
pub const WEEK_MINUTES: u32 = 7 * 24 * 60;

/// One window as configured: a weekday, its start (minutes after midnight) and its length. The
/// windows are judged by `crate::reboot::window::Windows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub day: Weekday,
    /// Minutes after 00:00, below 1440.
    pub start_minute: u32,
    /// From 1 to [`WEEK_MINUTES`].
    pub length_minutes: u32,
}

/// How often `sentinel_command` runs when `check_interval` is not given: kured's `--period`.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(3600);
/// How long one run of `sentinel_command` may take when `command_timeout` is not given;
/// `needs-restarting -r` reads the package database and answers in seconds.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// `[reboot]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReboot {
    /// Default: none.
    pub sentinel_file: Option<AbsolutePath>,
    /// Default: none.
    pub sentinel_command: Option<Spanned<Command>>,
    /// Default: [`DEFAULT_CHECK_INTERVAL`]. Only with `sentinel_command`.
    pub check_interval: Option<Spanned<CheckInterval>>,
    /// Default: [`DEFAULT_COMMAND_TIMEOUT`]. Only with `sentinel_command`; below `check_interval`.
    pub command_timeout: Option<Spanned<Positive>>,
    /// Default: false.
    pub update_engine: Option<Flag>,
    /// Default: "UTC".
    pub time_zone: Option<Spanned<ZoneName>>,
    /// Default: none (no pod holds the reboot).
    pub blocking_pod_selector: Option<Spanned<PodSelector>>,
    /// Default: no window (any time).
    #[serde(default)]
    pub window: Vec<Spanned<WindowEntry>>,
}

/// One `[[reboot.window]]` entry: every key required, as zincati requires them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindow {
    pub days: Option<Spanned<List<Day>>>,
    pub start_time: Option<StartTime>,
    pub length_minutes: Option<LengthMinutes>,
}

/// A `[[reboot.window]]` entry read through [`table`], so a non-table entry is refused by name.
#[derive(Debug)]
pub struct WindowEntry(pub RawWindow);

impl<'de> Deserialize<'de> for WindowEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        table(d).map(WindowEntry)
    }
}

impl Table for RawReboot {
    const EXPECTING: &'static str = "`reboot` to be a [reboot] table (keys sentinel_file, sentinel_command, \
         check_interval, command_timeout, update_engine, time_zone, blocking_pod_selector, window)";
}

impl Table for RawWindow {
    const EXPECTING: &'static str = "each `reboot.window` entry to be a [[reboot.window]] table (keys days, \
         start_time, length_minutes)";
}

/// `check_interval`: from 10s (a command run more often is a poll) to a week.
pub type CheckInterval = DurationIn<10_000, MAX_DURATION_MS>;

/// `sentinel_command`: an argv run without a shell; the program is an absolute path, so what
/// runs does not depend on the daemon's `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command(pub Vec<String>);

const COMMAND_ALLOWED: &str = "an array of strings run without a shell, the first an absolute \
     path, e.g. [\"/usr/bin/needs-restarting\", \"-r\"]";

/// One argument of `sentinel_command`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg(pub String);

impl FromValue for Arg {
    fn from_value(value: Value) -> Result<Arg, Invalid> {
        match value {
            Value::String(s) if s.contains('\0') => Err(Invalid::new(
                format!("{} holds a NUL character", quote(&s)),
                COMMAND_ALLOWED,
            )),
            Value::String(s) => Ok(Arg(s)),
            other => Err(Invalid::wrong_type("a string", &other, COMMAND_ALLOWED)),
        }
    }
}

impl ListElement for Arg {
    const LIST: &'static str = "an array of strings";
    const ALLOWED: &'static str = COMMAND_ALLOWED;
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let List(args) = List::<Arg>::deserialize(d)?;
        match args.first() {
            None => Err(D::Error::custom(Invalid::new(
                "an empty command",
                COMMAND_ALLOWED,
            ))),
            Some(Arg(program)) if !program.starts_with('/') => Err(D::Error::custom(Invalid::new(
                format!("the program {} is not an absolute path", quote(program)),
                COMMAND_ALLOWED,
            ))),
            Some(_) => Ok(Command(args.into_iter().map(|Arg(a)| a).collect())),
        }
    }
}

/// `time_zone`: `"localtime"` (the system's `/etc/localtime`) or a name of the tz database the
/// system has (jiff reads `/usr/share/zoneinfo`), checked when the file is read so a typo is
/// refused at its place rather than when the first window is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneName {
    Local,
    Named(String),
}

impl FromValue for ZoneName {
    fn from_value(value: Value) -> Result<ZoneName, Invalid> {
        const ALLOWED: &str = "\"localtime\" or a name of the tz database, e.g. \"Europe/Berlin\"";
        let name = string(value, ALLOWED)?;
        if name == "localtime" {
            return Ok(ZoneName::Local);
        }
        match jiff::tz::TimeZone::get(&name) {
            Ok(_) if !name.is_empty() => Ok(ZoneName::Named(name)),
            _ => Err(Invalid::new(
                format!("{} is not in the system's tz database", quote(&name)),
                ALLOWED,
            )),
        }
    }
}

/// A weekday as zincati reads it: the C locale's full or three-letter English name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Day(pub Weekday);

const DAYS: [(&str, Weekday); 7] = [
    ("Monday", Weekday::Monday),
    ("Tuesday", Weekday::Tuesday),
    ("Wednesday", Weekday::Wednesday),
    ("Thursday", Weekday::Thursday),
    ("Friday", Weekday::Friday),
    ("Saturday", Weekday::Saturday),
    ("Sunday", Weekday::Sunday),
];

const DAY_ALLOWED: &str = "weekdays as \"Mon\" or \"Monday\" (English, capitalised)";

impl FromValue for Day {
    fn from_value(value: Value) -> Result<Day, Invalid> {
        let name = string(value, DAY_ALLOWED)?;
        DAYS.iter()
            .find(|(full, _)| *full == name || full.get(..3) == Some(name.as_str()))
            .map(|(_, day)| Day(*day))
            .ok_or_else(|| Invalid::new(format!("{} is not a weekday", quote(&name)), DAY_ALLOWED))
    }
}

impl ListElement for Day {
    const LIST: &'static str = "an array of weekdays";
    const ALLOWED: &'static str = DAY_ALLOWED;
}

/// `start_time`: `"hh:mm"`, 24-hour clock, in the windows' zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartTime(pub u32);

impl FromValue for StartTime {
    fn from_value(value: Value) -> Result<StartTime, Invalid> {
        const ALLOWED: &str = "\"hh:mm\" from \"00:00\" to \"23:59\", e.g. \"22:30\"";
        let text = string(value, ALLOWED)?;
        let two_digits = |s: &str| {
            (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        match text.split_once(':') {
            Some((h, m)) => match (two_digits(h), two_digits(m)) {
                (Some(h), Some(m)) if h < 24 && m < 60 => Ok(StartTime(h * 60 + m)),
                _ => Err(Invalid::new(
                    format!("{} is not a time of day", quote(&text)),
                    ALLOWED,
                )),
            },
            None => Err(Invalid::new(
                format!("{} is not a time of day", quote(&text)),
                ALLOWED,
            )),
        }
    }
}

/// `length_minutes`: from 1 to a week (10080); zincati requires a length above zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthMinutes(pub u32);

impl FromValue for LengthMinutes {
    fn from_value(value: Value) -> Result<LengthMinutes, Invalid> {
        let allowed = format!("an integer from 1 to {WEEK_MINUTES} (a week)");
        match value {
            Value::Integer(n) if (1..=i64::from(WEEK_MINUTES)).contains(&n) => {
                Ok(LengthMinutes(u32::try_from(n).unwrap_or(WEEK_MINUTES)))
            }
            Value::Integer(n) => Err(Invalid::new(format!("{n} is out of range"), allowed)),
            other => Err(Invalid::wrong_type("an integer", &other, allowed)),
        }
    }
}

deserialize_checked!(Arg, ZoneName, Day, StartTime, LengthMinutes);

/// The validated `[reboot]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct RebootSettings {
    /// A path whose existence means a reboot is needed.
    pub sentinel_file: Option<PathBuf>,
    pub sentinel_command: Option<SentinelCommand>,
    /// Flatcar's update_engine on the system bus.
    pub update_engine: bool,
    /// The zone the windows are read in.
    pub zone: Zone,
    /// One per configured day of every `[[reboot.window]]`; none means any time.
    pub windows: Vec<Window>,
    /// While a pod it selects runs on this node, the reboot waits (kured's
    /// `--blocking-pod-selector`); see [`crate::reboot::holds`].
    pub blocking_pod_selector: Option<Selector>,
}

impl RebootSettings {
    /// Whether any trigger is set: without one, the node never asks for a reboot.
    pub fn enabled(&self) -> bool {
        self.sentinel_file.is_some() || self.sentinel_command.is_some() || self.update_engine
    }
}

/// `sentinel_command` with its timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelCommand {
    pub argv: Vec<String>,
    pub interval: Duration,
    pub timeout: Duration,
}

/// The windows' time zone; `Local` is resolved from the system when the windows are built
/// (`crate::host::localtime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zone {
    Utc,
    Local,
    Named(String),
}

/// `[reboot]` of the file `src`, validated; a file without `[reboot]` gives the defaults (no
/// trigger). The table's own tests use it; the config file reads `[reboot]` with the rest.
pub fn from_toml(src: &Source<'_>) -> Result<RebootSettings, ConfigError> {
    /// Only `[reboot]` of the file; the rest is the top-level config's.
    #[derive(Deserialize)]
    struct Only {
        #[serde(default, deserialize_with = "table")]
        reboot: RawReboot,
    }
    let only: Only = toml::from_str(src.text).map_err(|e| src.toml_error(&e))?;
    settings(only.reboot, false, src)
}

/// Applies the defaults and the checks that span several keys: timing only with a command, a
/// timeout below the interval, windows, a zone and a blocking pod selector only with a trigger
/// (`agent`: `[fleetlock]` is set, whose update agent is one), every window key given.
pub fn settings(
    raw: RawReboot,
    agent: bool,
    src: &Source<'_>,
) -> Result<RebootSettings, ConfigError> {
    let sentinel_command = sentinel_command(
        raw.sentinel_command,
        raw.check_interval.as_ref(),
        raw.command_timeout.as_ref(),
        src,
    )?;
    let mut windows = Vec::new();
    for (i, entry) in raw.window.iter().enumerate() {
        windows.extend(window(src, i, entry)?);
    }
    let settings = RebootSettings {
        sentinel_file: raw.sentinel_file.map(|AbsolutePath(p)| p),
        sentinel_command,
        update_engine: raw.update_engine.is_some_and(|Flag(b)| b),
        zone: match raw.time_zone.as_ref().map(Spanned::get_ref) {
            None => Zone::Utc,
            Some(ZoneName::Local) => Zone::Local,
            Some(ZoneName::Named(n)) => Zone::Named(n.clone()),
        },
        windows,
        blocking_pod_selector: raw
            .blocking_pod_selector
            .as_ref()
            .map(|s| s.get_ref().0.clone()),
    };
    if !settings.enabled() && !agent {
        only_with_a_trigger(
            &raw.window,
            raw.time_zone.as_ref(),
            raw.blocking_pod_selector.as_ref(),
            src,
        )?;
    }
    Ok(settings)
}

/// `sentinel_command` with its timing: `check_interval` and `command_timeout` only with a
/// command, and the timeout below the interval.
fn sentinel_command(
    command: Option<Spanned<Command>>,
    check_interval: Option<&Spanned<CheckInterval>>,
    command_timeout: Option<&Spanned<Positive>>,
    src: &Source<'_>,
) -> Result<Option<SentinelCommand>, ConfigError> {
    let sentinel_command = match command {
        None => {
            let timing = [
                check_interval.map(|s| ("check_interval", s.span())),
                command_timeout.map(|s| ("command_timeout", s.span())),
            ];
            if let Some((key, span)) = timing.into_iter().flatten().next() {
                return Err(src.invalid(
                    span,
                    &format!("reboot.{key}"),
                    Invalid::new(
                        "it times `sentinel_command`, and there is none",
                        "`sentinel_command = [...]` in [reboot] together with it",
                    ),
                ));
            }
            None
        }
        Some(command) => {
            let interval = check_interval.map_or(DEFAULT_CHECK_INTERVAL, |i| i.get_ref().0);
            let timeout = command_timeout.map_or(DEFAULT_COMMAND_TIMEOUT, |t| t.get_ref().0);
            if timeout >= interval {
                let span = command_timeout.map_or_else(|| command.span(), |t| t.span());
                return Err(src.invalid(
                    span,
                    "reboot.command_timeout",
                    Invalid::new(
                        format!(
                            "{:?} is not below check_interval {:?}",
                            super::format_duration(timeout),
                            super::format_duration(interval)
                        ),
                        "a command_timeout below check_interval, so one run ends before the next",
                    ),
                ));
            }
            Some(SentinelCommand {
                argv: command.into_inner().0,
                interval,
                timeout,
            })
        }
    };
    Ok(sentinel_command)
}

/// Windows, a zone and a blocking pod selector apply only to a node with a trigger (the update
/// agent of `[fleetlock]` is one): refused without one.
fn only_with_a_trigger(
    window: &[Spanned<WindowEntry>],
    time_zone: Option<&Spanned<ZoneName>>,
    blocking_pod_selector: Option<&Spanned<PodSelector>>,
    src: &Source<'_>,
) -> Result<(), ConfigError> {
    let unused = window
        .first()
        .map(|w| ("reboot.window[0]", w.span()))
        .or_else(|| time_zone.map(|z| ("reboot.time_zone", z.span())));
    if let Some((key, span)) = unused {
        return Err(src.invalid(
            span,
            key,
            Invalid::new(
                "windows without a trigger never apply: the node never asks for a reboot",
                NEEDS_A_TRIGGER,
            ),
        ));
    }
    if let Some(selector) = blocking_pod_selector {
        return Err(src.invalid(
            selector.span(),
            "reboot.blocking_pod_selector",
            Invalid::new(
                "a blocking pod selector without a trigger never applies: the node never \
                 asks for a reboot",
                NEEDS_A_TRIGGER,
            ),
        ));
    }
    Ok(())
}

/// What a `[reboot]` without a trigger lacks.
const NEEDS_A_TRIGGER: &str =
    "sentinel_file, sentinel_command or update_engine = true in [reboot], or [fleetlock]";

/// `reboot.window[i]`: one [`Window`] per day.
fn window(
    src: &Source<'_>,
    i: usize,
    entry: &Spanned<WindowEntry>,
) -> Result<Vec<Window>, ConfigError> {
    let w = &entry.get_ref().0;
    let missing = |key: &str, example: &str| {
        src.invalid(
            entry.span(),
            &format!("reboot.window[{i}].{key}"),
            Invalid::new(
                format!("a window needs `{key}`"),
                format!("days, start_time and length_minutes in every window, e.g. {example}"),
            ),
        )
    };
    let Some(days) = &w.days else {
        return Err(missing("days", "days = [\"Sat\", \"Sun\"]"));
    };
    let Some(StartTime(start_minute)) = w.start_time else {
        return Err(missing("start_time", "start_time = \"22:30\""));
    };
    let Some(LengthMinutes(length_minutes)) = w.length_minutes else {
        return Err(missing("length_minutes", "length_minutes = 120"));
    };
    if days.get_ref().0.is_empty() {
        return Err(src.invalid(
            days.span(),
            &format!("reboot.window[{i}].days"),
            Invalid::new(
                "a window on no day never opens",
                "a non-empty array of weekdays, e.g. [\"Sat\", \"Sun\"]",
            ),
        ));
    }
    Ok(days
        .get_ref()
        .0
        .iter()
        .map(|Day(day)| Window {
            day: *day,
            start_minute,
            length_minutes,
        })
        .collect())
}
