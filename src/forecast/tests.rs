//! The forecast's verdicts as a table over pure inputs: each blocked kind, each cut kind, and
//! nodes that complete; each case also checks that the text names every blocking budget and its
//! fix.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::time_limit::compute;

const NODE: &str = "node-a";

fn settings(extra: &str) -> Settings {
    Settings::from_str_at(
        Path::new("/etc/kube-shutdown-drain/config.toml"),
        &format!("node_name = \"{NODE}\"\n{extra}"),
    )
    .unwrap()
}

/// A Ready ReplicaSet pod `name` (labels app=`app`) on node-a with a 30 s grace period.
fn pod(name: &str, app: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "work", "uid": format!("uid-{name}"),
            "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-rs"),
                "uid": format!("{app}-rs"), "controller": true}]},
        "spec": {"nodeName": NODE, "containers": [{"name": "c"}], "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn with(mut v: Value, patch: Value) -> Value {
    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    if v.is_null() {
                        a.remove(&k);
                    } else {
                        merge(a.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (a, b) => *a = b,
        }
    }
    merge(&mut v, patch);
    v
}

fn unready(v: Value) -> Value {
    with(
        v,
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    )
}

/// A budget over app=`app` with `spec` and the status numbers (allowed, current, desired,
/// expected).
fn pdb(name: &str, app: &str, spec: Value, n: (i32, i32, i32, i32)) -> Value {
    with(
        json!({
            "metadata": {"name": name, "namespace": "work", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": n.0, "currentHealthy": n.1,
                "desiredHealthy": n.2, "expectedPods": n.3}
        }),
        json!({ "spec": spec }),
    )
}

fn node(name: &str, patch: Value) -> Value {
    with(
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        patch,
    )
}

/// One case: the objects, the config, logind's maximum, the last report; what is expected.
struct Case {
    name: &'static str,
    pods: Vec<Value>,
    budgets: Vec<Value>,
    nodes: Option<Vec<Value>>,
    config: &'static str,
    logind_max: u64,
    last: Option<Value>,
    node: Verdict,
    /// (pod, verdict, reason)
    want: Vec<(&'static str, Verdict, &'static str)>,
    /// Words the text must hold (budget names, fixes).
    says: Vec<&'static str>,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            name: "",
            pods: vec![],
            budgets: vec![],
            nodes: Some(vec![node(NODE, json!({})), node("node-b", json!({}))]),
            config: "",
            logind_max: 150,
            last: None,
            node: Verdict::Completes,
            want: vec![],
            says: vec![],
        }
    }
}

fn run(c: &Case) -> Forecast {
    let s = settings(c.config);
    let pods: Vec<Pod> = c
        .pods
        .iter()
        .map(|p| serde_json::from_value(p.clone()).unwrap())
        .collect();
    let budgets: Vec<PodDisruptionBudget> = c
        .budgets
        .iter()
        .map(|b| serde_json::from_value(b.clone()).unwrap())
        .collect();
    let nodes: Option<Vec<Node>> = c.nodes.as_ref().map(|ns| {
        ns.iter()
            .map(|n| serde_json::from_value(n.clone()).unwrap())
            .collect()
    });
    let last: Option<Report> = c
        .last
        .as_ref()
        .map(|r| serde_json::from_value(r.clone()).unwrap());
    let plan = Plan::build(&s, &pods);
    let time_limit = compute(
        s.drain.timeout,
        Duration::from_secs(c.logind_max),
        s.daemon.release_margin,
    );
    forecast(&Inputs {
        settings: &s,
        plan: &plan,
        pods: &pods,
        budgets: &budgets,
        nodes: nodes.as_deref(),
        time_limit: &time_limit,
        logind: Logind::Read,
        last: last.as_ref(),
        now: "2026-12-01T10:00:00Z".parse().unwrap(),
    })
}

fn report_row(name: &str, started: u64, finished: u64) -> Value {
    json!({"namespace": "work", "name": name, "action": "evict", "reason": "priority", "order": 0,
        "outcome": "evicted", "attempts": 1, "started_ms": started, "finished_ms": finished})
}

fn last_report(pods: Vec<Value>) -> Value {
    json!({"node": NODE, "why": "shutdown", "started_at": "2026-11-30T10:00:00Z", "duration_ms": 3000,
        "complete": true, "deadline_reached": false, "dry_run": false,
        "counts": {"evicted": 1, "deleted": 0, "gone": 0, "completed": 0, "skipped": 0, "blocked": 0,
            "failed": 0, "pending": 0},
        "pods": pods, "blocked_by": [], "volumes": [], "errors": []})
}

