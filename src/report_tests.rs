//! The report's tests.

use super::*;

fn pod(name: &str, action: Action, outcome: Outcome, budget: Option<&str>) -> PodReport {
    PodReport {
        namespace: "work".into(),
        name: name.into(),
        action,
        reason: Reason::Default,
        order: Some(0),
        outcome,
        detail: budget
            .map(|_| "The disruption budget web needs 1 healthy pods and has 1 currently".into()),
        budget: budget.map(Into::into),
        attempts: 1,
        throttled: 0,
        started_ms: Some(1),
        finished_ms: None,
        grace_fit: None,
    }
}

fn report(pods: Vec<PodReport>) -> Report {
    let mut r = Report {
        slot: None,
        node: "n1".into(),
        why: "test".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        duration_ms: 1500,
        complete: false,
        deadline_reached: false,
        dry_run: false,
        counts: Counts::default(),
        throttled: 0,
        pods,
        blocked_by: vec![],
        volumes: vec![],
        errors: vec![],
        kind: None,
        grace_fitted_to: None,
        settle: None,
    };
    r.finish();
    r
}

#[test]
fn text_spellings_match_the_json() {
    use Outcome as O;
    use Reason as R;
    let outcomes = [
        O::Evicted,
        O::Deleted,
        O::Gone,
        O::Completed,
        O::Skipped,
        O::Blocked,
        O::Failed,
        O::Pending,
        O::DryRun,
    ];
    for o in outcomes {
        assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
    }
    for a in [Action::Evict, Action::Skip, Action::Wait] {
        assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
    }
    let reasons = [
        R::Terminating,
        R::DaemonSet,
        R::Mirror,
        R::ToleratesCordon,
        R::SkipNamespace,
        R::SkipSelector,
        R::CapiDrainLabel,
        R::Rule,
        R::Completed,
        R::EmptyDir,
        R::Unreplicated,
        R::Default,
    ];
    for r in reasons {
        assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
    }
    // A last report written by an older build still reads.
    assert_eq!(
        serde_json::from_value::<Reason>(serde_json::json!("priority")).unwrap(),
        R::Default
    );
}

#[test]
fn finish_counts_and_groups_blocked_pods_by_budget() {
    let r = report(vec![
        pod("a", Action::Evict, Outcome::Evicted, None),
        pod("b", Action::Evict, Outcome::Blocked, Some("work/web")),
        pod("c", Action::Evict, Outcome::Blocked, Some("work/web")),
        pod("d", Action::Skip, Outcome::Skipped, None),
    ]);
    assert!(!r.complete);
    assert_eq!(r.counts.evicted, 1);
    assert_eq!(r.counts.blocked, 2);
    assert_eq!(r.counts.skipped, 1);
    assert_eq!(r.blocked_by.len(), 1);
    assert_eq!(
        r.blocked_by[0].pods,
        vec!["work/b".to_string(), "work/c".to_string()]
    );
    assert!(
        r.to_text()
            .contains("blocked by budget work/web: The disruption budget web needs")
    );
    let ok = report(vec![pod("a", Action::Evict, Outcome::Evicted, None)]);
    assert!(ok.complete);
    assert!(
        ok.summary().contains("drained: 1 evicted"),
        "{}",
        ok.summary()
    );
}

#[test]
fn written_report_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Report::read_last(dir.path()).unwrap(), None);
    let r = report(vec![pod("a", Action::Evict, Outcome::Pending, None)]);
    let path = r.write_to(&dir.path().join("state")).unwrap();
    assert!(path.ends_with(LAST_REPORT_FILE));
    assert_eq!(
        Report::read_last(&dir.path().join("state")).unwrap(),
        Some(r)
    );
    std::fs::write(&path, b"{").unwrap();
    let err = Report::read_last(&dir.path().join("state")).unwrap_err();
    assert!(err.to_string().contains(LAST_REPORT_FILE), "{err}");
}
