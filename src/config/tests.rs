//! The table tests of the config file: defaults, every bad value with its file, line, column,
//! key and what is allowed, and the bounds.

use std::path::Path;

use super::test_cases::{BAD_VALUES, WRONG_TYPES};
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
    assert_eq!(s.drain.daemonsets, DaemonSetPolicy::Leave);
    assert_eq!(s.daemon.release_margin, Duration::from_secs(5));
    assert_eq!(s.daemon.restore_ready_timeout, Duration::from_secs(600));
    assert!(s.daemon.drain_when_scheduled);
    assert_eq!(s.daemon.scheduled_lead, s.drain.timeout);
    assert_eq!(s.daemon.forecast_interval, None);
}

#[test]
fn the_scheduled_lead_follows_the_drain_timeout_unless_given_and_the_forecast_interval_reads_off() {
    let s = parse("[drain]\ntimeout = \"90s\"\n[daemon]\nforecast_interval = \"off\"").unwrap();
    assert_eq!(s.daemon.scheduled_lead, Duration::from_secs(90));
    assert_eq!(s.daemon.forecast_interval, None);
    let s = parse(
        "[daemon]\ndrain_when_scheduled = false\nscheduled_lead = \"10m\"\nforecast_interval = \"6h\"",
    )
    .unwrap();
    assert!(!s.daemon.drain_when_scheduled);
    assert_eq!(s.daemon.scheduled_lead, Duration::from_secs(600));
    assert_eq!(
        s.daemon.forecast_interval,
        Some(Duration::from_secs(6 * 3600))
    );
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
    for (what, text, line, column, needles) in BAD_VALUES {
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
fn wrong_types_name_the_key() {
    for (text, key, needles) in WRONG_TYPES {
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
        (
            "restore = [\"app=cni\"]",
            "`restore` to be a [restore] table",
        ),
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

/// serde builds a struct from a sequence as readily as from a map: a table given as an array
/// (`taint = [false, "a/b", "x", "NoExecute"]`) would be read positionally. Every table refuses
/// one, naming its key at the array (issue 23).
#[test]
fn tables_given_as_arrays_are_refused_naming_the_key() {
    let cases: &[(&str, &str, usize, &str)] = &[
        (
            "taint = [false, \"a/b\", \"x\", \"NoExecute\"]",
            "taint",
            9,
            "[taint] table",
        ),
        (
            "shutdown = [\"none\", \"none\"]",
            "shutdown",
            12,
            "[shutdown] table",
        ),
        ("filters = [true]", "filters", 11, "[filters] table"),
        ("drain = [10]", "drain", 9, "[drain] table"),
        ("daemon = [\"5s\"]", "daemon", 10, "[daemon] table"),
        ("metrics = [\"/x\"]", "metrics", 11, "[metrics] table"),
        // The entry itself: the inner array.
        (
            "rules = [[\"a=b\", [\"ns\"], \"skip\"]]",
            "rules",
            10,
            "each `rules` entry to be a [[rules]] table",
        ),
    ];
    for (text, key, column, needle) in cases {
        let msg = parse(text).expect_err(text).to_string();
        let prefix = format!("/etc/x.toml:1:{column}: key `{key}`: ");
        assert!(
            msg.starts_with(&prefix),
            "{text:?}: {msg:?} lacks {prefix:?}"
        );
        assert!(
            msg.contains("found an array") || msg.contains("sequence"),
            "{text:?}: {msg}"
        );
        assert!(msg.contains(needle), "{text:?}: {msg:?} lacks {needle:?}");
    }
}

/// A key given twice is named, with the table it is in, at its second place.
#[test]
fn a_duplicate_key_is_named() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("node_name = \"a\"\nnode_name = \"b\"", 2, 1, "node_name"),
        (
            "[drain]\ntimeout = \"5s\"\n# a comment [x]\ntimeout = \"6s\"",
            4,
            1,
            "drain.timeout",
        ),
        (
            "[drain]\ntimeout = \"5s\"\n[drain]\nconcurrency = 2",
            3,
            2,
            "drain",
        ),
        (
            "drain.timeout = \"5s\"\ndrain.timeout = \"6s\"",
            2,
            7,
            "drain.timeout",
        ),
        (
            "[[rules]]\naction = \"skip\"\n[[rules]]\naction = \"skip\"\naction = \"drain\"",
            5,
            1,
            "rules[1].action",
        ),
    ];
    for (text, line, column, key) in cases {
        let msg = parse(text).expect_err(text).to_string();
        let prefix = format!("/etc/x.toml:{line}:{column}: key `{key}`: given twice");
        assert!(
            msg.starts_with(&prefix),
            "{text:?}: {msg:?} lacks {prefix:?}"
        );
        assert!(msg.contains("; allowed: "), "{text:?}: {msg}");
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

/// However long a value is, an error repeats at most 200 characters of it.
#[test]
fn errors_echo_at_most_200_characters_of_a_value() {
    let long = "Z".repeat(100_000);
    let cases = [
        format!("node_name = \"{long}\""),
        format!("kubeconfig = \"{long}\""),
        format!("[taint]\nkey = \"{long}\""),
        format!("[taint]\neffect = \"{long}\""),
        format!("[drain]\ntimeout = \"{long}\""),
        format!("[filters]\nskip_selector = \"{long}\""),
        format!("[filters]\nskip_namespaces = [\"{long}\"]"),
        format!("{long} = 1"),
        format!("[drain]\n{long} = 1"),
        format!("taint = \"{long}\""),
    ];
    for text in &cases {
        let msg = parse(text).expect_err(&text[..40]).to_string();
        assert!(msg.len() < 700, "{} bytes: {}", msg.len(), &msg[..300]);
        assert!(msg.starts_with("/etc/x.toml:"), "{}", &msg[..300]);
    }
    let msg = parse(&cases[0]).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("\"{}\"... (100000 characters)", "Z".repeat(200))),
        "{msg}"
    );
}

/// A key inside an inline table is named as if the table were written out.
#[test]
fn keys_in_inline_tables_are_named_in_full() {
    let msg = parse("taint = { enabled = \"yes\" }")
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("/etc/x.toml:1:21: key `taint.enabled`: expected a boolean"),
        "{msg}"
    );
    let msg = parse("rules = [{ selector = \"a\", action = \"go\" }]")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("key `rules[0].action`: unknown value \"go\""),
        "{msg}"
    );
}

