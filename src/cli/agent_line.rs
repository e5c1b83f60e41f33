//! `check`'s line on the FleetLock server (`[fleetlock]`): whether the daemon's unit maps the
//! update agent's uid in its user namespace, from the unit's `PrivateUsers=` as systemd has it
//! loaded now (drop-ins included), in the words the daemon uses when it refuses to start.

use crate::cli::outln;
use crate::config::Settings;
use crate::host::logind::Logind;
use crate::reboot::{server, userns};

/// Prints the line; false when the daemon could not answer the agent (the agent's user unknown,
/// or the unit's namespace does not map it). A unit systemd cannot be asked about is said, not
/// failed: the daemon checks again at start.
pub(crate) async fn fleetlock(settings: &Settings, indent: &str) -> bool {
    let Some(fleetlock) = &settings.fleetlock else {
        return true;
    };
    let user = &fleetlock.agent_user;
    let uid = match server::agent_uid(user) {
        Ok(uid) => uid,
        Err(e) => {
            outln!("{indent}fleetlock: CANNOT ANSWER the update agent: {e}");
            return false;
        }
    };
    let asked = match Logind::connect().await {
        Ok(bus) => crate::host::systemd::private_users(bus.connection(), userns::UNIT)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let private_users = match asked {
        Ok(p) => p,
        Err(e) => {
            outln!(
                "{indent}fleetlock: cannot ask systemd for {}'s PrivateUsers= ({e}); the daemon \
                 checks at start that its namespace maps user {user} (uid {uid})",
                userns::UNIT
            );
            return true;
        }
    };
    let seen = format!(
        "{} has PrivateUsers={}",
        userns::UNIT,
        private_users.as_str()
    );
    let Some(map) = private_users.uid_map() else {
        outln!(
            "{indent}fleetlock: {seen}, which this version does not know; the daemon checks at \
             start that its namespace maps user {user} (uid {uid})"
        );
        return true;
    };
    match userns::judge_map(&seen, map, user, uid) {
        Ok(()) => {
            outln!(
                "{indent}fleetlock: the update agent, user {user} (uid {uid}), is seen by the \
                 daemon ({seen}); answering on http://{}/",
                fleetlock.listen
            );
            true
        }
        Err(e) => {
            outln!("{indent}fleetlock: CANNOT ANSWER the update agent: {e}");
            false
        }
    }
}
