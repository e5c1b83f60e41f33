//! The daemon's logind module against the fake logind on a private bus: the lock is visible and
//! released on drop, signals arrive with their kind, foreign senders are ignored, a restarted bus
//! is noticed.

mod logind;

use std::time::Duration;

use kube_shutdown_drain::host::logind::{Logind, LogindError, ShutdownSignal};
use kube_shutdown_drain::shutdown_kind::ShutdownKind;
use logind::{LogindOptions, Rig};

const NODE: &str = "node-a";

#[tokio::test]
async fn lock_is_listed_and_released_on_drop() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    assert_eq!(
        logind.inhibit_delay_max().await.expect("property"),
        Duration::from_secs(20)
    );
    assert!(!logind.preparing_for_shutdown().await.expect("property"));

    let lock = logind.take_lock(NODE).await.expect("lock");
    let listed = rig.inhibitors().await;
    let ours: Vec<_> = listed
        .iter()
        .filter(|(_, who, _, _, _, _)| who == "kube-shutdown-drain")
        .collect();
    assert_eq!(ours.len(), 1, "{listed:?}");
    let (what, _, why, mode, _, pid) = ours[0];
    assert_eq!((what.as_str(), mode.as_str()), ("shutdown", "delay"));
    assert!(why.contains(NODE), "why names the node: {why}");
    assert_eq!(*pid, std::process::id(), "the lock belongs to this process");

    drop(lock);
    assert!(
        rig.wait_locks(0, Duration::from_secs(5)).await,
        "the lock is gone from ListInhibitors after drop"
    );
}

#[tokio::test]
async fn reboot_signal_carries_the_kind_and_logind_waits_for_the_lock() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let mut signals = logind.subscribe().await.expect("subscribe");
    let lock = logind.take_lock(NODE).await.expect("lock");

    rig.reboot().await;
    let signal = tokio::time::timeout(Duration::from_secs(5), signals.next())
        .await
        .expect("a signal within 5 s")
        .expect("a signal");
    assert_eq!(
        signal,
        ShutdownSignal::Started {
            kind: ShutdownKind::Reboot
        }
    );
    assert!(logind.preparing_for_shutdown().await.expect("property"));
    // logind is still waiting: nothing recorded yet.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rig.outcomes().is_empty(), "{:?}", rig.outcomes());

    lock.release();
    let outcome = rig
        .wait_outcome(0, Duration::from_secs(5))
        .await
        .expect("an outcome");
    assert_eq!(outcome.what, "released", "{}", outcome.line);
}

#[tokio::test]
async fn without_metadata_the_kind_is_unknown_and_cancel_is_reported() {
    let Some(rig) = Rig::start(LogindOptions {
        metadata: false,
        ..LogindOptions::default()
    })
    .await
    else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let mut signals = logind.subscribe().await.expect("subscribe");
    let _lock = logind.take_lock(NODE).await.expect("lock");

    rig.power_off().await;
    let first = tokio::time::timeout(Duration::from_secs(5), signals.next())
        .await
        .expect("in time")
        .expect("a signal");
    assert_eq!(
        first,
        ShutdownSignal::Started {
            kind: ShutdownKind::Unknown
        }
    );
    rig.cancel().await;
    let second = tokio::time::timeout(Duration::from_secs(5), signals.next())
        .await
        .expect("in time")
        .expect("a signal");
    assert_eq!(second, ShutdownSignal::Cancelled);
}

#[tokio::test]
async fn a_signal_from_another_sender_is_ignored() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let mut signals = logind.subscribe().await.expect("subscribe");

    // Another connection on the bus pretends to be logind.
    let impostor = rig.connection().await.expect("connect");
    impostor
        .emit_signal(
            None::<&str>,
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "PrepareForShutdown",
            &(true,),
        )
        .await
        .expect("emit");
    let early = tokio::time::timeout(Duration::from_millis(500), signals.next()).await;
    assert!(
        early.is_err(),
        "the impostor's signal got through: {early:?}"
    );

    // The real one still does.
    rig.reboot().await;
    let real = tokio::time::timeout(Duration::from_secs(5), signals.next())
        .await
        .expect("in time")
        .expect("a signal");
    assert!(matches!(real, ShutdownSignal::Started { .. }));
}

