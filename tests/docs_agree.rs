//! The documentation against the code, where one can be tied to the other (as
//! `packaging/check-manifests` does for the RBAC manifest): every repository path the docs name
//! exists, the README's metrics table lists exactly the metrics the daemon writes, and the sysext
//! image `packaging/build` announces is the one `packaging/build-sysext` makes.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use kube_shutdown_drain::daemon::metrics::{Snapshot, render};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Words in `text` that look like a path inside this repository (`packaging/build`,
/// `tests/e2e/run`, `src/daemon/`), trailing punctuation removed; globs, shell variables and
/// placeholders left out.
fn repo_paths(text: &str) -> BTreeSet<String> {
    const TOP: [&str; 8] = [
        "packaging/",
        "scripts/",
        "systemd/",
        "tests/",
        "src/",
        "docs/",
        "examples/",
        "demo/",
    ];
    text.split(|c: char| c.is_whitespace() || "`'\"()[]<>,;|=".contains(c))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .map(|w| w.trim_end_matches(['.', ':']).to_owned())
        // Globs and placeholders (`target/packages/*.deb`, `src/api`) are not single paths.
        .filter(|w| !w.contains('*') && !w.contains("...") && !w.contains('{') && !w.contains('$'))
        // `systemd-analyze cat-config systemd/logind.conf` names systemd's file, not ours.
        .filter(|w| w != "systemd/logind.conf")
        .collect()
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for doc in [
        "README.md",
        "config.example.toml",
        "packaging/README.md",
        "docs/design.md",
        "packaging/build",
        "packaging/build-sysext",
        "scripts/test",
        "scripts/demo",
        "scripts/install-deps",
    ] {
        for p in repo_paths(&read(doc)) {
            if !Path::new(ROOT).join(&p).exists() {
                missing.push(format!("{doc} names {p}"));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn the_readme_lists_exactly_the_metrics_the_daemon_writes() {
    let report = serde_json::from_value(serde_json::json!({
        "node": "n", "why": "reboot", "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1,
        "complete": true, "deadline_reached": false, "dry_run": false,
        "counts": {"evicted": 0, "deleted": 0, "gone": 0, "completed": 0, "skipped": 0,
                   "blocked": 1, "failed": 0, "pending": 0},
        "pods": [], "blocked_by": [{"budget": "a/b", "message": "m", "pods": ["a/p"]}],
        "errors": [], "slot": {"slot": "kube-shutdown-drain-slot-0", "waited_ms": 1}
    }))
    .unwrap();
    let text = render(&Snapshot {
        node: "n".into(),
        lock_held: true,
        budget: Some((Duration::from_secs(1), Duration::from_secs(2))),
        last_drain: Some(report),
        last_restore: Some((1.0, true)),
        unclean: Some(Default::default()),
        forecast: Some(kube_shutdown_drain::daemon::metrics::ForecastFacts {
            at: 1.0,
            verdict: kube_shutdown_drain::forecast::Verdict::Blocked,
            blocked: [("a/b".to_owned(), 1)].into(),
            estimate_seconds: Some(1.0),
            budget_seconds: 1.0,
        }),
        gate_closed: Some(true),
    });
    let written: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    // The README's table abbreviates a repeated prefix as `..._rest`.
    let readme = read("README.md");
    let section = &readme[readme.find("## Metrics").expect("a Metrics section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut listed = BTreeSet::new();
    let mut last_full = String::new();
    for name in section.split('`').skip(1).step_by(2) {
        let name = name.split('{').next().unwrap();
        if let Some(rest) = name.strip_prefix("...") {
            let stem = last_full
                .rsplit_once("_last_")
                .map(|(s, _)| s.to_owned())
                .expect("an abbreviation after a full name");
            listed.insert(format!("{stem}{rest}"));
        } else if name.starts_with("kube_shutdown_drain_") {
            last_full = name.to_owned();
            listed.insert(name.to_owned());
        }
    }
    assert_eq!(listed, written, "README (left) vs render() (right)");
}

#[test]
fn packaging_build_announces_the_sysext_image_build_sysext_makes() {
    let build = read("packaging/build");
    let sysext = read("packaging/build-sysext");
    let made = sysext
        .lines()
        .find_map(|l| l.strip_prefix("# Result: OUT_DIR/"))
        .and_then(|l| l.split_whitespace().next())
        .expect("build-sysext names its result");
    let announced = build
        .lines()
        .find_map(|l| l.strip_prefix("#   sysext  "))
        .and_then(|l| l.split_whitespace().next())
        .expect("packaging/build names the sysext image");
    assert_eq!(announced, made);
    assert!(read("README.md").contains(&format!("target/packages/{made}")));
}
