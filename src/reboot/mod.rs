//! Reboots the node asks for (issue 31): the pure pieces the daemon's reboot loop will read,
//! built ahead of it. Read by nothing yet; the daemon's reboot loop is issue 31.
//!
//! | file | owns |
//! |---|---|
//! | `window.rs` | the maintenance windows: is a reboot allowed now, when it opens, when it closes |
//! | `fleetlock.rs` | the FleetLock protocol's requests and error bodies (zincati's reboot slots) |
//! | `need.rs` | what a trigger says: a reboot needed, not needed, or unknown and why |

pub mod fleetlock;
pub mod need;
pub mod window;
#[cfg(test)]
mod window_tests;
