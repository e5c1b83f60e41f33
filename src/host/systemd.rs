//! What the daemon asks the service manager (systemd, `org.freedesktop.systemd1` on the system
//! bus): whether the system is shutting down when SIGTERM arrives, and how long the unit may take
//! to stop. These decide the stop phase's second stage (`service/stop_stage.rs`).
//!
//! "Shutting down" is the manager's `SystemState` being `stopping`: systemd's `manager_state()`
//! (src/core/manager.c) returns it while `shutdown.target` is active or has a job queued, which
//! every orderly shutdown has (reboot, poweroff, halt, kexec, soft-reboot, whether it went
//! through logind or not: `systemctl start reboot.target`, SIGRTMIN+5 to PID 1), and never a
//! `systemctl stop` or `restart` of the unit while the system runs.
//!
//! The stage's time is the unit's own `TimeoutStopUSec` (the unit's `TimeoutStopSec=`, read from
//! the unit the daemon runs in, `GetUnitByPID(0)`: the caller's unit): one number in one place,
//! which a drop-in or `systemctl edit` changes for systemd and the daemon alike.
//!
//! `check` asks one more thing, of the unit by name: its `PrivateUsers=`, which decides whether
//! the FleetLock server can see the update agent's uid (`crate::reboot::userns`).

use std::time::Duration;

use zbus::{Connection, proxy};

/// `org.freedesktop.systemd1.Manager`, only what the daemon reads.
#[proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    /// The unit a process belongs to; PID 0 is the caller.
    #[zbus(name = "GetUnitByPID")]
    fn get_unit_by_pid(&self, pid: u32) -> zbus::Result<zbus::OwnedObjectPath>;

    /// `initializing`, `starting`, `running`, `degraded`, `maintenance`, `stopping`, ...
    #[zbus(property(emits_changed_signal = "false"))]
    fn system_state(&self) -> zbus::Result<String>;

    /// The manager's version: `257.13-1~deb13u1`, `252.38-1~deb12u1`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> zbus::Result<String>;

    /// The object of the unit `name`, loaded from its file when it is not loaded yet.
    fn load_unit(&self, name: &str) -> zbus::Result<zbus::OwnedObjectPath>;
}

/// `org.freedesktop.systemd1.Service`: its stop timeout and its user namespace.
#[proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
trait Service {
    #[zbus(property(emits_changed_signal = "false"), name = "TimeoutStopUSec")]
    fn timeout_stop_usec(&self) -> zbus::Result<u64>;

    /// `PrivateUsers=` as a word (`no`, `self`, `identity`, ...), systemd 257 and newer.
    #[zbus(property(emits_changed_signal = "const"), name = "PrivateUsersEx")]
    fn private_users_ex(&self) -> zbus::Result<String>;

    /// `PrivateUsers=` as a boolean, the only form before systemd 257.
    #[zbus(property(emits_changed_signal = "const"), name = "PrivateUsers")]
    fn private_users(&self) -> zbus::Result<bool>;
}

/// What the unit `name` asks for as `PrivateUsers=` (loaded as systemd has it now, drop-ins
/// included): `PrivateUsersEx`, else the boolean of a systemd older than 257.
pub async fn private_users(conn: &Connection, name: &str) -> zbus::Result<PrivateUsers> {
    let manager = ManagerProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let unit = manager.load_unit(name).await?;
    let service = ServiceProxy::builder(conn)
        .path(unit)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    match service.private_users_ex().await {
        Ok(word) => Ok(PrivateUsers::from_ex(&word)),
        Err(_) => Ok(PrivateUsers::from_bool(service.private_users().await?)),
    }
}

/// Whether the system is shutting down now (`SystemState` is `stopping`).
pub async fn shutting_down(conn: &Connection) -> Result<bool, AskError> {
    let manager = ManagerProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    Ok(manager.system_state().await? == "stopping")
}

/// The service manager's version (whether the reboot gate binds root, `crate::daemon::gate`).
pub async fn version(conn: &Connection) -> zbus::Result<String> {
    let manager = ManagerProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    manager.version().await
}

/// The daemon's own unit's `TimeoutStopUSec`; `None` when it has none (infinity).
pub async fn stop_timeout(conn: &Connection) -> Result<Option<Duration>, AskError> {
    let manager = ManagerProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let unit = manager.get_unit_by_pid(0).await?;
    let service = ServiceProxy::builder(conn)
        .path(unit)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let usec = service.timeout_stop_usec().await?;
    Ok((usec != u64::MAX).then(|| Duration::from_micros(usec)))
}

/// What systemd did not say.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("no connection to the system bus")]
    NoBus,
    #[error("systemd did not answer within {} ms", .0.as_millis())]
    NoAnswer(Duration),
    /// Nothing on the bus owns systemd's name (the bus answers `ServiceUnknown`): the daemon
    /// runs where systemd is not the service manager (the demo and the tests, on a private
    /// bus; a container), so no stop phase follows a shutdown's window.
    #[error(
        "systemd is not on this system bus (no {SERVICE}): the daemon does not run under \
         systemd"
    )]
    NotOnBus,
    #[error("systemd answered with an error: {0}")]
    Bus(zbus::Error),
}

/// systemd's bus name.
pub const SERVICE: &str = "org.freedesktop.systemd1";

impl From<zbus::Error> for AskError {
    /// `ServiceUnknown` or `NameHasNoOwner` from the bus itself is [`AskError::NotOnBus`].
    fn from(e: zbus::Error) -> AskError {
        let fdo = |e: &zbus::fdo::Error| {
            matches!(
                e,
                zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
            )
        };
        match &e {
            zbus::Error::FDO(e) if fdo(e) => AskError::NotOnBus,
            zbus::Error::MethodError(name, _, _)
                if matches!(
                    name.as_str(),
                    "org.freedesktop.DBus.Error.ServiceUnknown"
                        | "org.freedesktop.DBus.Error.NameHasNoOwner"
                ) =>
            {
                AskError::NotOnBus
            }
            _ => AskError::Bus(e),
        }
    }
}

