//! The daemon: holds a logind delay inhibitor, drains on shutdown, restores on the next boot.

mod access;
pub mod boot_record;
pub mod forecast;
pub mod gate;
pub mod kubelet;
pub mod lock;
pub mod logind;
pub mod metrics;
mod outcome;
pub mod phase;
pub mod restore;
pub mod service;
mod signals;
pub mod status;
pub mod systemd;
pub mod writer;
