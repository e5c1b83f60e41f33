//! The schedule file's parser and the watch on its directory, in a temporary directory: what
//! logind writes, rewrites by rename, removes, garbage, a file too large, a FIFO, a symlink, and
//! the directory missing at start (systemd < 257) and created later. Every wait on the watch is
//! bounded by a generous timeout that fails the test; none is a sleep standing in for a check.

use std::io::Write as _;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use super::*;

/// What `shutdown -r +5 "test"` wrote on systemd 257 (plus the TTY line newer logind adds).
const SHUTDOWN_R_5: &str =
    "USEC=1796154534611409\nWARN_WALL=1\nMODE=reboot\nUID=0\nTTY=pts/0\nWALL_MESSAGE=test\n";

fn at(micros: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_microsecond(micros).unwrap()
}

#[test]
fn what_logind_writes_is_a_schedule_with_its_kind() {
    let s = parse(SHUTDOWN_R_5.as_bytes()).unwrap();
    assert_eq!(
        s,
        Schedule {
            at: at(1_796_154_534_611_409),
            kind: ShutdownKind::Reboot,
            warn_wall: true,
            uid: Some(0),
            tty: Some("pts/0".into()),
            wall_message: Some("test".into()),
        }
    );
    assert_eq!(
        s.reason(),
        format!("reboot scheduled for {}", at(1_796_154_534_611_409))
    );
    // `systemctl poweroff --when=...`: no WALL_MESSAGE; each MODE logind writes maps to a kind.
    for (mode, kind) in [
        ("poweroff", ShutdownKind::PowerOff),
        ("halt", ShutdownKind::Halt),
        ("kexec", ShutdownKind::Kexec),
        ("soft-reboot", ShutdownKind::SoftReboot),
        ("reboot", ShutdownKind::Reboot),
        ("sleep-forever", ShutdownKind::Unknown),
    ] {
        let text = format!("USEC=1000000\nWARN_WALL=0\nMODE={mode}\nUID=1000\n");
        let s = parse(text.as_bytes()).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(s.kind, kind, "{mode}");
        assert_eq!(
            (s.warn_wall, s.uid, s.wall_message),
            (false, Some(1000), None)
        );
    }
}

#[test]
fn only_a_time_and_a_kind_are_required_like_logind_reading_it_back() {
    let s = parse(b"MODE=halt\nUSEC=5\nUID=nobody\nWARN_WALL=maybe\nFUTURE=1\n\n").unwrap();
    assert_eq!(
        (s.kind, s.at, s.uid, s.warn_wall),
        (ShutdownKind::Halt, at(5), None, false)
    );
    let table: [(&[u8], Garbled); 6] = [
        (b"WARN_WALL=1\nMODE=reboot\n", Garbled::NoTime),
        (b"USEC=12\nWARN_WALL=1\n", Garbled::NoKind),
        (b"USEC=12\nMODE=\n", Garbled::NoKind),
        (b"USEC=soon\nMODE=reboot\n", Garbled::BadTime("soon".into())),
        (
            b"USEC=99999999999999999999\nMODE=reboot\n",
            Garbled::BadTime("99999999999999999999".into()),
        ),
        (b"USEC=1\nthis is not a schedule\n", Garbled::Line(2)),
    ];
    for (text, want) in table {
        assert_eq!(
            parse(text),
            Err(want.clone()),
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }
    assert_eq!(parse(&[0xff, 0xfe]), Err(Garbled::NotText));
}

#[test]
fn the_drain_waits_until_the_lead_before_the_time_and_no_longer_when_less_is_left() {
    let s = parse(b"USEC=600000000\nMODE=reboot\n").unwrap();
    let now = at(0);
    let lead = Duration::from_secs(120);
    assert_eq!(s.wait_before_drain(now, lead), Duration::from_secs(480));
    assert_eq!(s.wait_before_drain(at(500_000_000), lead), Duration::ZERO);
    assert_eq!(s.wait_before_drain(at(900_000_000), lead), Duration::ZERO);
}

#[test]
fn reading_refuses_what_our_state_files_refuse_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(SCHEDULE_FILE);
    assert!(read(dir.path()).unwrap().is_none(), "no file: no schedule");
    std::fs::write(&file, SHUTDOWN_R_5).unwrap();
    assert_eq!(
        read(dir.path()).unwrap().unwrap().kind,
        ShutdownKind::Reboot
    );

    std::fs::write(&file, "garbage").unwrap();
    let e = read(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains(&file.display().to_string()) && e.contains("garbled"),
        "{e}"
    );

    std::fs::write(&file, vec![b'#'; crate::state_file::MAX_LEN as usize + 1]).unwrap();
    let e = read(dir.path()).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");

    std::fs::remove_file(&file).unwrap();
    nix::unistd::mkfifo(&file, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let e = read(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");

    std::fs::remove_file(&file).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, SHUTDOWN_R_5).unwrap();
    symlink(&elsewhere, &file).unwrap();
    let e = read(dir.path()).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
}

/// Writes the file as logind does: a temporary file in the directory, renamed over the name
/// (logind closes it after the rename, so the closing write carries the final name).
fn write_as_logind(dir: &Path, text: &str) {
    let mut tmp = tempfile::Builder::new()
        .prefix(".#scheduled")
        .tempfile_in(dir)
        .unwrap();
    tmp.write_all(text.as_bytes()).unwrap();
    tmp.persist(dir.join(SCHEDULE_FILE)).unwrap();
}

/// Writes and closes a file beside it, then renames it into place (as `mv` does): only the
/// rename says that the schedule changed.
fn rename_into_place(dir: &Path, text: &str) {
    let tmp = dir.join(".next");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(SCHEDULE_FILE)).unwrap();
}