/// [`stop_timeout`] on `conn`, bounded by `within`.
pub async fn stop_timeout_within(
    conn: Option<&Connection>,
    within: Duration,
) -> Result<Option<Duration>, AskError> {
    let conn = conn.ok_or(AskError::NoBus)?;
    match tokio::time::timeout(within, stop_timeout(conn)).await {
        Ok(read) => read,
        Err(_) => Err(AskError::NoAnswer(within)),
    }
}

/// The second stage's time from the unit's stop timeout: what systemd allows minus `margin`
/// (the daemon's exit, the report's write), at most `drain_left` (what is left of the drain's
/// `[drain] timeout`). `None` when nothing is left. Pure.
pub fn stage_time(
    stop_timeout: Option<Duration>,
    margin: Duration,
    drain_left: Duration,
) -> Option<Duration> {
    let time = match stop_timeout {
        Some(t) => t.saturating_sub(margin).min(drain_left),
        None => drain_left,
    };
    (!time.is_zero()).then_some(time)
}

/// The first systemd whose logind makes a `block` lock bind the lock holder's own UID (root).
pub const BLOCK_BINDS_ROOT_FROM: u32 = 257;

/// Whether the logind of systemd `version` (the manager's `Version` property: `257.13-1`,
/// `v256`, `252.38-1~deb12u1`) holds root to a block lock; `None` when it cannot be read. Pure.
pub fn binds_root(version: &str) -> Option<bool> {
    let digits: String = version
        .trim_start_matches('v')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse::<u32>()
        .ok()
        .map(|major| major >= BLOCK_BINDS_ROOT_FROM)
}

/// What `check` and the daemon's start say of the gate on systemd `version`.
pub fn binding_line(version: Option<&str>) -> String {
    let way = "the way past it: `kube-shutdown-drain reboot [--force]`, or stopping \
               kube-shutdown-drain.service";
    match version.map(|v| (v, binds_root(v))) {
        Some((v, Some(true))) => format!(
            "systemd {v}: the reboot gate binds root too (a plain `systemctl reboot` is \
             refused while it is closed; `-i` needs polkit); {way}"
        ),
        Some((v, Some(false))) => format!(
            "systemd {v}: the reboot gate binds only unprivileged users (logind holds root to a \
             block lock from systemd {BLOCK_BINDS_ROOT_FROM}); root's `systemctl reboot` passes \
             it; {way}"
        ),
        Some((v, None)) => format!("systemd version {v:?} not understood; {way}"),
        None => format!("the systemd version cannot be read; {way}"),
    }
}

/// What a unit's `PrivateUsers=` asks for, as systemd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivateUsers {
    /// `no`: the host's namespace.
    No,
    /// `self` (`yes`): root and the unit's user, root here.
    SelfOnly,
    /// `identity`: uids 0 to 65535.
    Identity,
    /// A value this version does not know (a newer systemd's).
    Other(String),
}

impl PrivateUsers {
    /// From `PrivateUsersEx` (systemd 257 and newer).
    pub fn from_ex(value: &str) -> PrivateUsers {
        match value {
            "no" => PrivateUsers::No,
            "self" => PrivateUsers::SelfOnly,
            "identity" => PrivateUsers::Identity,
            other => PrivateUsers::Other(other.to_string()),
        }
    }

    /// From the boolean `PrivateUsers` of an older systemd.
    pub fn from_bool(on: bool) -> PrivateUsers {
        if on {
            PrivateUsers::SelfOnly
        } else {
            PrivateUsers::No
        }
    }

    /// The uid map the unit's processes get, as `/proc/self/uid_map` would show it; `None` for a
    /// value this version does not know.
    pub fn uid_map(&self) -> Option<&'static str> {
        match self {
            PrivateUsers::No => Some("0 0 4294967295"),
            PrivateUsers::SelfOnly => Some("0 0 1"),
            PrivateUsers::Identity => Some("0 0 65536"),
            PrivateUsers::Other(_) => None,
        }
    }

    /// The setting as a unit file spells it.
    pub fn as_str(&self) -> &str {
        match self {
            PrivateUsers::No => "no",
            PrivateUsers::SelfOnly => "self",
            PrivateUsers::Identity => "identity",
            PrivateUsers::Other(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_bound_from_systemd_257() {
        for (version, want) in [
            ("257.13-1~deb13u1", Some(true)),
            ("v257", Some(true)),
            ("258", Some(true)),
            ("256.7", Some(false)),
            ("252.38-1~deb12u1", Some(false)),
            ("", None),
            ("git", None),
        ] {
            assert_eq!(binds_root(version), want, "{version:?}");
        }
        assert!(binding_line(Some("257.13")).contains("binds root too"));
        assert!(binding_line(Some("252.38")).contains("only unprivileged users"));
        assert!(binding_line(None).contains("kube-shutdown-drain reboot [--force]"));
    }

    #[test]
    fn the_stage_is_the_unit_timeout_less_the_margin_capped_by_the_drain_timeout() {
        let s = Duration::from_secs;
        assert_eq!(stage_time(Some(s(90)), s(5), s(120)), Some(s(85)));
        assert_eq!(stage_time(Some(s(300)), s(5), s(120)), Some(s(120)));
        assert_eq!(stage_time(None, s(5), s(120)), Some(s(120)));
        assert_eq!(stage_time(Some(s(4)), s(5), s(120)), None);
    }
}
