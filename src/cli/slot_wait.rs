//! The wait for a drain slot (`[fleet] slots`) of the commands that drain by hand (`drain`,
//! `reboot`): one take, said once, before anything on the node changes.

use std::time::Duration;

use tokio::time::Instant;

use crate::cli::CliError;
use crate::engine::Engine;
use crate::fleet::slots::Taken;

/// What the wait came to.
pub enum SlotWait {
    /// The engine, holding its slot ([`Engine::holding_slot`]): its drain takes no other.
    Holding(Box<Engine>),
    /// No slot came within the wait (said on stderr, naming the holders); nothing changed.
    Full,
}

/// Waits up to `timeout` for a drain slot for `engine`'s node, saying so on stderr; `what`
/// says what does not happen without one ("not rebooting").
pub async fn wait(engine: Engine, timeout: Duration, what: &str) -> Result<SlotWait, CliError> {
    let node = engine.settings().node_name.clone();
    eprintln!(
        "waiting up to {} s for a drain slot for node {node}",
        timeout.as_secs()
    );
    let started = Instant::now();
    match engine.wait_for_slot(started + timeout).await? {
        Taken::Slot(name) | Taken::Kept(name) => {
            eprintln!("node {node} holds drain slot {name}");
            Ok(SlotWait::Holding(Box::new(
                engine.holding_slot(name, started.elapsed()),
            )))
        }
        Taken::Full(holders) => {
            eprintln!(
                "no drain slot for node {node} within {} s: held by {}; nothing changed, {what}",
                timeout.as_secs(),
                holders.join(", ")
            );
            Ok(SlotWait::Full)
        }
    }
}
