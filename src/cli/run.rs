//! `run`: the daemon the systemd unit starts (Type=notify). Applies the test-only boot-ID
//! override and hands over to `daemon::service`.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::EXIT_USAGE;
use crate::config::Settings;
use crate::daemon::service;
use crate::engine::Engine;
use crate::host::logind;

/// Names a file to read the boot ID from instead of `/proc/sys/kernel/random/boot_id`. Only the
/// tests and the demo set it, to simulate a reboot without one.
pub const BOOT_ID_FILE_ENV: &str = "KUBE_SHUTDOWN_DRAIN_BOOT_ID_FILE";

/// Names a directory to watch for logind's schedule file instead of `/run/systemd/shutdown`.
/// Only the tests set it: the real path is fixed, as logind's is.
pub const SCHEDULE_DIR_ENV: &str = "KUBE_SHUTDOWN_DRAIN_SCHEDULE_DIR";

/// How long SIGUSR1 opens the reboot gate (`500ms`, `3s`) instead of `config::DEFAULT_GATE_PASS`. Only
/// the tests set it, to see a pass end without waiting two minutes.
pub const GATE_PASS_ENV: &str = "KUBE_SHUTDOWN_DRAIN_GATE_PASS";

/// Runs the daemon until SIGTERM/SIGINT; returns the process exit code.
pub async fn run(settings: Arc<Settings>) -> anyhow::Result<i32> {
    let settings = match std::env::var_os(SCHEDULE_DIR_ENV) {
        Some(dir) => {
            let mut changed = Settings::clone(&settings);
            changed.schedule_dir = PathBuf::from(dir);
            tracing::info!(
                "watching {} for logind's schedule ({SCHEDULE_DIR_ENV} is set; tests only)",
                changed.schedule_dir.display()
            );
            Arc::new(changed)
        }
        None => settings,
    };
    let settings = match std::env::var_os(BOOT_ID_FILE_ENV) {
        Some(path) => {
            let mut changed = Settings::clone(&settings);
            changed.boot_id_path = PathBuf::from(path);
            tracing::info!(
                "reading the boot ID from {} ({BOOT_ID_FILE_ENV} is set; tests only)",
                changed.boot_id_path.display()
            );
            Arc::new(changed)
        }
        None => settings,
    };
    let settings = match std::env::var(GATE_PASS_ENV) {
        Ok(text) => {
            let Some(pass) = crate::config::duration::parse_duration(&text) else {
                tracing::error!(
                    "cannot run for node {}: {GATE_PASS_ENV}={text:?} is not a duration \
                     (500ms, 3s)",
                    settings.node_name
                );
                return Ok(i32::from(EXIT_USAGE));
            };
            let mut changed = Settings::clone(&settings);
            changed.gate_pass = pass;
            tracing::info!(
                "SIGUSR1 opens the reboot gate of node {} for {} ({GATE_PASS_ENV} is set; tests \
                 only)",
                changed.node_name,
                crate::config::format_duration(pass)
            );
            Arc::new(changed)
        }
        Err(_) => settings,
    };
    tracing::info!(
        "starting for node {} (config {}, system bus {})",
        settings.node_name,
        settings.source.as_ref().map_or_else(
            || "built-in defaults".to_owned(),
            |p| p.display().to_string()
        ),
        logind::system_bus_address()
    );
    if let Some(w) = crate::config::advice::taint_effect(&settings) {
        tracing::warn!("{w}");
    }
    // A kubeconfig that cannot be used is a configuration error now, not at the first shutdown.
    // The engine is dropped again: the client is built only when a restore or drain needs it.
    if let Err(e) = Engine::new(settings.clone()) {
        tracing::error!("cannot run for node {}: {e}", settings.node_name);
        return Ok(i32::from(EXIT_USAGE));
    }
    service::run(settings, logind::system_bus_address()).await?;
    Ok(0)
}
