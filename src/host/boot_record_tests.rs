//! Tests of the boot record: every end of a boot and its verdict, and the record across
//! restarts, cancels, stops and soft-reboots.

use super::*;

const OLD: &str = "7c1f0d4e-0000-4000-8000-000000000001";
const NEW: &str = "7c1f0d4e-0000-4000-8000-000000000002";

fn record(shutdown: Option<ShutdownSeen>) -> BootRecord {
    BootRecord {
        shutdown,
        ..BootRecord::new(OLD)
    }
}

fn seen(kind: &str, end: Option<(EndOutcome, &str)>) -> Option<ShutdownSeen> {
    Some(ShutdownSeen {
        kind: ShutdownKind::from_logind(kind).expect("a kind systemd names"),
        at: "2026-11-30T07:00:00Z".to_owned(),
        boottime_ns: Some(1_000_000_000),
        end: end.map(|(outcome, detail)| ShutdownEnd {
            outcome,
            detail: detail.to_owned(),
        }),
    })
}

#[test]
fn each_end_of_a_boot_gets_its_verdict_naming_the_boot_and_the_node() {
    use EndOutcome::*;
    let cases = [
        (
            record(None),
            Some(Unclean::ShutdownWithoutDrain),
            "logind announced no shutdown",
        ),
        (
            BootRecord {
                stopped_at: Some("2026-11-30T06:00:00Z".into()),
                ..record(None)
            },
            Some(Unclean::ShutdownWithoutDrain),
            "the daemon was stopped at 2026-11-30T06:00:00Z",
        ),
        (
            record(seen("reboot", None)),
            Some(Unclean::DrainIncomplete),
            "went down before the drain ended",
        ),
        (
            record(seen("reboot", Some((Incomplete, "2 evicted, 1 blocked")))),
            Some(Unclean::DrainIncomplete),
            "incomplete drain of node n1 for the reboot announced at 2026-11-30T07:00:00Z: 2 evicted, 1 blocked",
        ),
        (
            record(seen("power-off", Some((Failed, "no client")))),
            Some(Unclean::DrainIncomplete),
            "no client",
        ),
        (
            record(seen("reboot", Some((Drained, "3 evicted")))),
            None,
            "after a complete drain of node n1 for the reboot",
        ),
        (
            record(seen("kexec", Some((Cordoned, "")))),
            None,
            "cordoned without a drain as [shutdown] says",
        ),
        (
            record(seen("halt", Some((LeftAsIs, "")))),
            None,
            "left as it was",
        ),
    ];
    for (record, unclean, says) in cases {
        let verdict = judge(&record, "n1");
        assert_eq!(verdict.unclean, unclean, "{record:?}");
        assert!(
            verdict.message.contains(says),
            "{says:?} not in {}",
            verdict.message
        );
        assert!(
            verdict.message.contains(&format!("boot {OLD}")),
            "{}",
            verdict.message
        );
        assert!(verdict.message.contains("node n1"), "{}", verdict.message);
        assert_eq!(verdict.boot_id, OLD);
        assert!(!verdict.event_posted);
    }
    let soft = judge(&record(seen("soft-reboot", None)), "n1");
    assert!(
        soft.message
            .starts_with(&format!("the userspace of boot {OLD} ended")),
        "{}",
        soft.message
    );
}

/// A daemon's view: settings with this state dir and boot ID file.
fn settings(dir: &Path, boot_id: &str) -> Settings {
    let boot_id_path = dir.join("boot_id");
    std::fs::write(&boot_id_path, format!("{boot_id}\n")).unwrap();
    let mut s = Settings::from_str_at(Path::new("/t.toml"), "node_name = \"n1\"\n").unwrap();
    s.state_dir = dir.join("state");
    s.boot_id_path = boot_id_path;
    s
}

/// How the recorded shutdown's drain ended.
fn recorded_end(s: &Settings) -> ShutdownEnd {
    let record = read(&s.state_dir).unwrap().expect("a record");
    record.shutdown.expect("a shutdown").end.expect("its end")
}

#[test]
fn a_boot_is_judged_once_by_the_next_and_the_counts_carry_over() {
    let dir = tempfile::tempdir().unwrap();
    // First start with this state dir: nothing to judge.
    let log = BootLog::default();
    assert_eq!(log.open(&settings(dir.path(), OLD), false), None);
    let first = read(&dir.path().join("state")).unwrap().unwrap();
    assert_eq!(
        (first.boot_id.as_str(), first.previous.as_ref()),
        (OLD, None)
    );

    // The machine loses power: the next boot judges it and counts it.
    let s = settings(dir.path(), NEW);
    let log = BootLog::default();
    let pending = log.open(&s, false).expect("an Event to post");
    assert_eq!(pending.unclean, Some(Unclean::ShutdownWithoutDrain));
    assert_eq!(pending.boot_id, OLD);
    let rec = read(&s.state_dir).unwrap().unwrap();
    assert_eq!(rec.boot_id, NEW);
    assert_eq!(rec.unclean.shutdown_without_drain, 1);

    // Restarted in the same boot before the Event was written: still pending, not counted
    // twice; once written, not pending any more.
    assert_eq!(BootLog::default().open(&s, false), Some(pending.clone()));
    log.event_posted();
    assert_eq!(BootLog::default().open(&s, false), None);
    assert_eq!(
        read(&s.state_dir)
            .unwrap()
            .unwrap()
            .unclean
            .shutdown_without_drain,
        1
    );

    // This boot drains completely for a reboot: the next boot finds nothing to say, and the
    // count stays.
    log.shutdown_started(ShutdownKind::Reboot, true);
    log.shutdown_ended(EndOutcome::Drained, "2 evicted".into());
    let third = settings(dir.path(), "7c1f0d4e-0000-4000-8000-000000000003");
    assert_eq!(BootLog::default().open(&third, false), None);
    let rec = read(&third.state_dir).unwrap().unwrap();
    assert_eq!(rec.previous.as_ref().unwrap().unclean, None);
    assert_eq!(rec.previous.unwrap().boot_id, NEW);
    assert_eq!(rec.unclean.shutdown_without_drain, 1);
}

