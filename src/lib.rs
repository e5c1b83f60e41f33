//! kube-shutdown-drain: drains a Kubernetes node through the Eviction API when systemd-logind
//! announces a shutdown, and restores what it changed on the next boot.

pub mod daemon;
