//! Table tests of the holds' judge with fixed instants: every reason alone and all together, a
//! failed read as `unknown` (never a "may go"), the blocking pods by phase, node and labels, a
//! window closed and open in Europe/Berlin, a drain estimated past the window's close, and the
//! forecast counted only with `[daemon] forecast_interval`.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::Weekday::Saturday;
use jiff::tz::TimeZone;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::holds::{
    Alerts, Context, Estimate, EstimateFrom, ForecastSaid, Group, Holds, Key, PAUSE_LEASE, Pause,
    Pods, Seen, judge, past_close,
};
use super::window::{Window, Windows};
use crate::api::ApiError;
use crate::api::error::{Cause, Kind};
use crate::config::reboot::RebootSettings;
use crate::config::selector::Selector;
use crate::config::{FleetSettings, Settings};
use crate::forecast::{Forecast, TimeLimitView, Verdict};
use crate::report::Report;

const NODE: &str = "n1";
const NS: &str = "kube-shutdown-drain";

fn at(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("{text} is not an instant: {e}"))
}

// 2026-12-04 is a Friday. The window: Saturdays 22:30 for 120 minutes in Europe/Berlin (CET,
// UTC+1 in December), so open from 2026-12-05T21:30Z to 2026-12-05T23:30Z.
const CLOSED: &str = "2026-12-04T12:00:00Z";
const OPEN: &str = "2026-12-05T22:00:00Z";
const OPENS: &str = "Sat 2026-12-05 22:30 CET (Europe/Berlin)";

fn berlin() -> TimeZone {
    TimeZone::get("Europe/Berlin").expect("the tz database has Europe/Berlin")
}

fn saturday_night() -> Windows {
    Windows::new(
        berlin(),
        &[Window {
            day: Saturday,
            start_minute: 22 * 60 + 30,
            length_minutes: 120,
        }],
    )
}

fn node(annotations: Value, managed_fields: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": NODE, "annotations": annotations, "managedFields": managed_fields}
    }))
    .unwrap()
}

/// `n1` as an admin's `kubectl annotate` (field manager `kubectl-annotate`) leaves it.
fn held_by_kubectl(value: &str) -> Node {
    node(
        json!({"kube-shutdown-drain/hold": value}),
        json!([{
            "manager": "kubectl-annotate", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:kube-shutdown-drain/hold": {}}}}
        }]),
    )
}

fn pause_lease() -> Pause {
    Pause::Present(Box::new(
        serde_json::from_value::<Lease>(json!({
            "metadata": {
                "name": PAUSE_LEASE, "namespace": NS,
                "creationTimestamp": "2026-12-04T08:00:00Z",
                "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                    "apiVersion": "coordination.k8s.io/v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]
            },
            "spec": {}
        }))
        .unwrap(),
    ))
}

fn pod(name: &str, node: &str, labels: Value, phase: Option<&str>) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "work", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
    });
    if let Some(phase) = phase {
        p["status"] = json!({"phase": phase});
    }
    serde_json::from_value(p).unwrap()
}

fn backup(name: &str, phase: &str) -> Pod {
    pod(name, NODE, json!({"app": "backup"}), Some(phase))
}

fn forbidden(object: &str) -> ApiError {
    ApiError::new(
        object,
        "http://127.0.0.1:1",
        Kind::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "forbidden".into(),
            retry_after: None,
        },
    )
}

fn refused(object: &str) -> ApiError {
    ApiError::new(
        object,
        "http://127.0.0.1:1",
        Kind::Transport(Cause::ConnectionRefused),
    )
}

fn selector() -> Selector {
    Selector::parse("app=backup").unwrap()
}

/// Nothing read against the node: no annotation, no pause, no pod.
fn clear() -> Seen {
    Seen {
        node: Ok(node(json!({"other": "x"}), json!([]))),
        pause: Pause::Absent,
        pods: Pods::Listed(vec![pod(
            "web",
            NODE,
            json!({"app": "web"}),
            Some("Running"),
        )]),
        group: Group::NotAsked,
        alerts: Alerts::NotAsked,
    }
}

