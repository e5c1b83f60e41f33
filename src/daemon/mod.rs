//! The daemon: holds a logind delay inhibitor, drains on shutdown, restores on the next boot.

mod access;
mod boot_event;
pub mod forecast;
pub mod gate;
pub mod metrics;
mod outcome;
pub mod phase;
pub mod reboot;
pub mod restore;
pub mod service;
mod signals;
pub mod status;
