//! The followers of the reboots the node asks for (`[reboot]`, `[fleetlock]`): they read the
//! world and send what they saw to the loop ([`Seen`]); the table decides
//! (`daemon::phase::verdict`).
//!
//! - The triggers, in one task ([`follow_triggers`]): `sentinel_file` (inotify,
//!   `reboot::sentinel_file`), `sentinel_command` (run every `check_interval`,
//!   `reboot::sentinel_command`), Flatcar's update_engine (`reboot::update_engine`, on the
//!   system bus); their combined answer (`Need::combined`: needed when any says so, an unknown
//!   answer never starts one) sent whenever it changes. The update agent's FleetLock requests
//!   are not here: they reach the table straight from the server.
//! - The holds ([`look`]): what holds the node (`reboot::holds`: the hold annotation, the
//!   fleet's pause, a blocking pod, the windows, the forecast), looked at when the table asks
//!   (`LookAtHolds`), then every [`LOOK_EVERY`] and at a window's opening until it says stop
//!   (`StopLooking`); and the windows' opening and closing, sent as they come.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::reboot::RebootSettings;
use crate::daemon::access::Access;
use crate::daemon::phase::{HoldsSeen, Seen};
use crate::forecast::Forecast;
use crate::reboot::holds::Holds;
use crate::reboot::holds_read::Weighed;
use crate::reboot::need::Need;
use crate::reboot::window::Windows;

pub use crate::daemon::phase::verdict::{AGENT_ASKS_WITHIN, RETRY_AFTER, RETRY_MAX, retry_pause};

/// How often the holds are judged again while a reboot is needed and held (a hold annotation
/// removed, the pause Lease deleted, a blocking pod gone).
pub const LOOK_EVERY: Duration = Duration::from_secs(60);

/// How long a trigger that stopped (its inotify watch, update_engine's bus) waits before it is
/// set up again.
const TRIGGER_RETRY: Duration = Duration::from_secs(30);
/// The reason the daemon's own reboot gives its marker and Events. A marker of this boot with it
/// is a reboot that never reached logind's window (the daemon was stopped, or the need went):
/// the next start restores it (`daemon::restore`).
pub const OWN_REBOOT_WHY: &str = "reboot the node asked for ([reboot])";

/// The triggers of `reboot`, followed in this one task (each a future of it), their combined
/// answer sent to `seen` at the start and whenever it changes, until the loop is gone.
pub(crate) async fn follow_triggers(
    reboot: RebootSettings,
    bus_address: String,
    seen: mpsc::Sender<Seen>,
) {
    let (file_tx, file) = watch::channel(None);
    let (command_tx, command) = watch::channel(None);
    let (engine_tx, engine) = watch::channel(None);
    let file_trigger = async {
        match &reboot.sentinel_file {
            Some(path) => follow_file(path.clone(), file_tx).await,
            None => std::future::pending().await,
        }
    };
    let command_trigger = async {
        match &reboot.sentinel_command {
            Some(c) => {
                let shown = crate::reboot::sentinel_command::shown(&c.argv);
                command_tx
                    .send_replace(Some(Need::Unknown(format!("{shown} has not answered yet"))));
                let (tx, rx) = watch::channel(Need::Unknown(String::new()));
                let run = crate::reboot::sentinel_command::run_every(
                    c.argv.clone(),
                    c.interval,
                    c.timeout,
                    tx,
                );
                tokio::join!(run, forward(rx, command_tx));
            }
            None => std::future::pending().await,
        }
    };
    let engine_trigger = async {
        if reboot.update_engine {
            engine_tx.send_replace(Some(Need::Unknown("update_engine not read yet".into())));
            follow_update_engine(bus_address, engine_tx).await;
        }
        std::future::pending().await
    };
    let combine = combine(vec![file, command, engine], seen);
    // In this order: each trigger says its first answer before the first combination.
    tokio::select! {
        biased;
        () = file_trigger => {}
        () = command_trigger => {}
        () = engine_trigger => {}
        () = combine => {}
    }
}

