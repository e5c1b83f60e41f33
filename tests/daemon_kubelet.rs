//! `kube-shutdown-drain run` beside a kubelet that holds its own delay inhibitor for shutdowns
//! (Graceful Node Shutdown): one warning at start naming its grace period, and one Node Event
//! (issue 11, item 3). Without a kubelet lock, neither.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{Setup, World};

const REASON: &str = "KubeletGracefulShutdownActive";

/// A world whose config names a kubelet config file setting `shutdownGracePeriod: 30s`.
async fn world() -> Option<World> {
    let world = World::start(Setup::default()).await?;
    let kubelet = world.dir().join("kubelet-config.yaml");
    std::fs::write(
        &kubelet,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n",
    )
    .expect("write the kubelet config");
    // The generated config has no [daemon] table: add one naming the file.
    let mut config = std::fs::read_to_string(world.config_path()).expect("read the config");
    config.push_str(&format!(
        "[daemon]\nkubelet_config = \"{}\"\n",
        kubelet.display()
    ));
    std::fs::write(world.config_path(), config).expect("write the config");
    Some(world)
}

#[tokio::test]
async fn a_kubelet_delay_lock_gets_one_warning_naming_its_grace_and_one_node_event() {
    let Some(mut world) = world().await else {
        return;
    };
    let _kubelet_lock = world.rig.foreign_lock("kubelet").await;
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_log(
            "shutdownGracePeriod 30s",
            Duration::from_secs(5),
            "the daemon warns about the kubelet's lock, naming its grace period",
        )
        .await;
    world
        .expect_until(
            Duration::from_secs(5),
            |w| !w.node_events(REASON).is_empty(),
            "a Warning Event on the Node",
        )
        .await;
    let events = world.node_events(REASON);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "Warning");
    let message = events[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("shutdownGracePeriod: 0"), "{message}");
    assert_eq!(
        world.log().matches("holds a delay inhibitor").count(),
        1,
        "one warning:\n{}",
        world.log()
    );
}

#[tokio::test]
async fn without_a_kubelet_lock_there_is_no_warning() {
    let Some(mut world) = world().await else {
        return;
    };
    let _other = world.rig.foreign_lock("some-other-service").await;
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_log(
            "holds no delay inhibitor for shutdowns",
            Duration::from_secs(5),
            "the daemon says it checked",
        )
        .await;
    assert!(
        !world.log().contains("holds a delay inhibitor"),
        "{}",
        world.log()
    );
    assert!(world.node_events(REASON).is_empty());
}
