//! Logging: to the journal with structured fields when stderr is the journal (systemd sets
//! `JOURNAL_STREAM` to the device and inode of that stream), else human-readable to stderr.
//! The level comes from `KUBE_SHUTDOWN_DRAIN_LOG` (an EnvFilter), default `info`.

use std::os::fd::AsFd;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable holding the log filter.
pub const LOG_ENV: &str = "KUBE_SHUTDOWN_DRAIN_LOG";

/// Whether `JOURNAL_STREAM` (`DEV:INODE`) names the file our stderr is.
pub fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_fd()) {
        Ok(st) => st.st_dev as u64 == dev && st.st_ino as u64 == ino,
        Err(_) => false,
    }
}

/// Installs the global subscriber. Call once, from `main`.
pub fn init() {
    let filter = EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    if stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer.with_syslog_identifier("kube-shutdown-drain".to_string());
                tracing_subscriber::registry()
                    .with(filter)
                    .with(layer)
                    .init();
                return;
            }
            Err(e) => eprintln!("cannot log to the journal ({e}); logging to stderr"),
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
