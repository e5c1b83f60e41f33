//! Reboots the node asks for: the pieces the daemon's reboot follower and its own reboot use
//! (`crate::daemon::reboot`, `daemon/service/reboot.rs`), and the FleetLock server zincati asks
//! (`server.rs`, `accept.rs`, `caller.rs`, `refusals.rs`, `peer.rs`, `userns.rs`, `fleetlock.rs`,
//! `zincati_id.rs`; started with `[fleetlock]`, answered by the daemon's loop in
//! `daemon/service/agent.rs`).
//!
//! | file | owns |
//! |---|---|
//! | `window.rs` | the maintenance windows: is a reboot allowed now, when it opens, when it closes |
//! | `fleetlock.rs` | the FleetLock protocol's requests and error bodies (zincati's reboot slots) |
//! | `server.rs` | the FleetLock HTTP server: its bounds, the agent's requests checked, the daemon asked |
//! | `accept.rs` | its accept loop: callers judged at accept, the agent served, anyone else refused |
//! | `caller.rs` | who is calling, from the socket table: the agent, or a refusal saying why |
//! | `refusals.rs` | refused callers in the journal: the first at once, then a count a minute |
//! | `peer.rs` | the uid owning a loopback connection's client socket (`/proc/net/tcp`) |
//! | `userns.rs` | whether the daemon's user namespace maps the agent's uid (PrivateUsers=) |
//! | `zincati_id.rs` | the node id zincati sends, derived from `/etc/machine-id` |
//! | `need.rs` | what a trigger says: a reboot needed, not needed, or unknown and why; the answer that counts once it has stood |
//! | `sentinel_file.rs` | the trigger of a sentinel file (inotify on its directory) |
//! | `sentinel_command.rs` | the trigger of a sentinel command (run every `check_interval` in its own process group) |
//! | `update_engine.rs` | the trigger of Flatcar's update_engine (its status on the system bus) |
//! | `holds.rs` | what holds a node that needs a reboot: every reason it waits, judged purely |
//! | `holds_read.rs` | the reads behind the holds (the Node, the pause Lease, the node's pods, the group's Nodes, the alerts) |
//! | `health.rs` | the cluster's health as a hold: the group's unready nodes (`max_unready`), the active alerts |
//! | `alerts.rs` | the alerts asked of Prometheus or Alertmanager (`[fleet.alerts]`) |
//! | `procedure.rs` | the one procedure of a reboot the node decides (its own, the agent's, by hand): slot, holds, drain, holds, block locks, logind |

mod accept;
pub mod alerts;
pub mod caller;
pub mod fleetlock;
pub mod health;
#[cfg(test)]
mod health_tests;
pub mod holds;
pub mod holds_read;
#[cfg(test)]
mod holds_tests;
pub mod hooks;
pub mod need;
pub mod peer;
pub mod procedure;
pub mod reason;
pub mod refusals;
pub mod sentinel_command;
pub mod sentinel_file;
pub mod server;
pub mod update_engine;
pub mod userns;
pub mod window;
#[cfg(test)]
mod window_tests;
pub mod zincati_id;
