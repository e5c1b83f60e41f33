//! The daemon: holds a logind delay inhibitor, drains on shutdown, restores on the next boot.

pub mod boot_record;
pub mod budget;
mod drain;
pub mod kubelet;
pub mod logind;
pub mod metrics;
mod outcome;
pub mod restore;
pub mod service;
pub mod shutdown_start;
mod signals;
pub mod status;
