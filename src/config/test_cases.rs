//! The per-key table cases of the config tests (`tests.rs`): a bad value or a wrong type for
//! every key, with the position and the words its error must carry.

/// (what, text, line, column, needles in the message)
pub(super) const BAD_VALUES: &[(&str, &str, usize, usize, &[&str])] = &[
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
        "bad daemonsets",
        "[drain]\ndaemonsets = \"stop\"",
        2,
        14,
        &[
            "key `drain.daemonsets`",
            "unknown value \"stop\"",
            "one of \"leave\", \"stop-last\"",
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
        "a condition without its status",
        "[restore]\nwait_for_conditions = [\"NetworkUnavailable\"]",
        2,
        24,
        &[
            "restore.wait_for_conditions",
            "\"NetworkUnavailable\" is not a condition",
            "Type=Status",
        ],
    ),
    (
        "a condition status that is none",
        "[restore]\nwait_for_conditions = [\"Ready=True\", \"Ready=Yes\"]",
        2,
        38,
        &[
            "restore.wait_for_conditions",
            "\"Ready=Yes\" is not a condition",
            "True, False or Unknown",
        ],
    ),
    (
        "a namespace of the wrong type",
        "[filters]\nskip_namespaces = [\"a\", 1]",
        2,
        25,
        &["filters.skip_namespaces", "found an integer", "DNS labels"],
    ),
    (
        "a forecast interval that is neither off nor a duration",
        "[daemon]\nforecast_interval = \"never\"",
        2,
        21,
        &[
            "daemon.forecast_interval",
            "neither \"off\" nor a duration",
            "\"6h\"",
        ],
    ),
    (
        "a forecast interval under a second",
        "[daemon]\nforecast_interval = \"500ms\"",
        2,
        21,
        &["daemon.forecast_interval", "out of range", "from 1s"],
    ),
    (
        "zero scheduled lead",
        "[daemon]\nscheduled_lead = \"0s\"",
        2,
        18,
        &["daemon.scheduled_lead", "out of range"],
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

/// (text, key, needles in the message)
pub(super) const WRONG_TYPES: &[(&str, &str, &[&str])] = &[
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
    (
        "[daemon]\ndrain_when_scheduled = \"yes\"",
        "daemon.drain_when_scheduled",
        &["true or false"],
    ),
    (
        "[restore]\nwait_for_conditions = \"Ready=True\"",
        "restore.wait_for_conditions",
        &["expected an array of strings, found a string"],
    ),
    (
        "[restore]\nwait_for_pods = \"\"",
        "restore.wait_for_pods",
        &["an empty selector"],
    ),
];

/// A refusal a table's cases expect: (text, line, column, key, the start of the problem).
pub(super) type Refusal<'a> = (&'a str, usize, usize, &'a str, &'a str);

/// The cases of `bad` that `parse` did not refuse as expected (in `/etc/x.toml`, at the line
/// and column, under the key, with a problem starting as given), one line each: empty when
/// every case holds.
pub(super) fn unexpected_refusals<T: std::fmt::Debug>(
    bad: &[Refusal<'_>],
    parse: impl Fn(&str) -> Result<T, super::ConfigError>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (text, line, column, key, problem) in bad {
        match parse(text) {
            Err(super::ConfigError::Invalid {
                path,
                line: l,
                column: c,
                key: k,
                problem: p,
            }) if path == std::path::Path::new("/etc/x.toml")
                && (l, c, k.as_str()) == (*line, *column, *key)
                && p.starts_with(problem) => {}
            other => wrong.push(format!("{text:?}: {other:?}")),
        }
    }
    wrong
}