/// Each enum's names are listed once (`Named::NAMES`): every variant is there, reads back as
/// itself, and serializes as the same name.
#[test]
fn enum_names_are_listed_once_and_round_trip() {
    fn round_trip<T: from_value::Named + std::fmt::Debug + serde::Serialize>(all: &[T]) {
        assert_eq!(T::NAMES.len(), all.len());
        for v in all {
            let name = v.name();
            assert!(!name.is_empty(), "{v:?}");
            let read =
                <T as from_value::FromValue>::from_value(from_value::Value::String(name.into()));
            assert_eq!(read.ok(), Some(*v));
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(name));
        }
    }
    use TaintEffect::*;
    round_trip(&[PreferNoSchedule, NoSchedule, NoExecute]);
    round_trip(&[Policy::Evict, Policy::Skip]);
    round_trip(&[OnDeadline::Report, OnDeadline::Delete]);
    round_trip(&[DaemonSetPolicy::Leave, DaemonSetPolicy::StopLast]);
    use from_value::Named;
    use values::ActionName;
    for a in [
        ActionName::Drain,
        ActionName::Skip,
        ActionName::WaitCompleted,
    ] {
        let read = <ActionName as from_value::FromValue>::from_value(from_value::Value::String(
            a.name().into(),
        ));
        assert_eq!(read.ok(), Some(a));
    }
    assert_eq!(NoExecute.as_str(), "NoExecute");
}

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
    let path = "/var/lib/node_exporter/textfile_collector/k.prom";
    assert_eq!(
        parse(&format!("[metrics]\ntextfile = \"{path}\""))
            .unwrap()
            .metrics
            .textfile,
        Some(std::path::PathBuf::from(path))
    );
    for bad in ["\"k.prom\"", "\"/tmp/k.txt\"", "1"] {
        let e = parse(&format!("[metrics]\ntextfile = {bad}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2:12") && e.contains("key `metrics.textfile`") && e.contains(".prom"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn shutdown_policies_default_to_drain_and_each_kind_is_set_on_its_own() {
    let s = parse("").unwrap().shutdown;
    for p in [
        s.reboot,
        s.poweroff,
        s.halt,
        s.kexec,
        s.soft_reboot,
        s.unknown,
    ] {
        assert_eq!(p, ShutdownPolicy::Drain);
    }
    let s = parse(
        "[shutdown]\nreboot = \"none\"\npoweroff = \"cordon\"\nsoft_reboot = \"none\"\n\
         unknown = \"cordon\"",
    )
    .unwrap()
    .shutdown;
    assert_eq!(
        (
            s.reboot,
            s.poweroff,
            s.halt,
            s.kexec,
            s.soft_reboot,
            s.unknown
        ),
        (
            ShutdownPolicy::None,
            ShutdownPolicy::Cordon,
            ShutdownPolicy::Drain,
            ShutdownPolicy::Drain,
            ShutdownPolicy::None,
            ShutdownPolicy::Cordon
        )
    );
}

#[test]
fn a_bad_shutdown_policy_or_kind_names_the_key_and_the_choices() {
    let e = parse("[shutdown]\nhalt = \"evict\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("2:8")
            && e.contains("key `shutdown.halt`")
            && e.contains("\"drain\", \"cordon\", \"none\""),
        "{e}"
    );
    let e = parse("[shutdown]\npower_off = \"none\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("power_off") && e.contains("soft_reboot"), "{e}");
}

#[test]
fn the_reboot_gate_is_off_by_default_and_needs_drain_slots() {
    assert!(!parse("").unwrap().fleet.gate);
    let s = parse("[fleet]\nslots = 2\ngate = true").unwrap();
    assert!(s.fleet.gate);
    let e = parse("[fleet]\ngate = true").unwrap_err().to_string();
    assert!(
        e.contains("2:8") && e.contains("key `fleet.gate`") && e.contains("slots = N"),
        "{e}"
    );
    assert!(!parse("[fleet]\ngate = false").unwrap().fleet.gate);
}

#[test]
fn the_release_delay_is_zero_by_default_and_shorter_than_hold_max() {
    assert_eq!(parse("").unwrap().fleet.release_delay, Duration::ZERO);
    let s = parse("[fleet]\nslots = 1\nrelease_delay = \"5m\"").unwrap();
    assert_eq!(s.fleet.release_delay, Duration::from_secs(300));
    assert_eq!(
        parse("[fleet]\nrelease_delay = \"0s\"")
            .unwrap()
            .fleet
            .release_delay,
        Duration::ZERO
    );
    let e = parse("[fleet]\nrelease_delay = \"1m\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key `fleet.release_delay`") && e.contains("slots = N"),
        "{e}"
    );
    let e = parse("[fleet]\nslots = 1\nhold_max = \"10m\"\nrelease_delay = \"10m\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("4:17")
            && e.contains("key `fleet.release_delay`")
            && e.contains("hold_max is 600 s")
            && e.contains("shorter than `hold_max`"),
        "{e}"
    );
    let e = parse("[fleet]\nslots = 1\nrelease_delay = \"200h\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn settle_max_lies_between_the_release_delay_and_hold_max() {
    let fleet = |text: &str| parse(text).map(|s| s.fleet.settle_max);
    assert_eq!(fleet("").unwrap(), Duration::from_secs(1800));
    // The default is at most half of hold_max, and never below the release delay.
    assert_eq!(
        fleet("[fleet]\nslots = 1\nhold_max = \"20m\"").unwrap(),
        Duration::from_secs(600)
    );
    assert_eq!(
        fleet("[fleet]\nslots = 1\nhold_max = \"20m\"\nrelease_delay = \"15m\"").unwrap(),
        Duration::from_secs(900)
    );
    assert_eq!(
        fleet("[fleet]\nslots = 1\nsettle_max = \"10m\"").unwrap(),
        Duration::from_secs(600)
    );
    assert_eq!(
        fleet("[fleet]\nsettle_max = \"0s\"").unwrap(),
        Duration::ZERO
    );
    for bad in [
        "settle_max = \"1h\"",
        "release_delay = \"5m\"\nsettle_max = \"1m\"",
    ] {
        let e = fleet(&format!("[fleet]\nslots = 1\n{bad}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("key `fleet.settle_max`") && e.contains("not between release_delay"),
            "{e}"
        );
    }
}
