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
    std::env::var("JOURNAL_STREAM").is_ok_and(|v| stream_names(&v, std::io::stderr().as_fd()))
}

/// Whether a `JOURNAL_STREAM` value (`DEV:INODE`) names the file behind `fd`.
pub fn stream_names(value: &str, fd: impl AsFd) -> bool {
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    // Compared as decimal text: the width of st_dev and st_ino differs between platforms.
    match nix::sys::stat::fstat(fd) {
        Ok(st) => st.st_dev.to_string() == dev && st.st_ino.to_string() == ino,
        Err(_) => false,
    }
}

/// Installs the global subscriber. Call once, from `main`.
pub fn init() {
    let filter = EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    if stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(layer) => {
                // Fields as plain journal fields (NODE=, POD=, BUDGET=), not F_NODE=.
                let layer = layer
                    .with_syslog_identifier("kube-shutdown-drain".to_string())
                    .with_field_prefix(None);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_must_name_the_very_file() {
        let file = tempfile::tempfile().unwrap();
        let st = nix::sys::stat::fstat(file.as_fd()).unwrap();
        assert!(stream_names(
            &format!("{}:{}", st.st_dev, st.st_ino),
            file.as_fd()
        ));
        assert!(!stream_names(
            &format!("{}:{}", st.st_dev, st.st_ino.wrapping_add(1)),
            file.as_fd()
        ));
        assert!(!stream_names("garbage", file.as_fd()));
        assert!(!stream_names("", file.as_fd()));
    }
}