#[tokio::test]
async fn a_restarted_bus_ends_the_signals_and_a_new_connection_locks_again() {
    let Some(mut rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let mut signals = logind.subscribe().await.expect("subscribe");
    let lock = logind.take_lock(NODE).await.expect("lock");

    rig.restart_bus().await;
    let ended = tokio::time::timeout(Duration::from_secs(5), signals.next())
        .await
        .expect("the stream notices within 5 s");
    assert!(ended.is_err(), "expected Disconnected, got {ended:?}");
    tokio::time::timeout(Duration::from_secs(5), logind.closed())
        .await
        .expect("closed() resolves");

    let again = tokio::time::timeout(
        Duration::from_secs(10),
        Logind::connect_with_backoff(rig.address()),
    )
    .await
    .expect("reconnected within 10 s");
    let lock2 = again.take_lock(NODE).await.expect("lock again");
    // Like real logind, the fake kept the first lock across the bus restart: a client that does
    // not close its old lock after taking a new one holds two.
    assert_eq!(rig.our_locks().await, 2);
    drop(lock);
    assert!(rig.wait_locks(1, Duration::from_secs(5)).await);
    drop(lock2);
    assert!(rig.wait_locks(0, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_panic_in_the_task_that_holds_the_lock_releases_it() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let lock = logind.take_lock(NODE).await.expect("lock");
    assert_eq!(rig.our_locks().await, 1);
    let task = tokio::spawn(async move {
        let _held = lock;
        panic!("a drain step panicked");
    });
    assert!(task.await.is_err_and(|e| e.is_panic()));
    assert!(
        rig.wait_locks(0, Duration::from_secs(5)).await,
        "the unwinding dropped the lock"
    );
}

#[tokio::test]
async fn the_metadata_always_comes_with_its_shutdown() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let mut signals = logind.subscribe().await.expect("subscribe");
    // The two signals arrive back to back; their order must survive every time.
    for round in 0..20 {
        if round % 2 == 0 {
            rig.reboot().await;
        } else {
            rig.power_off().await;
        }
        let started = tokio::time::timeout(Duration::from_secs(5), signals.next())
            .await
            .expect("in time")
            .expect("a signal");
        let want = if round % 2 == 0 {
            ShutdownKind::Reboot
        } else {
            ShutdownKind::PowerOff
        };
        assert_eq!(
            started,
            ShutdownSignal::Started { kind: want },
            "round {round}"
        );
        rig.cancel().await;
        let cancelled = tokio::time::timeout(Duration::from_secs(5), signals.next())
            .await
            .expect("in time")
            .expect("a signal");
        assert_eq!(cancelled, ShutdownSignal::Cancelled, "round {round}");
    }
}

#[tokio::test]
async fn a_shutdown_under_way_is_seen_with_its_kind_where_logind_tells() {
    for (metadata, want) in [
        (true, ShutdownKind::PowerOff),
        (false, ShutdownKind::Unknown),
    ] {
        let Some(rig) = Rig::start(LogindOptions {
            preparing_for_shutdown: true,
            kind: "poweroff".to_owned(),
            metadata,
            ..LogindOptions::default()
        })
        .await
        else {
            return;
        };
        let logind = Logind::connect_at(rig.address()).await.expect("connect");
        assert_eq!(
            logind.shutdown_under_way().await.expect("read"),
            Some(want),
            "metadata property: {metadata}"
        );
        rig.cancel().await;
        assert_eq!(logind.shutdown_under_way().await.expect("read"), None);
        rig.reboot().await;
        let kind = if metadata {
            ShutdownKind::Reboot
        } else {
            ShutdownKind::Unknown
        };
        assert_eq!(logind.shutdown_under_way().await.expect("read"), Some(kind));
    }
}

#[tokio::test]
async fn a_lock_asked_for_during_a_shutdown_is_refused_as_a_shutdown_under_way() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let logind = Logind::connect_at(rig.address()).await.expect("connect");
    let _kubelet = rig.foreign_lock("kubelet").await;
    rig.reboot().await;
    // As systemd's method_inhibit: no new delay lock while the shutdown it would delay runs.
    let refused = logind.take_lock(NODE).await.expect_err("refused");
    assert!(
        matches!(&refused, LogindError::ShutdownUnderWay { node, message }
            if node == NODE
                && message == "The operation inhibition has been requested for is already running"),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("org.freedesktop.login1.OperationInProgress"),
        "{refused}"
    );
    assert_eq!(rig.our_refusals().await, 1);
    // After a cancel the lock is granted again.
    rig.cancel().await;
    let _lock = logind
        .take_lock(NODE)
        .await
        .expect("granted after the cancel");
    assert_eq!(rig.our_locks().await, 1);
}