/// The watch's first answer (the schedule at start).
async fn first(w: &mut ScheduleWatch) -> Option<Schedule> {
    tokio::time::timeout(Duration::from_secs(20), w.next())
        .await
        .expect("the watch answers at once")
        .expect("the watch reads the directory")
}

/// What the watch says after `change`, made while it waits: it must have read the directory and
/// be waiting (pending) before the change, so only the change's inotify event can wake it. The
/// timeout is a bound for a loaded machine, not a measure.
async fn after(w: &mut ScheduleWatch, change: impl FnOnce()) -> Option<Schedule> {
    let mut next = std::pin::pin!(w.next());
    assert!(
        futures::poll!(next.as_mut()).is_pending(),
        "the watch says nothing before the change"
    );
    change();
    tokio::time::timeout(Duration::from_secs(20), next)
        .await
        .expect("the change wakes the watch within 20 s")
        .expect("the watch reads its events")
}

fn schedule(text: &str) -> Option<Schedule> {
    Some(parse(text.as_bytes()).unwrap())
}

const LATER: &str = "USEC=1796154999000000\nWARN_WALL=1\nMODE=poweroff\nUID=0\n";

#[tokio::test]
async fn the_watch_says_the_schedule_at_start_and_at_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join(SCHEDULE_FILE);
    write_as_logind(d, SHUTDOWN_R_5);
    let mut w = ScheduleWatch::new(d).unwrap();
    assert_eq!(first(&mut w).await, schedule(SHUTDOWN_R_5), "at start");

    // Rescheduled as logind does it: the new time and kind.
    assert_eq!(
        after(&mut w, || write_as_logind(d, LATER)).await,
        schedule(LATER)
    );
    // `shutdown -c`: the file goes.
    assert_eq!(
        after(&mut w, || std::fs::remove_file(&file).unwrap()).await,
        None
    );
    // Renamed into place by another writer.
    assert_eq!(
        after(&mut w, || rename_into_place(d, SHUTDOWN_R_5)).await,
        schedule(SHUTDOWN_R_5)
    );
    // Renamed away (not deleted): gone too.
    let moved = d.join("moved");
    assert_eq!(
        after(&mut w, || std::fs::rename(&file, &moved).unwrap()).await,
        None
    );
    // Written in place: read once it is closed.
    assert_eq!(
        after(&mut w, || std::fs::write(&file, LATER).unwrap()).await,
        schedule(LATER)
    );
    // Garbage: no schedule (with a warning), then a good file again.
    assert_eq!(
        after(&mut w, || std::fs::write(&file, "not a schedule").unwrap()).await,
        None
    );
    assert_eq!(
        after(&mut w, || write_as_logind(d, SHUTDOWN_R_5)).await,
        schedule(SHUTDOWN_R_5)
    );
}

