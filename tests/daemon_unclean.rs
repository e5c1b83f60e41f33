//! `kube-shutdown-drain run` (the real binary) on a private bus with the fake logind and the
//! fake API server (issue 11 item 5): a boot that ended without a shutdown announced to us, or
//! during or after an incomplete drain, gets one Warning Event naming that boot at the next
//! start, shown by `status`; a boot that ended after a complete drain gets none.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{Setup, World, open_seed, started};
use fake_apiserver::faults::Route;
use serde_json::Value;

const WITHOUT: &str = "ShutdownWithoutDrain";
const INCOMPLETE: &str = "DrainIncomplete";

fn setup(seed_open: bool) -> Setup {
    let config = "[drain]\ntimeout = \"4s\"\nretry_interval = \"1s\"\n\
                  [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"2s\"\n"
        .to_string();
    if seed_open {
        Setup {
            seed: open_seed(),
            config,
            ..Setup::default()
        }
    } else {
        Setup {
            config,
            ..Setup::default()
        }
    }
}

fn boot_id(world: &World) -> String {
    std::fs::read_to_string(world.boot_id_path())
        .unwrap()
        .trim()
        .to_owned()
}

/// A world with the daemon ready; the boot ID it runs in.
async fn running(setup: Setup) -> Option<(World, String)> {
    let world = started(setup).await?;
    let boot = boot_id(&world);
    Some((world, boot))
}

/// The machine comes back: logind forgets the old boot, a new boot ID, the daemon starts.
async fn next_boot(world: &mut World) {
    world.boot_again().await;
}

/// The one Event with `reason` on the node, once it is there; fails naming what was found.
async fn the_event(world: &World, reason: &str) -> Value {
    world
        .expect_until(
            Duration::from_secs(15),
            |w| !w.node_events(reason).is_empty(),
            &format!("an Event {reason} on the node"),
        )
        .await;
    let events = world.node_events(reason);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["type"], "Warning");
    events[0].clone()
}

#[tokio::test]
async fn a_boot_that_ended_without_a_shutdown_is_reported_once_even_if_the_api_server_refuses_at_first()
 {
    let Some((mut world, old)) = running(setup(true)).await else {
        return;
    };
    assert!(
        world.node_events(WITHOUT).is_empty() && world.node_events(INCOMPLETE).is_empty(),
        "the first start with an empty state dir has nothing to judge"
    );
    // Power loss: no PrepareForShutdown, the daemon just goes.
    world
        .api
        .faults()
        .fail_next(Route::new("POST", "/events"), 2, 503);
    next_boot(&mut world).await;
    let event = the_event(&world, WITHOUT).await;
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "boot {old} ended without a drain of node demo-node-1"
        )) && message.contains("logind announced no shutdown"),
        "{message}"
    );
    assert!(world.log().contains("retried in"), "{}", world.log());

    let s = world.status_json().await;
    assert_eq!(s["previous_boot"]["boot_id"], old.as_str());
    assert_eq!(s["previous_boot"]["unclean"], WITHOUT);
    assert_eq!(s["previous_boot"]["message"], message);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while world.status_json().await["previous_boot"]["event_posted"] != true {
        assert!(
            std::time::Instant::now() < deadline,
            "status never says the Event is written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A restart in the same boot judges nothing again.
    world.restart_daemon();
    world.wait_ready().await;
    world
        .expect_log(
            "nothing to restore",
            Duration::from_secs(10),
            "the boot restore ran",
        )
        .await;
    assert_eq!(world.node_events(WITHOUT).len(), 1, "posted once");
}

#[tokio::test]
async fn a_daemon_stopped_before_the_boot_ended_is_named_in_the_event() {
    let Some((mut world, old)) = running(setup(true)).await else {
        return;
    };
    world.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        world.wait_exit(Duration::from_secs(10)).is_some(),
        "stopped"
    );
    world.rig.simulate_boot().await;
    world.new_boot();
    world.spawn_daemon();
    world.wait_ready().await;
    let event = the_event(&world, WITHOUT).await;
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("boot {old} ended without a drain"))
            && message.contains("the daemon was stopped at"),
        "{message}"
    );
}