#[test]
fn budget_arithmetic_decides_a_pod_s_verdict() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "no budget, 30 s grace, 145 s budget",
            pods: vec![pod("web-1", "web")],
            want: vec![("web-1", Completes, "completes")],
            ..Case::default()
        },
        Case {
            name: "a budget that allows a disruption",
            pods: vec![pod("web-1", "web")],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 2}), (1, 3, 2, 3))],
            want: vec![("web-1", Completes, "completes")],
            says: vec!["budget work/web allows 1 disruption(s) now"],
            ..Case::default()
        },
        Case {
            name: "a budget at 0 now (one of its pods elsewhere is not Ready)",
            pods: vec![pod("web-1", "web")],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 2}), (0, 2, 2, 3))],
            node: Blocked,
            want: vec![("web-1", Blocked, "budget-at-zero")],
            says: vec![
                "work/web",
                "needs 2 healthy pods and has 2",
                "set minAvailable to 1 or less on work/web",
            ],
            ..Case::default()
        },
        Case {
            name: "minAvailable equal to the expected pods",
            pods: vec![pod("db-0", "db")],
            budgets: vec![pdb("db", "db", json!({"minAvailable": 3}), (0, 3, 3, 3))],
            node: Blocked,
            want: vec![("db-0", Blocked, "budget-never-allows")],
            says: vec![
                "minAvailable 3, not less than its 3 expected pods",
                "set minAvailable to 2 or less on work/db, or run more than 3 replicas",
            ],
            ..Case::default()
        },
        Case {
            name: "maxUnavailable 0",
            pods: vec![pod("db-0", "db")],
            budgets: vec![pdb("db", "db", json!({"maxUnavailable": 0}), (0, 3, 3, 3))],
            node: Blocked,
            want: vec![("db-0", Blocked, "budget-never-allows")],
            says: vec![
                "maxUnavailable 0",
                "set maxUnavailable to 1 or more on work/db",
            ],
            ..Case::default()
        },
        Case {
            name: "minAvailable 90% of 3 rounds up to 3",
            pods: vec![pod("db-0", "db")],
            budgets: vec![pdb(
                "db",
                "db",
                json!({"minAvailable": "90%"}),
                (0, 3, 3, 3),
            )],
            node: Blocked,
            want: vec![("db-0", Blocked, "budget-never-allows")],
            says: vec![
                "rounds up to 3",
                "set minAvailable to 66% or less on work/db",
            ],
            ..Case::default()
        },
        Case {
            name: "a pod without a controller under maxUnavailable: nothing expected",
            pods: vec![with(
                pod("lonely", "lonely"),
                json!({"metadata": {"ownerReferences": null}}),
            )],
            budgets: vec![pdb(
                "lonely",
                "lonely",
                json!({"maxUnavailable": 1}),
                (0, 1, 0, 0),
            )],
            config: "[filters]\nunreplicated = \"evict\"\n",
            node: Blocked,
            want: vec![("lonely", Blocked, "budget-counts-no-pods")],
            says: vec![
                "counts 0 expected pods",
                "set an integer minAvailable on work/lonely",
            ],
            ..Case::default()
        },
    ]);
}