/// Each answer of `from` on `to`, until either end is gone.
async fn forward(mut from: watch::Receiver<Need>, to: watch::Sender<Option<Need>>) {
    while from.changed().await.is_ok() {
        let need = from.borrow_and_update().clone();
        if to.send(Some(need)).is_err() {
            return;
        }
    }
}

/// The triggers' answers combined, sent to `seen` at the start and at each change; ends when
/// the loop is gone.
async fn combine(mut needs: Vec<watch::Receiver<Option<Need>>>, seen: mpsc::Sender<Seen>) {
    let mut said: Option<Need> = None;
    loop {
        let now: Vec<Need> = needs
            .iter_mut()
            .filter_map(|n| n.borrow_and_update().clone())
            .collect();
        let combined = Need::combined(&now);
        if said.as_ref() != Some(&combined) {
            if seen.send(Seen::Triggers(combined.clone())).await.is_err() {
                return;
            }
            said = Some(combined);
        }
        changed_any(&mut needs).await;
    }
}

/// The sentinel file's answers; a watch that fails is said as unknown (no reboot starts) and set
/// up again after [`TRIGGER_RETRY`] (inotify instances run out on busy nodes, then free up).
async fn follow_file(file: std::path::PathBuf, tx: watch::Sender<Option<Need>>) {
    tx.send_replace(Some(crate::reboot::sentinel_file::need(&file)));
    loop {
        let failed = match crate::reboot::sentinel_file::SentinelFile::new(&file) {
            Ok(mut watch) => loop {
                match watch.next().await {
                    Ok(need) => {
                        if tx.send(Some(need)).is_err() {
                            return;
                        }
                    }
                    Err(e) => break e,
                }
            },
            Err(e) => e,
        };
        if tx.send(Some(Need::Unknown(failed.to_string()))).is_err() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(TRIGGER_RETRY) => {}
            () = tx.closed() => return,
        }
    }
}

/// update_engine's answers on the system bus at `address`, followed again after
/// [`TRIGGER_RETRY`] whenever the bus or the service goes away.
async fn follow_update_engine(address: String, tx: watch::Sender<Option<Need>>) {
    let (answers, mut rx) = watch::channel(Need::Unknown("update_engine not read yet".into()));
    let follow = async {
        loop {
            let bus = crate::host::logind::Logind::connect_with_backoff(&address).await;
            crate::reboot::update_engine::follow(bus.connection(), &answers).await;
            tokio::time::sleep(TRIGGER_RETRY).await;
        }
    };
    let pass_on = async {
        while rx.changed().await.is_ok() {
            let need = rx.borrow_and_update().clone();
            if tx.send(Some(need)).is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = follow => {}
        () = pass_on => {}
        () = tx.closed() => {}
    }
}

/// How the table wants the holds looked at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Look {
    /// Look now and at the looker's pace after (false: stop looking).
    pub wanted: bool,
    /// A window that closes before the drain ends holds the node.
    pub drain_to_come: bool,
    /// Counts the table's asks, so that each is a change of the watch.
    pub asked: u64,
}

/// Looks at what holds the node when the table asks, then every [`LOOK_EVERY`] (sooner when a
/// window opens) while it wants; sends each look, and each window's opening and closing, to
/// `seen`. Runs until the loop is gone.
pub(crate) async fn look(
    access: Access,
    mut looks: watch::Receiver<Look>,
    forecast: watch::Receiver<Option<Arc<Forecast>>>,
    seen: mpsc::Sender<Seen>,
) {
    let windows = Windows::of(&access.settings);
    let mut open = windows.contains(Timestamp::now());
    let _ = seen.send(Seen::Window { open }).await;
    let mut next: Option<Instant> = None;
    loop {
        let edge = window_edge(&windows, Timestamp::now());
        let due = tokio::select! {
            changed = looks.changed() => {
                if changed.is_err() {
                    return;
                }
                true
            }
            () = sleep_until(next) => true,
            () = sleep_until(edge) => false,
        };
        let now_open = windows.contains(Timestamp::now());
        if now_open != open {
            open = now_open;
            if seen.send(Seen::Window { open }).await.is_err() {
                return;
            }
        }
        let wanted = *looks.borrow_and_update();
        next = None;
        if !(due && wanted.wanted) {
            continue;
        }
        let last = forecast.borrow().clone();
        let weighed = Weighed {
            forecast: last.as_deref().filter(|_| wanted.drain_to_come),
            drain_to_come: wanted.drain_to_come,
        };
        let holds = judge(&access, &windows, weighed).await;
        if seen.send(Seen::Holds(seen_of(&holds))).await.is_err() {
            return;
        }
        next = Some(Instant::now() + until_next_look(&windows, Timestamp::now()));
    }
}