#[tokio::test]
async fn a_machine_that_went_down_during_the_drain_is_reported_as_drain_incomplete() {
    let Some((mut world, old)) = running(Setup {
        // Long enough that the drain is still waiting on the budget when the machine goes.
        config: "[drain]\ntimeout = \"15s\"\nretry_interval = \"1s\"\n\
                 [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"2s\"\n"
            .to_string(),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    world.reboot_until_stuck_on_the_budget().await;
    next_boot(&mut world).await;
    let event = the_event(&world, INCOMPLETE).await;
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "boot {old} ended during the drain of node demo-node-1 for the reboot announced at"
        )),
        "{message}"
    );
    assert!(world.node_events(WITHOUT).is_empty());
    assert_eq!(
        world.status_json().await["previous_boot"]["unclean"],
        INCOMPLETE
    );
}

#[tokio::test]
async fn a_drain_that_ended_incomplete_is_reported_with_its_summary() {
    let Some((mut world, old)) = running(setup(false)).await else {
        return;
    };
    // The closed `web` budget keeps a pod until the 4 s deadline.
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(20)).await;
    world
        .expect_recorded_end("the boot record holds the drain's end")
        .await;
    next_boot(&mut world).await;
    let event = the_event(&world, INCOMPLETE).await;
    let message = event["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "boot {old} ended after an incomplete drain of node demo-node-1 for the reboot"
        )) && message.contains("blocked"),
        "{message}"
    );
}

#[tokio::test]
async fn a_boot_that_ended_after_a_complete_drain_gets_no_event() {
    let Some((mut world, old)) = running(setup(true)).await else {
        return;
    };
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(20)).await;
    world
        .expect_recorded_end("the boot record holds the drain's end")
        .await;
    assert!(world.is_drained());
    next_boot(&mut world).await;
    let said =
        format!("boot {old} ended after a complete drain of node demo-node-1 for the reboot");
    world
        .expect_log(&said, Duration::from_secs(5), "the verdict is logged")
        .await;
    world
        .expect_restored(Duration::from_secs(15), "restored in the new boot")
        .await;
    assert!(world.node_events(WITHOUT).is_empty() && world.node_events(INCOMPLETE).is_empty());
    let s = world.status_json().await;
    assert_eq!(s["previous_boot"]["unclean"], Value::Null);
    assert!(
        s["previous_boot"]["message"]
            .as_str()
            .unwrap()
            .contains(&said),
        "{s}"
    );
}

/// A boot record is a file: whatever it says goes into the Event only cleaned, at most 1 KiB
/// (the API server's limit on an event note) and without control characters (issue 23: a
/// forged record posted a 200,000-character Event).
#[tokio::test]
async fn a_forged_boot_record_posts_one_short_clean_event() {
    let Some((mut world, _)) = running(setup(false)).await else {
        return;
    };
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(20)).await;
    world
        .expect_recorded_end("the boot record holds the drain's end")
        .await;
    world.kill_daemon();
    let path = world.state_dir().join("boot-record");
    let mut record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let forged = format!("{}\u{1b}[2J\n{}", "x".repeat(200_000), "\u{7}".repeat(10));
    record["shutdown"]["end"]["detail"] = Value::String(forged);
    std::fs::write(&path, record.to_string()).unwrap();
    next_boot(&mut world).await;
    let event = the_event(&world, INCOMPLETE).await;
    let message = event["message"].as_str().unwrap();
    assert!(message.len() <= 1024, "{} bytes", message.len());
    assert!(
        !message.chars().any(char::is_control),
        "{:?}",
        message.escape_debug()
    );
    assert!(message.ends_with(" ..."), "cut, and says so: {message}");
}
