//! `run`: the daemon the systemd unit starts (Type=notify). Applies the test-only boot-ID
//! override and hands over to `daemon::service`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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

/// How long a restore after a cancelled shutdown watches for a prepare write that lands late
/// (`3s`) instead of `config::DEFAULT_LANDING_WINDOW`. Only the tests set it, to see the slot
/// given back without waiting a minute.
pub const LANDING_WINDOW_ENV: &str = "KUBE_SHUTDOWN_DRAIN_LANDING_WINDOW";

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
    let Some(settings) = test_duration(
        settings,
        GATE_PASS_ENV,
        "SIGUSR1 opens the reboot gate",
        |s| &mut s.gate_pass,
    ) else {
        return Ok(i32::from(EXIT_USAGE));
    };
    let Some(settings) = test_duration(
        settings,
        LANDING_WINDOW_ENV,
        "a restore after a cancel watches for a late prepare write",
        |s| &mut s.landing_window,
    ) else {
        return Ok(i32::from(EXIT_USAGE));
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
    match service::run(settings.clone(), logind::system_bus_address()).await {
        // The unit's RestartPreventExitStatus=2: restarting cannot fix it.
        Err(e) if e.is_config() => {
            tracing::error!("cannot run: {e}");
            Ok(i32::from(EXIT_USAGE))
        }
        Err(e) => Err(e.into()),
        Ok(()) => Ok(0),
    }
}

/// `settings` with the duration `field` picks replaced by the test-only variable `var`, when it
/// is set; `what` says in the log what the duration is. `None` (after an error line naming the
/// node) when the variable is not a duration.
fn test_duration(
    settings: Arc<Settings>,
    var: &str,
    what: &str,
    field: impl FnOnce(&mut Settings) -> &mut Duration,
) -> Option<Arc<Settings>> {
    let Ok(text) = std::env::var(var) else {
        return Some(settings);
    };
    let Some(value) = crate::config::duration::parse_duration(&text) else {
        tracing::error!(
            "cannot run for node {}: {var}={text:?} is not a duration (500ms, 3s)",
            settings.node_name
        );
        return None;
    };
    let mut changed = Settings::clone(&settings);
    *field(&mut changed) = value;
    tracing::info!(
        "{what} for {} on node {} ({var} is set; tests only)",
        crate::config::format_duration(value),
        changed.node_name
    );
    Some(Arc::new(changed))
}