/// `[fleet]` without `max_unready` or `[fleet.alerts]`.
fn no_gates() -> &'static FleetSettings {
    static FLEET: std::sync::LazyLock<FleetSettings> =
        std::sync::LazyLock::new(FleetSettings::default);
    &FLEET
}

fn context<'a>(windows: &'a Windows, selector: Option<&'a Selector>) -> Context<'a> {
    Context {
        node: NODE,
        lease_namespace: NS,
        blocking_pod_selector: selector,
        windows,
        forecast: None,
        estimate: None,
        fleet: no_gates(),
        gates: true,
    }
}

const BLOCKED: ForecastSaid<'static> = ForecastSaid {
    verdict: Verdict::Blocked,
    summary: "blocked: budget work/db allows 0 disruptions (pod work/db-0)",
};

fn keys(h: &Holds) -> Vec<&'static str> {
    h.reasons.iter().map(|r| r.key.as_str()).collect()
}

#[test]
fn the_keys_are_stable_names() {
    let names: Vec<&str> = Key::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "held",
            "paused",
            "blocking_pods",
            "outside_window",
            "forecast_blocks",
            "unready_nodes",
            "alerts_firing",
            "hook",
            "unknown"
        ]
    );
    assert_eq!(Key::BlockingPods.to_string(), "blocking_pods");
}

#[test]
fn nothing_read_against_a_node_in_its_window_lets_it_go() {
    let windows = saturday_night();
    let sel = selector();
    let h = judge(&context(&windows, Some(&sel)), &clear(), at(OPEN));
    assert!(h.may_go(), "{h}");
    assert!(h.keys().is_empty());
    assert_eq!(h.to_string(), "nothing holds the reboot of node n1");
    let any = Windows::any_time();
    assert!(judge(&context(&any, None), &clear(), at(CLOSED)).may_go());
}

/// One row: what differs from a clear node in its window, the keys, and what the messages say.
struct Row {
    name: &'static str,
    seen: fn() -> Seen,
    selector: bool,
    forecast: Option<ForecastSaid<'static>>,
    estimate: Option<Estimate>,
    now: &'static str,
    keys: &'static [&'static str],
    says: &'static [&'static str],
}

const fn row(name: &'static str, seen: fn() -> Seen) -> Row {
    Row {
        name,
        seen,
        selector: true,
        forecast: None,
        estimate: None,
        now: OPEN,
        keys: &[],
        says: &[],
    }
}

