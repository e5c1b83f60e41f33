//! Flatcar's update_engine as a reboot trigger, against a fake update_engine on a private bus
//! (tests/logind/fake_update_engine.py): the status read at start, a reboot need seen from the
//! `StatusUpdate` signal, and an update_engine that is not there said as unknown.

mod logind;

use std::time::Duration;

use kube_shutdown_drain::host::update_engine::{follow, status};
use kube_shutdown_drain::reboot::need::Need;
use logind::{LogindOptions, Rig};
use tokio::sync::watch;

/// A deadline only against a hang, never a timed assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn changed(rx: &mut watch::Receiver<Need>) -> Need {
    tokio::time::timeout(HANG_GUARD, rx.changed())
        .await
        .expect("no new answer (hang guard)")
        .expect("the follower stopped");
    rx.borrow_and_update().clone()
}

#[tokio::test]
async fn a_reboot_need_is_read_at_start_and_seen_from_the_status_signal() {
    let Some(mut rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    rig.start_update_engine("UPDATE_STATUS_IDLE").await;
    let conn = rig.connection().await.unwrap();
    assert_eq!(
        status(&conn).await,
        Need::NotNeeded("update_engine (com.coreos.update1) reports UPDATE_STATUS_IDLE".into())
    );
    let (tx, mut rx) = watch::channel(Need::Unknown("not asked yet".into()));
    let follower = tokio::spawn({
        let conn = conn.clone();
        async move { follow(&conn, &tx).await }
    });
    assert!(!changed(&mut rx).await.is_needed());
    rig.set_update_status("UPDATE_STATUS_DOWNLOADING", "4459.2.0")
        .await;
    assert_eq!(
        changed(&mut rx).await,
        Need::NotNeeded(
            "update_engine (com.coreos.update1) reports UPDATE_STATUS_DOWNLOADING".into()
        )
    );
    rig.set_update_status("UPDATE_STATUS_UPDATED_NEED_REBOOT", "4459.2.0")
        .await;
    assert_eq!(
        changed(&mut rx).await,
        Need::Needed(
            "update_engine (com.coreos.update1) installed 4459.2.0 and waits for a reboot".into()
        )
    );
    // Started again with an update waiting, the status is read without any signal.
    assert!(status(&conn).await.is_needed());
    drop(rx);
    rig.set_update_status("UPDATE_STATUS_IDLE", "").await;
    tokio::time::timeout(HANG_GUARD, follower)
        .await
        .expect("the follower kept running without receivers (hang guard)")
        .unwrap();
}

#[tokio::test]
async fn an_update_engine_that_is_not_on_the_bus_is_unknown_naming_it() {
    let Some(rig) = Rig::start(LogindOptions::default()).await else {
        return;
    };
    let conn = rig.connection().await.unwrap();
    let need = status(&conn).await;
    let Need::Unknown(why) = &need else {
        panic!("{need:?}");
    };
    assert!(
        why.starts_with("cannot read update_engine's status (com.coreos.update1): "),
        "{why}"
    );
}