#[test]
fn a_replacement_needs_a_node_it_can_run_on() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "every replica here, the other node cordoned",
            pods: vec![pod("web-1", "web"), pod("web-2", "web")],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 1}), (1, 2, 1, 2))],
            nodes: Some(vec![
                node(NODE, json!({})),
                node("node-b", json!({"spec": {"unschedulable": true}})),
                node(
                    "node-c",
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                ),
                node(
                    "node-d",
                    json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}),
                ),
            ]),
            node: Blocked,
            want: vec![
                ("web-1", Completes, "completes"),
                ("web-2", Blocked, "no-replacement"),
            ],
            says: vec![
                "node-b: cordoned",
                "node-c: not Ready",
                "node-d: taint dedicated:NoSchedule",
                "uncordon or add a node that web-1 can run on",
                "set minAvailable to 0 or less on work/web",
            ],
            ..Case::default()
        },
        Case {
            name: "the only other node has a NoExecute taint: no replacement, as with NoSchedule",
            pods: vec![pod("web-1", "web"), pod("web-2", "web")],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 1}), (1, 2, 1, 2))],
            nodes: Some(vec![
                node(NODE, json!({})),
                node(
                    "node-b",
                    json!({"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}}),
                ),
            ]),
            node: Blocked,
            want: vec![
                ("web-1", Completes, "completes"),
                ("web-2", Blocked, "no-replacement"),
            ],
            says: vec!["node-b: taint maintenance:NoExecute"],
            ..Case::default()
        },
        Case {
            name: "a NoExecute taint the pods tolerate leaves room for the replacement",
            pods: vec![
                with(
                    pod("web-1", "web"),
                    json!({"spec": {"tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]}}),
                ),
                with(
                    pod("web-2", "web"),
                    json!({"spec": {"tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}]}}),
                ),
            ],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 1}), (1, 2, 1, 2))],
            nodes: Some(vec![
                node(NODE, json!({})),
                node(
                    "node-b",
                    json!({"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}}),
                ),
            ]),
            want: vec![
                ("web-1", Completes, "completes"),
                ("web-2", Completes, "completes"),
            ],
            ..Case::default()
        },
        Case {
            name: "every replica here, a replacement can run on node-b",
            pods: vec![pod("web-1", "web"), pod("web-2", "web")],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 1}), (1, 2, 1, 2))],
            want: vec![
                ("web-1", Completes, "completes"),
                ("web-2", Completes, "completes"),
            ],
            says: vec![
                "once 1 replacement(s) are Ready elsewhere",
                "assumed: a replacement is Ready 10 s",
            ],
            ..Case::default()
        },
    ]);
}

#[test]
fn pods_go_in_rounds_of_replacements() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "each further pod waits for the replacement of the one a round before it",
            pods: vec![
                pod("web-1", "web"),
                with(
                    pod("web-2", "web"),
                    json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
                ),
                pod("web-3", "web"),
            ],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 2}), (1, 3, 2, 3))],
            node: Blocked,
            want: vec![
                ("web-1", Completes, "completes"),
                ("web-2", Completes, "completes"),
                ("web-3", Blocked, "no-replacement"),
            ],
            says: vec![
                "web-2 gets none",
                "node-b: no label disk=ssd (nodeSelector)",
            ],
            ..Case::default()
        },
        Case {
            name: "a pod without a controller under an integer minAvailable: no replacement",
            pods: vec![
                with(
                    pod("a", "bare"),
                    json!({"metadata": {"ownerReferences": null}}),
                ),
                with(
                    pod("b", "bare"),
                    json!({"metadata": {"ownerReferences": null}}),
                ),
            ],
            budgets: vec![pdb(
                "bare",
                "bare",
                json!({"minAvailable": 1}),
                (1, 2, 1, 2),
            )],
            node: Blocked,
            want: vec![
                ("a", Completes, "completes"),
                ("b", Blocked, "no-replacement"),
            ],
            says: vec!["it has no controller", "run a under a controller"],
            ..Case::default()
        },
    ]);
}

#[test]
fn unhealthy_and_unselected_pods_go_as_the_disruption_controller_lets_them() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "an unhealthy pod under IfHealthyBudget while the budget is short",
            pods: vec![unready(pod("web-1", "web"))],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 2}), (0, 1, 2, 3))],
            node: Blocked,
            want: vec![("web-1", Blocked, "unhealthy-if-healthy-budget")],
            says: vec!["set spec.unhealthyPodEvictionPolicy: AlwaysAllow on work/web"],
            ..Case::default()
        },
        Case {
            name: "an unhealthy pod under minAvailable 0 while no pod is healthy",
            pods: vec![unready(pod("web-1", "web"))],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 0}), (0, 0, 0, 1))],
            node: Blocked,
            want: vec![("web-1", Blocked, "unhealthy-if-healthy-budget")],
            ..Case::default()
        },
        Case {
            name: "a budget of another namespace does not select the pod",
            pods: vec![pod("web-1", "web")],
            budgets: vec![with(
                pdb("web", "web", json!({"maxUnavailable": 0}), (0, 3, 3, 3)),
                json!({"metadata": {"namespace": "other"}}),
            )],
            want: vec![("web-1", Completes, "completes")],
            says: vec!["no budget selects it"],
            ..Case::default()
        },
        Case {
            name: "an unhealthy pod under AlwaysAllow",
            pods: vec![unready(pod("web-1", "web"))],
            budgets: vec![pdb(
                "web",
                "web",
                json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
                (0, 1, 2, 3),
            )],
            want: vec![("web-1", Completes, "completes")],
            says: vec!["AlwaysAllow lets it go"],
            ..Case::default()
        },
        Case {
            name: "an unhealthy pod while the budget has its healthy pods",
            pods: vec![unready(pod("web-1", "web"))],
            budgets: vec![pdb("web", "web", json!({"minAvailable": 2}), (0, 2, 2, 3))],
            want: vec![("web-1", Completes, "completes")],
            ..Case::default()
        },
    ]);
}

