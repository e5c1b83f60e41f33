//! The table tests of `[reboot]` and `[[reboot.window]]`: defaults, a full table, every bad value
//! with its file, line, column, key and what is allowed; and `[reboot]` still refused by the
//! top-level file until the daemon acts on it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::civil::Weekday;

use super::reboot::Window;
use super::reboot::{
    DEFAULT_CHECK_INTERVAL, DEFAULT_COMMAND_TIMEOUT, RebootSettings, SentinelCommand, Zone,
    from_toml,
};
use super::test_cases::{Refusal, unexpected_refusals};
use super::{ConfigError, Source};

fn parse(text: &str) -> Result<RebootSettings, ConfigError> {
    from_toml(&Source {
        path: Path::new("/etc/x.toml"),
        text,
    })
}

#[test]
fn no_reboot_table_means_no_trigger_and_any_time_in_utc() {
    let s = parse("").unwrap();
    assert!(!s.enabled());
    assert_eq!(s.zone, Zone::Utc);
    assert!(s.windows.is_empty());
    assert_eq!(parse("[reboot]\nupdate_engine = false").unwrap(), s);
}

#[test]
fn a_full_reboot_table_reads_every_trigger_and_one_window_per_day() {
    let s = parse(
        r#"
[reboot]
sentinel_file = "/var/run/reboot-required"
sentinel_command = ["/usr/bin/needs-restarting", "-r"]
update_engine = true
time_zone = "Europe/Berlin"

[[reboot.window]]
days = ["Sat", "Sunday"]
start_time = "22:30"
length_minutes = 120

[[reboot.window]]
days = ["Wed"]
start_time = "00:05"
length_minutes = 10080
"#,
    )
    .unwrap();
    assert!(s.enabled());
    assert_eq!(
        s.sentinel_file,
        Some(PathBuf::from("/var/run/reboot-required"))
    );
    assert_eq!(
        s.sentinel_command,
        Some(SentinelCommand {
            argv: vec!["/usr/bin/needs-restarting".into(), "-r".into()],
            interval: DEFAULT_CHECK_INTERVAL,
            timeout: DEFAULT_COMMAND_TIMEOUT,
        })
    );
    assert!(s.update_engine);
    assert_eq!(s.zone, Zone::Named("Europe/Berlin".into()));
    let w = |day, start_minute, length_minutes| Window {
        day,
        start_minute,
        length_minutes,
    };
    assert_eq!(
        s.windows,
        vec![
            w(Weekday::Saturday, 22 * 60 + 30, 120),
            w(Weekday::Sunday, 22 * 60 + 30, 120),
            w(Weekday::Wednesday, 5, 10080),
        ]
    );
    let s = parse(
        "[reboot]\nsentinel_command = [\"/bin/check\"]\ncheck_interval = \"10m\"\n\
         command_timeout = \"30s\"\ntime_zone = \"localtime\"",
    )
    .unwrap();
    let command = s.sentinel_command.unwrap();
    assert_eq!(command.interval, Duration::from_secs(600));
    assert_eq!(command.timeout, Duration::from_secs(30));
    assert_eq!(s.zone, Zone::Local);
}

/// kured's `--blocking-pod-selector`: a selector in the string form of `kubectl -l`, parsed by
/// the selector the rest of the file uses; none by default.
#[test]
fn a_blocking_pod_selector_is_read_as_a_label_selector() {
    let s = parse("[reboot]\nupdate_engine = true").unwrap();
    assert_eq!(s.blocking_pod_selector, None);
    let s = parse(
        "[reboot]\nsentinel_file = \"/run/reboot-required\"\n\
         blocking_pod_selector = \"app in (backup, restore),!canary\"",
    )
    .unwrap();
    let selector = s.blocking_pod_selector.expect("a selector");
    assert_eq!(selector.to_string(), "app in (backup, restore),!canary");
    let labels = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(selector.matches(&labels(&[("app", "backup")])));
    assert!(!selector.matches(&labels(&[("app", "backup"), ("canary", "")])));
    assert!(!selector.matches(&labels(&[("app", "web")])));
}