#[tokio::test]
async fn a_garbled_file_is_warned_about_naming_it() {
    use std::sync::{Arc, Mutex};
    // The warnings the watch logs, captured for this test's thread.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join(SCHEDULE_FILE);
    std::fs::write(&file, "USEC=tomorrow\nMODE=reboot\n").unwrap();
    let mut w = ScheduleWatch::new(d).unwrap();
    assert_eq!(first(&mut w).await, None);
    let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("WARN")
            && logged.contains(&format!("{} is garbled", file.display()))
            && logged.contains("USEC=\"tomorrow\""),
        "{logged}"
    );
}

#[tokio::test]
async fn a_fifo_a_symlink_or_a_file_too_large_is_no_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join(SCHEDULE_FILE);
    let mut w = ScheduleWatch::new(d).unwrap();
    assert_eq!(first(&mut w).await, None, "nothing scheduled at start");

    // None of these may read as a schedule or block the watch (a FIFO is never opened for a
    // blocking read): after each, the next answer is the schedule written next.
    nix::unistd::mkfifo(&file, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert_eq!(
        after(&mut w, || write_as_logind(d, SHUTDOWN_R_5)).await,
        schedule(SHUTDOWN_R_5)
    );
    let elsewhere = d.join("elsewhere");
    std::fs::write(&elsewhere, SHUTDOWN_R_5).unwrap();
    let link = || {
        std::fs::remove_file(&file).unwrap();
        symlink(&elsewhere, &file).unwrap();
    };
    assert_eq!(after(&mut w, link).await, None, "a symlink is not followed");
    assert_eq!(
        after(&mut w, || write_as_logind(d, LATER)).await,
        schedule(LATER)
    );
    // A hard link is created without a write: the creation alone says it.
    let linked = d.join("linked");
    std::fs::write(&linked, SHUTDOWN_R_5).unwrap();
    assert_eq!(
        after(&mut w, || std::fs::remove_file(&file).unwrap()).await,
        None
    );
    assert_eq!(
        after(&mut w, || std::fs::hard_link(&linked, &file).unwrap()).await,
        schedule(SHUTDOWN_R_5)
    );
    let large =
        || std::fs::write(&file, vec![b'#'; crate::state_file::MAX_LEN as usize + 1]).unwrap();
    assert_eq!(after(&mut w, large).await, None);
}

#[tokio::test]
async fn a_directory_missing_at_start_is_followed_from_its_parent() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("shutdown");
    let mut w = ScheduleWatch::new(&d).unwrap();
    assert_eq!(first(&mut w).await, None, "no directory: no schedule");

    // logind < 257 creates the directory with the first schedule: the watch moves onto it when
    // it appears, so a schedule written into it later wakes the watch.
    {
        let mut next = std::pin::pin!(w.next());
        assert!(futures::poll!(next.as_mut()).is_pending());
        std::fs::create_dir(&d).unwrap();
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "an empty directory is no schedule"
        );
        write_as_logind(&d, SHUTDOWN_R_5);
        let got = tokio::time::timeout(Duration::from_secs(20), next)
            .await
            .expect("the schedule in the new directory wakes the watch")
            .unwrap();
        assert_eq!(got, schedule(SHUTDOWN_R_5));
    }

    // The directory goes (and the schedule with it), then comes back with a new schedule.
    assert_eq!(
        after(&mut w, || std::fs::remove_dir_all(&d).unwrap()).await,
        None
    );
    let back = || {
        std::fs::create_dir(&d).unwrap();
        write_as_logind(&d, LATER);
    };
    assert_eq!(after(&mut w, back).await, schedule(LATER));

    // A parent that does not exist is an error naming the directory.
    let e = ScheduleWatch::new(root.path().join("no/such/dir"))
        .err()
        .expect("a missing parent cannot be watched")
        .to_string();
    assert!(e.contains("no/such/dir"), "{e}");
}
