//! The table tests of the config file: defaults, every bad value with its file, line, column,
//! key and what is allowed, and the bounds.

use std::path::Path;

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
    assert_eq!(s.daemon.release_margin, Duration::from_secs(5));
    assert_eq!(s.daemon.restore_ready_timeout, Duration::from_secs(600));
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

/// (what, text, line, column, needles in the message)
const BAD_VALUES: &[(&str, &str, usize, usize, &[&str])] = &[
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

/// (text, key, needles in the message)
const WRONG_TYPES: &[(&str, &str, &[&str])] = &[
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
    fn round_trip<T: values::Named + std::fmt::Debug + serde::Serialize>(all: &[T]) {
        assert_eq!(T::NAMES.len(), all.len());
        for v in all {
            let name = v.name();
            assert!(!name.is_empty(), "{v:?}");
            let read = <T as values::FromValue>::from_value(values::Value::String(name.into()));
            assert_eq!(read.ok(), Some(*v));
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(name));
        }
    }
    use TaintEffect::*;
    round_trip(&[PreferNoSchedule, NoSchedule, NoExecute]);
    round_trip(&[Policy::Evict, Policy::Skip]);
    round_trip(&[OnDeadline::Report, OnDeadline::Delete]);
    use values::{ActionName, Named};
    for a in [
        ActionName::Drain,
        ActionName::Skip,
        ActionName::WaitCompleted,
    ] {
        let read =
            <ActionName as values::FromValue>::from_value(values::Value::String(a.name().into()));
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
