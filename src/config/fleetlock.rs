//! The `[fleetlock]` table: the raw serde type, its checked values and the validation into
//! [`FleetLockSettings`] (`Settings::fleetlock`), which starts the daemon's FleetLock server
//! (`crate::reboot::server`).
//!
//! ```toml
//! [fleetlock]
//! listen = "127.0.0.1:9753"   # loopback only; zincati's base_url is "http://127.0.0.1:9753/"
//! agent_user = "zincati"      # the only local user whose requests are answered
//! ```

use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

use super::from_value::{FromValue, Invalid, Value, deserialize_checked, quote, string};
use super::table::Table;
use super::{ConfigError, Source};

/// The user zincati runs as on Fedora CoreOS (`User=zincati` in zincati's
/// `dist/systemd/system/zincati.service`).
pub const DEFAULT_AGENT_USER: &str = "zincati";

/// `[fleetlock]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleetLock {
    /// Default: none (no server).
    pub listen: Option<Listen>,
    /// Default: [`DEFAULT_AGENT_USER`]. Only with `listen`.
    pub agent_user: Option<Spanned<UserName>>,
}

impl Table for RawFleetLock {
    const EXPECTING: &'static str =
        "`fleetlock` to be a [fleetlock] table (keys listen, agent_user)";
}

/// `listen`: a loopback address and a port other than 0. Loopback only because the server
/// speaks plain HTTP and answers for this node alone: its one client runs on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen(pub SocketAddr);

const LISTEN_ALLOWED: &str =
    "a loopback address and a port, e.g. \"127.0.0.1:9753\" or \"[::1]:9753\"";

impl FromValue for Listen {
    fn from_value(value: Value) -> Result<Listen, Invalid> {
        let text = string(value, LISTEN_ALLOWED)?;
        let addr: SocketAddr = text.parse().map_err(|_| {
            Invalid::new(
                format!("{} is not an address and port", quote(&text)),
                LISTEN_ALLOWED,
            )
        })?;
        if !addr.ip().is_loopback() {
            return Err(Invalid::new(
                format!(
                    "{} is not a loopback address: the server would answer other hosts",
                    quote(&text)
                ),
                LISTEN_ALLOWED,
            ));
        }
        if addr.port() == 0 {
            return Err(Invalid::new(
                format!(
                    "{} has port 0: the agent's base_url needs a fixed port",
                    quote(&text)
                ),
                LISTEN_ALLOWED,
            ));
        }
        Ok(Listen(addr))
    }
}

/// `agent_user`: a user name as useradd accepts it (letters, digits, `_`, `-`, `.`, not
/// starting with `-`, at most 32 bytes); looked up in the user database when the server starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserName(pub String);

impl FromValue for UserName {
    fn from_value(value: Value) -> Result<UserName, Invalid> {
        const ALLOWED: &str = "a user name of the system, e.g. \"zincati\"";
        let name = string(value, ALLOWED)?;
        let well_formed = !name.is_empty()
            && name.len() <= 32
            && !name.starts_with('-')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if well_formed {
            Ok(UserName(name))
        } else {
            Err(Invalid::new(
                format!("{} is not a user name", quote(&name)),
                ALLOWED,
            ))
        }
    }
}

deserialize_checked!(Listen, UserName);

/// The validated `[fleetlock]` table: present only when `listen` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetLockSettings {
    /// Where the server listens (loopback).
    pub listen: SocketAddr,
    /// The only local user whose requests reach the daemon.
    pub agent_user: String,
}

/// Applies the default user; an `agent_user` without `listen` is refused, as it names the caller
/// of a server that does not run.
pub fn settings(
    raw: RawFleetLock,
    src: &Source<'_>,
) -> Result<Option<FleetLockSettings>, ConfigError> {
    match (raw.listen, raw.agent_user) {
        (None, None) => Ok(None),
        (None, Some(user)) => Err(src.invalid(
            user.span(),
            "fleetlock.agent_user",
            Invalid::new(
                "it names who may call the FleetLock server, and `listen` starts none",
                "`listen = \"127.0.0.1:9753\"` in [fleetlock] together with it",
            ),
        )),
        (Some(Listen(listen)), user) => Ok(Some(FleetLockSettings {
            listen,
            agent_user: user.map_or_else(|| DEFAULT_AGENT_USER.to_string(), |u| u.into_inner().0),
        })),
    }
}