#[test]
fn which_budgets_select_a_pod_and_whether_they_are_processed() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "two budgets over one pod",
            pods: vec![pod("shared", "shared")],
            budgets: vec![
                pdb("by-app", "shared", json!({"minAvailable": 0}), (1, 1, 0, 1)),
                // An empty selector selects every pod of its namespace.
                {
                    let mut b = pdb("by-tier", "x", json!({"minAvailable": 0}), (1, 1, 0, 1));
                    b["spec"]["selector"] = json!({});
                    b
                },
            ],
            node: Blocked,
            want: vec![("shared", Blocked, "several-budgets")],
            says: vec![
                "budgets work/by-app and work/by-tier all select it",
                "HTTP 500",
                "narrow the selectors of work/by-app, work/by-tier",
            ],
            ..Case::default()
        },
        Case {
            name: "a budget without a selector selects nothing",
            pods: vec![pod("web-1", "web")],
            budgets: vec![with(
                pdb("none", "web", json!({"maxUnavailable": 0}), (0, 0, 0, 0)),
                json!({"spec": {"selector": null}}),
            )],
            want: vec![("web-1", Completes, "completes")],
            ..Case::default()
        },
        Case {
            name: "a budget the disruption controller has not processed",
            pods: vec![pod("web-1", "web")],
            budgets: vec![with(
                pdb("web", "web", json!({"minAvailable": 1}), (1, 3, 1, 3)),
                json!({"metadata": {"generation": 2}}),
            )],
            node: Blocked,
            want: vec![("web-1", Blocked, "budget-not-observed")],
            says: vec![
                "has not processed budget work/web",
                "kube-controller-manager",
            ],
            ..Case::default()
        },
        Case {
            name: "a Pending pod goes without a budget check",
            pods: vec![with(
                pod("web-1", "web"),
                json!({"status": {"phase": "Pending", "conditions": null}}),
            )],
            budgets: vec![pdb(
                "web",
                "web",
                json!({"maxUnavailable": 0}),
                (0, 0, 1, 1),
            )],
            want: vec![("web-1", Completes, "completes")],
            says: vec!["without a budget check"],
            ..Case::default()
        },
    ]);
}

#[test]
fn grace_periods_are_judged_against_the_time_limit() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "a 600 s grace period in a 145 s budget",
            pods: vec![with(
                pod("slow", "slow"),
                json!({"spec": {"terminationGracePeriodSeconds": 600}}),
            )],
            node: CutAtDeadline,
            want: vec![("slow", CutAtDeadline, "grace-longer-than-time-left")],
            says: vec![
                "its grace period is 600 s, longer than the 119.5 s left",
                "fit_grace_to_deadline",
                "lower its terminationGracePeriodSeconds to 119 or less",
                "set [drain] timeout = \"601s\"",
                "InhibitDelayMaxSec=606",
            ],
            ..Case::default()
        },
        Case {
            name: "logind's default 5 s and a 30 s grace period",
            pods: vec![pod("web-1", "web")],
            logind_max: 5,
            node: CutAtDeadline,
            want: vec![("web-1", CutAtDeadline, "grace-longer-than-time-left")],
            says: vec![
                "InhibitDelayMaxSec=125",
                "below the 125 s the drain timeout needs",
            ],
            ..Case::default()
        },
        Case {
            name: "the last drain measured it fast: a 600 s grace period fits",
            pods: vec![with(
                pod("slow-6d4cf-abcde", "slow"),
                json!({"metadata": {"generateName": "slow-6d4cf-"}, "spec": {"terminationGracePeriodSeconds": 600}}),
            )],
            last: Some(last_report(vec![report_row("slow-6d4cf-zzzzz", 100, 2100)])),
            want: vec![("slow-6d4cf-abcde", Completes, "completes")],
            ..Case::default()
        },
        Case {
            name: "the last drain measured it slow",
            pods: vec![pod("web-1", "web")],
            last: Some(last_report(vec![report_row("web-1", 0, 130_000)])),
            node: CutAtDeadline,
            want: vec![("web-1", CutAtDeadline, "slow-in-last-drain")],
            says: vec!["it took 130 s in the last drain, longer than the 119.5 s left"],
            ..Case::default()
        },
    ]);
}