/// Every row of [`every_reason_alone`], theme by theme.
fn rows() -> Vec<Row> {
    [
        hold_rows(),
        pause_and_pod_rows(),
        window_and_forecast_rows(),
        unknown_rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The node held by its annotation, said by its field manager or by its value.
fn hold_rows() -> Vec<Row> {
    vec![
        Row {
            keys: &["held"],
            says: &[
                "node n1 is held by its annotation kube-shutdown-drain/hold (set by field \
                 manager kubectl-annotate): remove the annotation to let it reboot",
            ],
            ..row("held, said by its field manager", || Seen {
                node: Ok(held_by_kubectl("kernel patch friday")),
                ..clear()
            })
        },
        Row {
            keys: &["held"],
            says: &["(value \"kernel patch friday\")"],
            ..row("held, no managedFields: said by its value", || Seen {
                node: Ok(node(
                    json!({"kube-shutdown-drain/hold": "kernel patch friday"}),
                    json!([]),
                )),
                ..clear()
            })
        },
        Row {
            keys: &["held"],
            says: &["(value \"ticket [2J OPS-1 xxx", "xxx ...\"): remove"],
            ..row("held, a value with control characters and no end", || {
                Seen {
                    node: Ok(node(
                        json!({"kube-shutdown-drain/hold": format!("ticket\u{1b}[2J OPS-1 {}", "x".repeat(300))}),
                        json!([]),
                    )),
                    ..clear()
                }
            })
        },
        Row {
            keys: &["held"],
            says: &["(empty, and the server names no field manager)"],
            ..row("held by an empty value", || Seen {
                node: Ok(node(json!({"kube-shutdown-drain/hold": ""}), json!([]))),
                ..clear()
            })
        },
    ]
}

/// The fleet paused, and the pods that block (or would, with a selector).
fn pause_and_pod_rows() -> Vec<Row> {
    vec![
        Row {
            keys: &["paused"],
            says: &[
                "the fleet's reboots are paused by Lease kube-shutdown-drain/kube-shutdown-drain-pause \
                 since 2026-12-04T08:00:00Z (written by field manager kubectl-client-side-apply): \
                 node n1 waits until it is deleted",
            ],
            ..row("paused", || Seen {
                pause: pause_lease(),
                ..clear()
            })
        },
        Row {
            keys: &["blocking_pods"],
            says: &[
                "node n1 runs 1 pod selected by blocking_pod_selector \"app=backup\": work/backup-1",
            ],
            ..row("a blocking pod", || Seen {
                pods: Pods::Listed(vec![backup("backup-1", "Running")]),
                ..clear()
            })
        },
        Row {
            selector: false,
            ..row("a pod that would block, without a selector", || Seen {
                pods: Pods::NotAsked,
                ..clear()
            })
        },
    ]
}

/// The maintenance window, the drain's estimate against it, and the forecast.
fn window_and_forecast_rows() -> Vec<Row> {
    vec![
        Row {
            now: CLOSED,
            keys: &["outside_window"],
            says: &[
                "node n1 is outside its maintenance windows: the next opens Sat 2026-12-05 22:30 \
                 CET (Europe/Berlin)",
            ],
            ..row("outside the window", clear)
        },
        Row {
            estimate: Some(Estimate {
                drain: Duration::from_secs(2 * 3600),
                from: EstimateFrom::Forecast,
            }),
            keys: &["outside_window"],
            says: &[
                "node n1's drain, estimated at 2h by the forecast, would end Sun 2026-12-06 \
                 01:00 CET (Europe/Berlin), after its maintenance window closes Sun 2026-12-06 \
                 00:30 CET (Europe/Berlin): it does not start in this window",
            ],
            ..row("a drain estimated past the window's close", clear)
        },
        Row {
            estimate: Some(Estimate {
                drain: Duration::from_secs(90 * 60),
                from: EstimateFrom::LastReport,
            }),
            ..row("a drain estimated to end at the window's close", clear)
        },
        Row {
            forecast: Some(BLOCKED),
            keys: &["forecast_blocks"],
            says: &[
                "the forecast for node n1 says its drain would block: blocked: budget work/db \
                 allows 0 disruptions (pod work/db-0)",
            ],
            ..row("the forecast blocks", clear)
        },
        Row {
            forecast: Some(ForecastSaid {
                verdict: Verdict::CutAtDeadline,
                summary: "cut",
            }),
            ..row("a forecast cut at the deadline holds nothing", clear)
        },
    ]
}

/// What could not be read, or was not asked: each says so, as `unknown`.
fn unknown_rows() -> Vec<Row> {
    vec![
        Row {
            keys: &["unknown"],
            says: &[
                "cannot tell whether node n1 is held (kube-shutdown-drain/hold): node n1: API \
                 server http://127.0.0.1:1 unreachable: connection refused",
            ],
            ..row("the Node unreadable", || Seen {
                node: Err(refused("node n1")),
                ..clear()
            })
        },
        Row {
            keys: &["unknown"],
            says: &[
                "cannot tell whether the fleet is paused (Lease \
                 kube-shutdown-drain/kube-shutdown-drain-pause), so node n1 waits: Lease \
                 kube-shutdown-drain/kube-shutdown-drain-pause: ",
                "forbidden",
            ],
            ..row("the pause Lease forbidden", || Seen {
                pause: Pause::Unreadable(forbidden(
                    "Lease kube-shutdown-drain/kube-shutdown-drain-pause",
                )),
                ..clear()
            })
        },
        Row {
            keys: &["unknown"],
            says: &[
                "cannot tell whether pods selected by blocking_pod_selector \"app=backup\" run \
                 on node n1: pods of node n1: API server http://127.0.0.1:1 unreachable: connection \
                 refused",
            ],
            ..row("the pods unreadable", || Seen {
                pods: Pods::Unreadable(refused("pods of node n1")),
                ..clear()
            })
        },
        Row {
            keys: &["unknown"],
            says: &["the pods of node n1 were not read for blocking_pod_selector \"app=backup\""],
            ..row("a selector whose pods were not read", || Seen {
                pods: Pods::NotAsked,
                ..clear()
            })
        },
    ]
}

#[test]
fn every_reason_alone() {
    let windows = saturday_night();
    let sel = selector();
    let mut wrong = Vec::new();
    for r in rows() {
        let cx = Context {
            forecast: r.forecast,
            estimate: r.estimate,
            ..context(&windows, r.selector.then_some(&sel))
        };
        let h = judge(&cx, &(r.seen)(), at(r.now));
        let text = h.to_string();
        if keys(&h) != r.keys || !r.says.iter().all(|s| text.contains(s)) {
            wrong.push(format!(
                "{}: keys {:?}, want {:?}; says {text:?}, want {:?}",
                r.name,
                keys(&h),
                r.keys,
                r.says
            ));
        }
        assert_eq!(h.may_go(), r.keys.is_empty(), "{}", r.name);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_reason_together_in_their_order() {
    let windows = saturday_night();
    let sel = selector();
    let cx = Context {
        forecast: Some(BLOCKED),
        ..context(&windows, Some(&sel))
    };
    let seen = Seen {
        node: Ok(held_by_kubectl("x")),
        pause: pause_lease(),
        pods: Pods::Listed(vec![backup("backup-1", "Running")]),
        ..clear()
    };
    let h = judge(&cx, &seen, at(CLOSED));
    assert_eq!(
        keys(&h),
        [
            "held",
            "paused",
            "blocking_pods",
            "outside_window",
            "forecast_blocks"
        ]
    );
    assert_eq!(
        h.keys(),
        [
            Key::Held,
            Key::Paused,
            Key::BlockingPods,
            Key::OutsideWindow,
            Key::ForecastBlocks
        ]
    );
    assert!(!h.may_go());
    assert_eq!(h.to_string().matches("; ").count(), 4, "{h}");
    // Every read failed, outside the window: three unknowns where their reasons would stand,
    // and the window still judged.
    let seen = Seen {
        node: Err(refused("node n1")),
        pause: Pause::Unreadable(refused(
            "Lease kube-shutdown-drain/kube-shutdown-drain-pause",
        )),
        pods: Pods::Unreadable(refused("pods of node n1")),
        ..clear()
    };
    let h = judge(&cx, &seen, at(CLOSED));
    assert_eq!(
        keys(&h),
        [
            "unknown",
            "unknown",
            "unknown",
            "outside_window",
            "forecast_blocks"
        ]
    );
    assert_eq!(
        h.keys(),
        [Key::OutsideWindow, Key::ForecastBlocks, Key::Unknown],
        "each key once, in the order of Key::ALL"
    );
}

/// kured's rule: a selected pod on this node holds in any phase but Succeeded and Failed; a pod
/// on another node or not selected never does.
#[test]
fn blocking_pods_by_phase_node_and_labels() {
    let windows = Windows::any_time();
    let sel = selector();
    let cx = context(&windows, Some(&sel));
    let cases: Vec<(&str, Pod, bool)> = vec![
        ("running", backup("b", "Running"), true),
        ("pending", backup("b", "Pending"), true),
        ("unknown phase", backup("b", "Unknown"), true),
        (
            "no status yet",
            pod("b", NODE, json!({"app": "backup"}), None),
            true,
        ),
        ("completed", backup("b", "Succeeded"), false),
        ("failed", backup("b", "Failed"), false),
        (
            "on another node",
            pod("b", "n2", json!({"app": "backup"}), Some("Running")),
            false,
        ),
        (
            "not bound",
            serde_json::from_value(json!({"metadata": {"name": "b", "namespace": "work",
                "labels": {"app": "backup"}}, "spec": {"containers": []}}))
            .unwrap(),
            false,
        ),
        (
            "not selected",
            pod("b", NODE, json!({"app": "web"}), Some("Running")),
            false,
        ),
        (
            "no labels",
            pod("b", NODE, Value::Null, Some("Running")),
            false,
        ),
    ];
    for (what, p, holds) in cases {
        let seen = Seen {
            pods: Pods::Listed(vec![p]),
            ..clear()
        };
        let h = judge(&cx, &seen, at(CLOSED));
        assert_eq!(h.keys() == [Key::BlockingPods], holds, "{what}: {h}");
    }
    // Many: each named up to ten, the rest counted; the finished ones left out.
    let mut pods: Vec<Pod> = (0..12)
        .map(|i| backup(&format!("b{i:02}"), "Running"))
        .collect();
    pods.push(backup("done", "Succeeded"));
    let seen = Seen {
        pods: Pods::Listed(pods),
        ..clear()
    };
    let text = judge(&cx, &seen, at(CLOSED)).to_string();
    assert!(
        text.starts_with(
            "node n1 runs 12 pods selected by blocking_pod_selector \"app=backup\": work/b00, \
             work/b01,"
        ),
        "{text}"
    );
    assert!(text.ends_with("work/b09 and 2 more"), "{text}");
    assert!(!text.contains("done"), "{text}");
}

/// Closed and open at fixed instants, in the windows' zone; the next opening said in it.
#[test]
fn the_window_closed_and_open_at_fixed_instants() {
    let windows = saturday_night();
    let cx = context(&windows, None);
    for (now, open, says) in [
        ("2026-12-04T12:00:00Z", false, OPENS),
        ("2026-12-05T21:29:59Z", false, OPENS),
        ("2026-12-05T21:30:00Z", true, ""),
        ("2026-12-05T23:29:59Z", true, ""),
        // Closed at 00:30 CET: the next is a week later.
        (
            "2026-12-05T23:30:00Z",
            false,
            "Sat 2026-12-12 22:30 CET (Europe/Berlin)",
        ),
    ] {
        let h = judge(&cx, &clear(), at(now));
        assert_eq!(h.may_go(), open, "{now}: {h}");
        if !open {
            assert_eq!(h.keys(), [Key::OutsideWindow], "{now}");
            assert!(h.to_string().ends_with(says), "{now}: {h}");
        }
    }
    // In UTC the zone is said once.
    let utc = Windows::new(
        TimeZone::UTC,
        &[Window {
            day: Saturday,
            start_minute: 22 * 60 + 30,
            length_minutes: 120,
        }],
    );
    let h = judge(&context(&utc, None), &clear(), at(CLOSED));
    assert!(
        h.to_string()
            .ends_with("the next opens Sat 2026-12-05 22:30 UTC"),
        "{h}"
    );
}

/// A drain that would end after the window's close does not start; one that ends at the close
/// does. The estimate's source is said.
#[test]
fn a_drain_estimated_past_the_close_does_not_start() {
    let zone = berlin();
    let closes = at("2026-12-05T23:30:00Z");
    let now = at("2026-12-05T23:00:00Z");
    let est = |secs, from| Estimate {
        drain: Duration::from_secs(secs),
        from,
    };
    assert_eq!(
        past_close(NODE, &zone, now, &est(1800, EstimateFrom::Forecast), closes),
        None,
        "ending at the close fits"
    );
    let late = past_close(
        NODE,
        &zone,
        now,
        &est(1801, EstimateFrom::LastReport),
        closes,
    )
    .expect("a second past the close");
    assert_eq!(late.key, Key::OutsideWindow);
    assert_eq!(
        late.message,
        "node n1's drain, estimated at 1801s by the last drain's report, would end Sun \
         2026-12-06 00:30 CET (Europe/Berlin), after its maintenance window closes Sun \
         2026-12-06 00:30 CET (Europe/Berlin): it does not start in this window"
    );
    // An estimate too long for any clock still holds, and does not panic.
    assert!(
        past_close(
            NODE,
            &zone,
            now,
            &est(u64::MAX, EstimateFrom::Forecast),
            closes
        )
        .is_some()
    );
    // Windows that never close (none configured) never cut a drain.
    let any = Windows::any_time();
    let cx = Context {
        estimate: Some(est(7 * 24 * 3600, EstimateFrom::Forecast)),
        ..context(&any, None)
    };
    assert!(judge(&cx, &clear(), now).may_go());
}

fn forecast(verdict: Verdict, estimate_seconds: Option<f64>) -> Forecast {
    Forecast {
        node: NODE.into(),
        verdict,
        summary: "s".into(),
        time_limit: TimeLimitView {
            drain_seconds: 60.0,
            drain_timeout_seconds: 60.0,
            logind_max_seconds: 90.0,
            release_margin_seconds: 5.0,
            logind: "read from logind".into(),
        },
        estimate_seconds,
        pods: Vec::new(),
        blocking_budgets: Vec::new(),
        volumes: Vec::new(),
        fixes: Vec::new(),
        assumptions: Vec::new(),
    }
}

#[test]
fn estimates_from_the_forecast_or_a_complete_drain() {
    assert_eq!(
        Estimate::from_forecast(&forecast(Verdict::Completes, Some(90.5))),
        Some(Estimate {
            drain: Duration::from_millis(90_500),
            from: EstimateFrom::Forecast
        })
    );
    assert_eq!(
        Estimate::from_forecast(&forecast(Verdict::Blocked, None)),
        None
    );
    assert_eq!(
        Estimate::from_forecast(&forecast(Verdict::Completes, Some(-1.0))),
        None
    );
    let report = |complete: bool, dry_run: bool| -> Report {
        serde_json::from_value(json!({
            "node": NODE, "why": "reboot", "started_at": "2026-12-04T12:00:00Z",
            "duration_ms": 125_000, "complete": complete, "deadline_reached": !complete,
            "dry_run": dry_run,
            "counts": {"evicted": 0, "deleted": 0, "gone": 0, "completed": 0, "skipped": 0,
                "blocked": 0, "failed": 0, "pending": 0},
            "pods": []
        }))
        .unwrap()
    };
    assert_eq!(
        Estimate::from_report(&report(true, false)),
        Some(Estimate {
            drain: Duration::from_secs(125),
            from: EstimateFrom::LastReport
        })
    );
    assert_eq!(Estimate::from_report(&report(false, false)), None);
    assert_eq!(Estimate::from_report(&report(true, true)), None);
}

/// The forecast holds only when the daemon makes them (`[daemon] forecast_interval`); the
/// context takes the node, the namespace and the selector from the configuration.
#[test]
fn the_context_counts_the_forecast_only_with_a_forecast_interval() {
    let reboot = RebootSettings {
        blocking_pod_selector: Some(selector()),
        ..crate::config::reboot::from_toml(&crate::config::Source {
            path: Path::new("/t.toml"),
            text: "[reboot]\nupdate_engine = true",
        })
        .unwrap()
    };
    let windows = Windows::any_time();
    let without = Settings::from_str_at(Path::new("/t.toml"), "node_name = \"n1\"\n").unwrap();
    let with = Settings::from_str_at(
        Path::new("/t.toml"),
        "node_name = \"n1\"\n[fleet]\nlease_namespace = \"ops\"\n[daemon]\nforecast_interval = \"10m\"\n",
    )
    .unwrap();
    let cx = Context::new(&without, &reboot, &windows, Some(BLOCKED), None);
    assert_eq!(cx.forecast, None);
    assert!(judge(&cx, &clear(), at(CLOSED)).may_go());
    let cx = Context::new(&with, &reboot, &windows, Some(BLOCKED), None);
    assert_eq!(cx.forecast, Some(BLOCKED));
    assert_eq!(
        (cx.node, cx.lease_namespace, cx.blocking_pod_selector),
        ("n1", "ops", Some(&selector()))
    );
    assert_eq!(
        judge(&cx, &clear(), at(CLOSED)).keys(),
        [Key::ForecastBlocks]
    );
}