/// The holds as the table takes them.
fn seen_of(holds: &Holds) -> HoldsSeen {
    HoldsSeen {
        keys: holds.keys(),
        text: holds.to_string(),
    }
}

/// When the windows next open or close (none without windows).
fn window_edge(windows: &Windows, now: Timestamp) -> Option<Instant> {
    let at = if windows.contains(now) {
        windows.closes_at(now)
    } else {
        windows.next_open(now)
    }?;
    let wait = Duration::try_from(now.duration_until(at)).ok()?;
    Some(Instant::now() + wait)
}

/// How long until the holds are judged again: [`LOOK_EVERY`], or sooner when a window opens.
fn until_next_look(windows: &Windows, now: Timestamp) -> Duration {
    if windows.contains(now) {
        return LOOK_EVERY;
    }
    let opens = windows
        .next_open(now)
        .and_then(|at| Duration::try_from(now.duration_until(at)).ok());
    opens.map_or(LOOK_EVERY, |d| d.min(LOOK_EVERY))
}

/// What holds the node now.
pub(crate) async fn judge(access: &Access, windows: &Windows, weighed: Weighed<'_>) -> Holds {
    match access.engine().await {
        Ok(engine) => crate::reboot::holds_read::holds_of(&engine, windows, weighed).await,
        Err(e) => Holds::unknown(&access.settings.node_name, &e.to_string()),
    }
}

/// Any trigger's next answer (never when there is none).
/// A trigger whose task ended (its sender dropped) keeps its last answer and is not waited on:
/// a closed channel would otherwise answer at once, forever.
async fn changed_any<T>(needs: &mut [watch::Receiver<T>]) {
    let changes: Vec<_> = needs
        .iter_mut()
        .map(|n| {
            Box::pin(async move {
                if n.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
        })
        .collect();
    if changes.is_empty() {
        return std::future::pending().await;
    }
    let ((), _, _) = futures::future::select_all(changes).await;
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_trigger_whose_task_ended_is_not_waited_on_and_the_others_still_are() {
        let (gone, rx_gone) = watch::channel(Need::Unknown("inotify failed".into()));
        let (file, rx_file) = watch::channel(Need::NotNeeded("no file".into()));
        drop(gone);
        let mut needs = vec![rx_gone, rx_file];
        let quiet = tokio::time::timeout(Duration::from_secs(3600), changed_any(&mut needs));
        assert!(quiet.await.is_err(), "a closed trigger wakes the follower");
        file.send(Need::Needed("the file exists".into())).unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(1), changed_any(&mut needs));
        assert!(woke.await.is_ok(), "a live trigger's change is heard");
    }

    #[test]
    fn the_holds_are_looked_at_again_within_a_minute_or_when_a_window_opens() {
        use jiff::civil::Weekday;
        let now: Timestamp = "2026-12-05T22:00:00Z".parse().unwrap();
        assert_eq!(until_next_look(&Windows::any_time(), now), LOOK_EVERY);
        let soon = Windows::new(
            jiff::tz::TimeZone::UTC,
            &[crate::reboot::window::Window {
                day: Weekday::Saturday,
                start_minute: 22 * 60,
                length_minutes: 60,
            }],
        );
        // Open now: a minute.
        assert_eq!(until_next_look(&soon, now), LOOK_EVERY);
        let later: Timestamp = "2026-12-05T21:59:30Z".parse().unwrap();
        assert_eq!(until_next_look(&soon, later), Duration::from_secs(30));
    }
}