#[test]
fn order_groups_waits_and_terminating_pods_take_their_time() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "a later order group waits behind a blocked pod",
            pods: vec![
                with(pod("db-0", "db"), json!({"spec": {"priority": 0}})),
                with(pod("web-1", "web"), json!({"spec": {"priority": 100}})),
            ],
            budgets: vec![pdb("db", "db", json!({"maxUnavailable": 0}), (0, 3, 3, 3))],
            node: Blocked,
            want: vec![
                ("db-0", Blocked, "budget-never-allows"),
                ("web-1", CutAtDeadline, "behind-blocked-group"),
            ],
            says: vec![
                "order group 100 starts only when group 0 is done",
                "work/db-0",
            ],
            ..Case::default()
        },
        Case {
            name: "a wait-completed pod still running",
            pods: vec![with(
                pod("job", "job"),
                json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "wait-completed"}}}),
            )],
            node: CutAtDeadline,
            want: vec![("job", CutAtDeadline, "waits-for-completion")],
            says: vec!["let it finish before the shutdown"],
            ..Case::default()
        },
        Case {
            name: "a terminating pod whose deletion runs past the budget",
            pods: vec![with(
                pod("old", "old"),
                json!({"metadata": {"deletionTimestamp": "2026-12-01T10:05:00Z"}}),
            )],
            node: CutAtDeadline,
            want: vec![("old", CutAtDeadline, "terminating-past-deadline")],
            says: vec!["300 s more"],
            ..Case::default()
        },
        Case {
            name: "a terminating pod gone well within the budget",
            pods: vec![with(
                pod("old", "old"),
                json!({"metadata": {"deletionTimestamp": "2026-12-01T10:00:20Z"}}),
            )],
            want: vec![("old", Completes, "completes")],
            ..Case::default()
        },
        Case {
            name: "on_deadline = delete deletes a blocked pod at the deadline",
            pods: vec![pod("db-0", "db")],
            budgets: vec![pdb("db", "db", json!({"minAvailable": 3}), (0, 3, 3, 3))],
            config: "[drain]\non_deadline = \"delete\"\n",
            node: CutAtDeadline,
            want: vec![("db-0", CutAtDeadline, "deleted-at-deadline")],
            says: vec![
                "work/db",
                "ignoring the budget",
                "set minAvailable to 2 or less on work/db",
            ],
            ..Case::default()
        },
    ]);
}