/// Every refusal: (text, line, column, key, the problem and what is allowed).
const BAD: &[Refusal<'_>] = &[
    (
        "[reboot]\nsentinel_file = \"run/reboot-required\"",
        2,
        17,
        "reboot.sentinel_file",
        "\"run/reboot-required\" is not an absolute path; allowed: an absolute path",
    ),
    (
        "[reboot]\nsentinel_command = []",
        2,
        20,
        "reboot.sentinel_command",
        "an empty command; allowed: an array of strings run without a shell, the first an \
         absolute path, e.g. [\"/usr/bin/needs-restarting\", \"-r\"]",
    ),
    (
        "[reboot]\nsentinel_command = [\"needs-restarting\", \"-r\"]",
        2,
        20,
        "reboot.sentinel_command",
        "the program \"needs-restarting\" is not an absolute path; allowed: an array of strings",
    ),
    (
        "[reboot]\nsentinel_command = \"/usr/bin/needs-restarting -r\"",
        2,
        20,
        "reboot.sentinel_command",
        "expected an array of strings, found a string; allowed: an array of strings run without \
         a shell",
    ),
    (
        "[reboot]\nsentinel_command = [\"/bin/x\", 1]",
        2,
        31,
        "reboot.sentinel_command",
        "expected a string, found an integer",
    ),
    (
        "[reboot]\nsentinel_file = \"/run/r\"\ncheck_interval = \"1h\"",
        3,
        18,
        "reboot.check_interval",
        "it times `sentinel_command`, and there is none; allowed: `sentinel_command = [...]` in \
         [reboot] together with it",
    ),
    (
        "[reboot]\nsentinel_command = [\"/bin/x\"]\ncheck_interval = \"5s\"",
        3,
        18,
        "reboot.check_interval",
        "\"5s\" is out of range; allowed: a duration from 10s to 168h",
    ),
    (
        "[reboot]\nsentinel_command = [\"/bin/x\"]\ncheck_interval = \"1m\"\ncommand_timeout = \"1m\"",
        4,
        19,
        "reboot.command_timeout",
        "\"1m\" is not below check_interval \"1m\"; allowed: a command_timeout below check_interval",
    ),
    (
        "[reboot]\nupdate_engine = \"yes\"",
        2,
        17,
        "reboot.update_engine",
        "expected a boolean, found a string; allowed: true or false",
    ),
    (
        "[reboot]\nupdate_engine = true\ntime_zone = \"Mars/Olympus_Mons\"",
        3,
        13,
        "reboot.time_zone",
        "\"Mars/Olympus_Mons\" is not in the system's tz database; allowed: \"localtime\" or a \
         name of the tz database, e.g. \"Europe/Berlin\"",
    ),
    (
        "[reboot]\nupdate_engine = true\ntime_zone = \"\"",
        3,
        13,
        "reboot.time_zone",
        "\"\" is not in the system's tz database",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = [\"Sat\", \"sat\"]\n\
         start_time = \"22:30\"\nlength_minutes = 60",
        4,
        16,
        "reboot.window[0].days",
        "\"sat\" is not a weekday; allowed: weekdays as \"Mon\" or \"Monday\" (English, \
         capitalised)",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = []\n\
         start_time = \"22:30\"\nlength_minutes = 60",
        4,
        8,
        "reboot.window[0].days",
        "a window on no day never opens; allowed: a non-empty array of weekdays",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = [\"Sat\"]\n\
         start_time = \"24:00\"\nlength_minutes = 60",
        5,
        14,
        "reboot.window[0].start_time",
        "\"24:00\" is not a time of day; allowed: \"hh:mm\" from \"00:00\" to \"23:59\"",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = [\"Sat\"]\n\
         start_time = \"9:30\"\nlength_minutes = 60",
        5,
        14,
        "reboot.window[0].start_time",
        "\"9:30\" is not a time of day",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = [\"Sat\"]\n\
         start_time = \"22:30\"\nlength_minutes = 0",
        6,
        18,
        "reboot.window[0].length_minutes",
        "0 is out of range; allowed: an integer from 1 to 10080 (a week)",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = [\"Sat\"]\n\
         start_time = \"22:30\"\nlength_minutes = 10081",
        6,
        18,
        "reboot.window[0].length_minutes",
        "10081 is out of range",
    ),
    (
        "[reboot]\nupdate_engine = true\n[[reboot.window]]\ndays = [\"Sat\"]\n\
         start_time = \"22:30\"\nlength_minutes = 60\n[[reboot.window]]\ndays = [\"Sun\"]\n\
         length_minutes = 60",
        7,
        1,
        "reboot.window[1].start_time",
        "a window needs `start_time`; allowed: days, start_time and length_minutes in every \
         window, e.g. start_time = \"22:30\"",
    ),
    (
        "[reboot]\ntime_zone = \"UTC\"\n[[reboot.window]]\ndays = [\"Sat\"]\n\
         start_time = \"22:30\"\nlength_minutes = 60",
        3,
        1,
        "reboot.window[0]",
        "windows without a trigger never apply: the node never asks for a reboot; allowed: \
         sentinel_file, sentinel_command or update_engine = true in [reboot], or [fleetlock]",
    ),
    (
        "[reboot]\ntime_zone = \"UTC\"",
        2,
        13,
        "reboot.time_zone",
        "windows without a trigger never apply",
    ),
    (
        "[reboot]\nupdate_engine = true\nblocking_pod_selector = \"app in (a\"",
        3,
        25,
        "reboot.blocking_pod_selector",
        "invalid label selector \"app in (a\": missing ')'; allowed: a label selector such as",
    ),
    (
        "[reboot]\nupdate_engine = true\nblocking_pod_selector = \" \"",
        3,
        25,
        "reboot.blocking_pod_selector",
        "an empty selector matches every pod; allowed: a non-empty label selector",
    ),
    (
        "[reboot]\nupdate_engine = true\nblocking_pod_selector = [\"app=backup\"]",
        3,
        25,
        "reboot.blocking_pod_selector",
        "expected a string, found an array",
    ),
    (
        "[reboot]\nblocking_pod_selector = \"app=backup\"",
        2,
        25,
        "reboot.blocking_pod_selector",
        "a blocking pod selector without a trigger never applies: the node never asks for a \
         reboot; allowed: sentinel_file, sentinel_command or update_engine = true in [reboot], \
         or [fleetlock]",
    ),
];

/// zincati's FleetLock requests are a trigger: with `[fleetlock]` alone, the windows, the zone
/// and the blocking pod selector apply to its reboots (they replace zincati's own windows).
#[test]
fn windows_a_zone_and_a_blocking_selector_apply_with_fleetlock_as_the_only_trigger() {
    let text = "[fleetlock]\nlisten = \"127.0.0.1:9753\"\n[reboot]\ntime_zone = \"UTC\"\n\
                blocking_pod_selector = \"app=backup\"\n[[reboot.window]]\ndays = [\"Sat\"]\n\
                start_time = \"22:30\"\nlength_minutes = 60";
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text,
    };
    let s = super::from_toml(&src, Ok("n1")).unwrap().reboot;
    assert!(!s.enabled(), "no trigger of [reboot]'s own");
    assert_eq!(s.windows.len(), 1);
    assert_eq!(s.zone, Zone::Named("UTC".into()));
    assert!(s.blocking_pod_selector.is_some());
}

#[test]
fn every_bad_reboot_value_is_refused_at_its_place_with_what_is_allowed() {
    let wrong = unexpected_refusals(BAD, parse);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // A misspelt key is refused where it stands, as in every table of the file.
    let err = parse("[reboot]\nupdate_engine = true\nwindows = []").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/etc/x.toml:3:1: unknown field `windows`, expected one of"),
        "{err}"
    );
}

/// The config file reads `[reboot]` into the settings the daemon's reboot follower uses.
#[test]
fn the_config_file_reads_the_reboot_table() {
    let text = "[reboot]\nsentinel_file = \"/var/run/reboot-required\"\n\
                blocking_pod_selector = \"app=backup\"\n\
                [[reboot.window]]\ndays = [\"Sat\"]\nstart_time = \"22:30\"\nlength_minutes = 60";
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text,
    };
    let settings = super::from_toml(&src, Ok("n1")).unwrap();
    assert_eq!(
        settings.reboot.sentinel_file.as_deref(),
        Some(Path::new("/var/run/reboot-required"))
    );
    assert_eq!(settings.reboot.windows.len(), 1);
    assert!(settings.reboot.blocking_pod_selector.is_some());
    // A bad value is refused with the file's position, as in every other table.
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text: "[reboot]\nsentinel_file = \"relative\"",
    };
    let err = super::from_toml(&src, Ok("n1")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/etc/x.toml:2:17: key `reboot.sentinel_file`: \"relative\" is not"),
        "{err}"
    );
    // Without [reboot] the node never asks for a reboot.
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text: "",
    };
    assert!(!super::from_toml(&src, Ok("n1")).unwrap().reboot.enabled());
}
