//! Reboots the node asks for: the pieces the daemon's reboot follower and its own reboot use
//! (`crate::daemon::reboot`, `daemon/service/reboot.rs`), and the FleetLock server zincati asks
//! (`server.rs`, `fleetlock.rs`, `peer.rs`, `userns.rs`, `zincati_id.rs`; started with `[fleetlock]`,
//! answered by the daemon's loop in `daemon/service/agent.rs`).
//!
//! | file | owns |
//! |---|---|
//! | `window.rs` | the maintenance windows: is a reboot allowed now, when it opens, when it closes |
//! | `fleetlock.rs` | the FleetLock protocol's requests and error bodies (zincati's reboot slots) |
//! | `server.rs` | the FleetLock HTTP server: checks the caller and the request, asks the daemon |
//! | `peer.rs` | the uid owning a loopback connection's client socket (`/proc/net/tcp`) |
//! | `userns.rs` | whether the daemon's user namespace maps the agent's uid (PrivateUsers=) |
//! | `zincati_id.rs` | the node id zincati sends, derived from `/etc/machine-id` |
//! | `need.rs` | what a trigger says: a reboot needed, not needed, or unknown and why |
//! | `holds.rs` | what holds a node that needs a reboot: every reason it waits, judged purely |
//! | `holds_read.rs` | the reads behind the holds (the Node, the pause Lease, the node's pods) |

pub mod fleetlock;
pub mod holds;
pub mod holds_read;
#[cfg(test)]
mod holds_tests;
pub mod need;
pub mod peer;
pub mod server;
pub mod userns;
pub mod window;
#[cfg(test)]
mod window_tests;
pub mod zincati_id;
