//! kube-shutdown-drain: drains a Kubernetes node through the Eviction API when systemd-logind
//! announces a shutdown, and restores what it changed on the next boot.

pub mod api;
pub mod backoff;

pub mod cli;
pub mod config;
pub mod daemon;
pub mod drain;
pub mod engine;
pub mod events;
pub mod fleet;
pub mod forecast;
pub mod host;
pub mod logging;
pub mod node;
pub mod policy;
pub mod process_group;
pub mod reboot;
pub mod report;
pub mod scheduled;
pub mod shutdown_kind;
pub mod state_file;
pub mod text;
pub mod time_limit;
pub mod words;