/// A daemon restarted while the shutdown it drained is still under way (an upgrade, a crash)
/// finds the budget spent: the earlier daemon's complete drain stands.
#[test]
fn a_restart_during_the_same_shutdown_keeps_the_earlier_drains_end() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), OLD);
    // The first daemon's reboot, drained or not; then a daemon restarted while it is under way,
    // too late to drain.
    let shutdown_then_restart = |s: &Settings, drained: bool| {
        let first = BootLog::default();
        first.open(s, false);
        first.shutdown_started(ShutdownKind::Reboot, true);
        if drained {
            first.shutdown_ended(EndOutcome::Drained, "4 evicted".into());
        }
        let again = BootLog::default();
        assert_eq!(again.open(s, true), None);
        again.shutdown_started(ShutdownKind::Reboot, false);
        again.shutdown_ended_unless_recorded(EndOutcome::Failed, "budget spent".into());
        recorded_end(s)
    };
    let end = shutdown_then_restart(&s, true);
    assert_eq!(
        (end.outcome, end.detail.as_str()),
        (EndOutcome::Drained, "4 evicted")
    );
    // Without an earlier end (the first daemon died mid-drain), the restart's is recorded.
    let end = shutdown_then_restart(&settings(dir.path(), NEW), false);
    assert_eq!(end.outcome, EndOutcome::Failed);
}

#[test]
fn a_cancel_and_a_stop_are_recorded_and_a_restart_clears_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), OLD);
    let log = BootLog::default();
    log.open(&s, false);
    log.shutdown_started(ShutdownKind::Reboot, true);
    assert!(log.shutdown_over(), "a shutdown was recorded");
    log.stopped();
    let rec = read(&s.state_dir).unwrap().unwrap();
    assert_eq!(rec.shutdown, None, "a cancelled shutdown is no shutdown");
    assert!(rec.stopped_at.is_some());
    // Started again in the same boot: running, so not stopped.
    BootLog::default().open(&s, false);
    assert_eq!(read(&s.state_dir).unwrap().unwrap().stopped_at, None);
}

#[test]
fn a_soft_reboot_is_judged_once_logind_prepares_no_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), OLD);
    let log = BootLog::default();
    log.open(&s, false);
    log.shutdown_started(ShutdownKind::SoftReboot, true);
    // Restarted while the soft-reboot is still being prepared: the record is kept as it is.
    assert_eq!(BootLog::default().open(&s, true), None);
    let rec = read(&s.state_dir).unwrap().unwrap();
    assert_eq!(
        rec.shutdown.as_ref().unwrap().kind,
        ShutdownKind::SoftReboot
    );
    // After it (same boot ID, nothing under way): judged; the drain never ended.
    let pending = BootLog::default().open(&s, false).expect("judged");
    assert_eq!(pending.unclean, Some(Unclean::DrainIncomplete));
    assert!(
        pending.message.starts_with("the userspace of boot"),
        "{}",
        pending.message
    );
    let rec = read(&s.state_dir).unwrap().unwrap();
    assert_eq!((rec.boot_id.as_str(), rec.shutdown.as_ref()), (OLD, None));
}

#[test]
fn a_garbled_record_is_replaced_and_an_unreadable_boot_id_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path(), OLD);
    std::fs::create_dir_all(&s.state_dir).unwrap();
    std::fs::write(s.state_dir.join(FILE), "{not json").unwrap();
    let err = read(&s.state_dir).unwrap_err();
    assert!(err.to_string().contains(FILE), "{err}");
    assert_eq!(BootLog::default().open(&s, false), None);
    assert_eq!(read(&s.state_dir).unwrap().unwrap().boot_id, OLD);

    let mut s = s;
    s.boot_id_path = dir.path().join("missing");
    let log = BootLog::default();
    assert_eq!(log.open(&s, false), None);
    assert_eq!(log.record(), None, "inactive");
    log.shutdown_started(ShutdownKind::Reboot, true);
    assert_eq!(
        read(&s.state_dir).unwrap().unwrap().shutdown,
        None,
        "untouched"
    );
}
