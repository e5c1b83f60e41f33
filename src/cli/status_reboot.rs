//! `status`'s view of the reboots the node asks for (`[reboot]`): what the triggers say now and
//! what holds the node, judged as the daemon's follower judges them (`daemon::reboot`). The
//! sentinel command runs once (within its timeout); update_engine is asked on the system bus.

use serde::Serialize;

use crate::config::Settings;
use crate::engine::Engine;
use crate::reboot::need::Need;

/// One reason the node's reboot waits.
#[derive(Serialize)]
pub struct Hold {
    pub key: &'static str,
    pub message: String,
}

/// The reboot as `status` shows it.
#[derive(Serialize)]
pub struct RebootView {
    /// `needed`, `not_needed` or `unknown`.
    pub need: &'static str,
    /// What the triggers say, naming the file, command or service.
    pub why: String,
    /// What holds the node now (empty: nothing; a needed reboot starts).
    pub holds: Vec<Hold>,
    /// With `[fleetlock]`: where the daemon answers the update agent, and whom.
    pub fleetlock: Option<String>,
}

/// The view, or `None` without a trigger.
pub async fn read(settings: &Settings, engine: &Engine) -> Option<RebootView> {
    let reboot = &settings.reboot;
    if !reboot.enabled() && settings.fleetlock.is_none() {
        return None;
    }
    let mut needs = Vec::new();
    if let Some(file) = &reboot.sentinel_file {
        needs.push(crate::reboot::sentinel_file::need(file));
    }
    if let Some(command) = &reboot.sentinel_command {
        needs.push(crate::reboot::sentinel_command::check(&command.argv, command.timeout).await);
    }
    if reboot.update_engine {
        needs.push(update_engine().await);
    }
    let fleetlock = settings.fleetlock.as_ref().map(|f| {
        // Whether the agent's pre-reboot stands is the daemon's to know; the file's need is
        // what the other triggers say.
        format!(
            "answering the FleetLock requests of user {} on http://{}/ (a pre-reboot is a need \
             while it is asked again)",
            f.agent_user, f.listen
        )
    });
    if needs.is_empty() {
        needs.push(Need::NotNeeded(
            "no [reboot] trigger is set; the update agent asks through FleetLock".into(),
        ));
    }
    let need = Need::combined(&needs);
    let windows = crate::reboot::window::Windows::of(settings);
    // No forecast here (`forecast` makes one); the last drain's length is the estimate.
    let weighed = crate::reboot::holds_read::Weighed {
        forecast: None,
        drain_to_come: true,
    };
    let holds = crate::reboot::holds_read::holds_of(engine, &windows, weighed).await;
    let (word, why) = match need {
        Need::Needed(w) => ("needed", w),
        Need::NotNeeded(w) => ("not_needed", w),
        Need::Unknown(w) => ("unknown", w),
    };
    Some(RebootView {
        need: word,
        why,
        holds: holds
            .reasons
            .into_iter()
            .map(|r| Hold {
                key: r.key.as_str(),
                message: r.message,
            })
            .collect(),
        fleetlock,
    })
}

async fn update_engine() -> Need {
    match crate::host::logind::Logind::connect().await {
        Ok(bus) => crate::reboot::update_engine::status(bus.connection()).await,
        Err(e) => Need::Unknown(format!(
            "cannot reach the system bus for update_engine: {e}"
        )),
    }
}

/// The text lines.
pub fn say(view: &RebootView) -> Vec<String> {
    let mut lines = vec![format!(
        "  reboot:        {}: {}",
        view.need.replace('_', " "),
        view.why
    )];
    if let Some(server) = &view.fleetlock {
        lines.push(format!("  fleetlock:     {server}"));
    }
    if view.holds.is_empty() {
        lines.push("  reboot holds:  nothing".to_string());
    }
    for hold in &view.holds {
        lines.push(format!("  reboot holds:  {} ({})", hold.message, hold.key));
    }
    lines
}
