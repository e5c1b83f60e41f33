//! Reboots the node asks for (issue 31): the pure pieces the daemon's reboot loop will read,
//! built ahead of it. Read by nothing yet; the daemon's reboot loop is issue 31.
//!
//! | file | owns |
//! |---|---|
//! | `window.rs` | the maintenance windows: is a reboot allowed now, when it opens, when it closes |
//! | `fleetlock.rs` | the FleetLock protocol's requests and error bodies (zincati's reboot slots) |
//! | `need.rs` | what a trigger says: a reboot needed, not needed, or unknown and why |
//! | `holds.rs` | what holds a node that needs a reboot: every reason it waits, judged purely |
//! | `holds_read.rs` | the reads behind the holds (the Node, the pause Lease, the node's pods) |

pub mod fleetlock;
pub mod holds;
pub mod holds_read;
#[cfg(test)]
mod holds_tests;
pub mod need;
pub mod window;
#[cfg(test)]
mod window_tests;
