//! The logind lines `check` and `status` print: the shutdown's time limit from logind's
//! `InhibitDelayMaxUSec` and whether the kubelet holds a delay inhibitor of its own.

use crate::cli::outln;
use crate::config::Settings;
use crate::host::logind::Logind;
use crate::time_limit;

/// Prints the shutdown's time limit from logind's `InhibitDelayMaxUSec` (a read-only property on the
/// system bus). Returns false when logind cannot be reached or read (the daemon needs it) or cuts
/// the configured drain timeout short.
pub(crate) async fn logind_time_limit(settings: &Settings, indent: &str) -> bool {
    match Logind::connect().await {
        Err(e) => {
            outln!("{indent}logind: NOT REACHABLE ({e}); the daemon needs it");
            false
        }
        Ok(logind) => match logind.time_limit(settings).await {
            Err(e) => {
                outln!("{indent}logind: cannot read InhibitDelayMaxUSec ({e})");
                false
            }
            Ok(b) => {
                outln!(
                    "{indent}logind: InhibitDelayMaxSec {}, shutdown drain budget {}",
                    time_limit::seconds(b.logind_max),
                    time_limit::seconds(b.drain)
                );
                kubelet_lock(&logind, settings, indent).await;
                match b.warning {
                    Some(w) => {
                        outln!("{indent}logind: WARNING {w}");
                        false
                    }
                    None => true,
                }
            }
        },
    }
}

/// Warns when the kubelet holds its own delay inhibitor for shutdowns (Graceful Node Shutdown):
/// it acts at the same moment as the daemon (docs/kubelet.md). A warning only: the daemon works, but budgets are not honoured for what the
/// kubelet kills first.
async fn kubelet_lock(logind: &Logind, settings: &Settings, indent: &str) {
    match crate::host::kubelet::inspect(settings, logind).await {
        Err(e) => outln!("{indent}kubelet: cannot list logind's inhibitors ({e})"),
        Ok(Some(w)) => outln!("{indent}kubelet: WARNING {w}"),
        Ok(None) => outln!(
            "{indent}kubelet: holds no shutdown inhibitor ({})",
            crate::host::kubelet::describe_grace(&crate::host::kubelet::settings_grace(settings))
        ),
    }
}

/// With `[fleet] gate`: whether the daemon's reboot gate is closed now (its block lock and
/// reason, as logind lists them) and what it binds on this systemd, with the way past it.
pub(crate) async fn gate(settings: &Settings, indent: &str) {
    if !settings.fleet.gate {
        return;
    }
    let logind = match Logind::connect().await {
        Ok(logind) => logind,
        Err(e) => {
            outln!("{indent}reboot gate: cannot tell ({e})");
            return;
        }
    };
    match logind.list_inhibitors().await {
        Err(e) => outln!("{indent}reboot gate: cannot tell ({e})"),
        Ok(locks) => {
            let ours: Vec<&String> = locks
                .iter()
                .filter(|l| !crate::host::logind::gate_holders(std::slice::from_ref(*l)).is_empty())
                .map(|l| &l.2)
                .collect();
            match ours.first() {
                Some(why) => outln!("{indent}reboot gate: CLOSED: {why}"),
                None => outln!("{indent}reboot gate: open"),
            }
        }
    }
    let version = crate::host::systemd::version(logind.connection())
        .await
        .ok();
    outln!(
        "{indent}reboot gate: {}",
        crate::host::systemd::binding_line(version.as_deref())
    );
}