#[test]
fn volumes_detach_within_the_time_limit_or_not() {
    use Verdict::*;
    verdicts_as_each_case_says(&[
        Case {
            name: "a volume that would detach past the deadline",
            pods: vec![with(
                pod("db-0", "db"),
                json!({"spec": {"terminationGracePeriodSeconds": 115,
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}}),
            )],
            node: CutAtDeadline,
            want: vec![("db-0", CutAtDeadline, "detach-past-deadline")],
            says: vec![
                "volumes to detach: work/data-db-0",
                "data-db-0",
                "volumes detach 10 s after",
            ],
            ..Case::default()
        },
        Case {
            name: "a volume that detaches in time",
            pods: vec![with(
                pod("db-0", "db"),
                json!({"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}}),
            )],
            want: vec![("db-0", Completes, "completes")],
            says: vec!["volumes to detach: work/data-db-0"],
            ..Case::default()
        },
    ]);
}

/// Checks each case: the node's verdict, each pod's verdict, reason and fix, every blocking
/// budget named with its fix in the text, and the words the case asks for.
fn verdicts_as_each_case_says(cases: &[Case]) {
    for c in cases {
        let f = run(c);
        let text = f.to_text();
        assert_eq!(f.verdict, c.node, "{}: node verdict\n{text}", c.name);
        for (name, verdict, reason) in &c.want {
            let p = f
                .pods
                .iter()
                .find(|p| p.name == *name)
                .unwrap_or_else(|| panic!("{}: pod {name} in the forecast\n{text}", c.name));
            assert_eq!(
                (p.verdict, p.reason),
                (*verdict, *reason),
                "{}: pod {name}\n{text}",
                c.name
            );
            assert_eq!(
                p.fix.is_some(),
                *verdict != Verdict::Completes,
                "{}: {name}",
                c.name
            );
        }
        for b in &f.blocking_budgets {
            assert!(
                text.contains(&b.budget) && text.contains(&b.fix),
                "{}: {text}",
                c.name
            );
        }
        for needle in &c.says {
            assert!(
                text.contains(needle),
                "{}: {needle:?} missing\n{text}",
                c.name
            );
        }
    }
}

#[test]
fn the_json_shape_and_the_summary() {
    let c = Case {
        pods: vec![pod("web-1", "web"), pod("db-0", "db")],
        budgets: vec![pdb("db", "db", json!({"minAvailable": 3}), (0, 3, 3, 3))],
        ..Case::default()
    };
    let f = run(&c);
    assert_eq!(
        f.summary,
        "node node-a: the drain is blocked: 1 blocked, 0 cut at the deadline, 1 complete; budgets: work/db"
    );
    assert_eq!(
        f.blocked_per_budget(),
        BTreeMap::from([("work/db".to_owned(), 1)])
    );
    let v = serde_json::to_value(&f).unwrap();
    assert_eq!(v["verdict"], "blocked");
    assert_eq!(v["estimate_seconds"], Value::Null);
    let db = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "db-0")
        .unwrap();
    assert_eq!(db["verdict"], "blocked");
    assert_eq!(db["reason"], "budget-never-allows");
    assert_eq!(db["budgets"], json!(["work/db"]));
    assert_eq!(v["blocking_budgets"][0]["pods"], json!(["work/db-0"]));
    assert_eq!(v["budget"]["drain_seconds"], json!(120.0));

    let ok = run(&Case {
        pods: vec![pod("web-1", "web")],
        ..Case::default()
    });
    assert_eq!(
        ok.summary,
        "node node-a: the drain completes: 1 pod in about 30 s of the 120 s budget"
    );
    assert_eq!(serde_json::to_value(&ok).unwrap()["verdict"], "completes");
}

/// Three pods that `n` budgets all select.
fn shared_by(n: usize) -> Forecast {
    run(&Case {
        pods: vec![
            pod("web-1", "web"),
            pod("web-2", "web"),
            pod("web-3", "web"),
        ],
        budgets: (0..n)
            .map(|i| {
                pdb(
                    &format!("b-{i:04}"),
                    "web",
                    json!({"minAvailable": 0}),
                    (3, 3, 0, 3),
                )
            })
            .collect(),
        ..Case::default()
    })
}

/// Issue 29: 3 pods under 1,000 budgets gave 27.7 MB of JSON, each blocking budget's words
/// naming every other budget. A pod several budgets select is one finding naming them, and the
/// output grows with the budgets, not with their square.
#[test]
fn a_pod_under_many_budgets_is_one_finding_and_the_output_stays_linear() {
    let size = |f: &Forecast| serde_json::to_string(f).unwrap().len() + f.to_text().len();
    let (n, twice) = (shared_by(100), shared_by(200));
    let (a, b) = (size(&n), size(&twice));
    assert!(b * 2 < a * 5, "{a} bytes with 100 budgets, {b} with 200");

    for f in [&n, &twice] {
        let count = f.pods[0].budgets.len();
        assert_eq!(f.verdict, Verdict::Blocked);
        for p in &f.pods {
            assert_eq!((p.verdict, p.reason), (Verdict::Blocked, "several-budgets"));
            assert_eq!(p.budgets.len(), count, "the JSON names every budget");
            assert!(
                p.detail.starts_with(&format!(
                    "{count} budgets (work/b-0000, work/b-0001, work/b-0002, work/b-0003, work/b-0004 and {} more;",
                    count - 5
                )) && p.detail.contains("HTTP 500"),
                "{}",
                p.detail
            );
        }
        // Each budget keeps the three pods, in words of its own.
        assert_eq!(f.blocking_budgets.len(), count);
        for b in &f.blocking_budgets {
            assert_eq!(b.pods, ["work/web-1", "work/web-2", "work/web-3"]);
            for words in [&b.why, &b.fix] {
                assert_eq!(words.matches("work/b-").count(), 1, "{words}");
                assert!(words.contains(&b.budget), "{words}");
            }
        }
        assert!(
            f.summary.ends_with(&format!(
                "; budgets: work/b-0000, work/b-0001, work/b-0002, work/b-0003, work/b-0004 and {} more",
                count - 5
            )),
            "{}",
            f.summary
        );
    }
}
