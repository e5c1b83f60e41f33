//! The daemon's view of systemd-logind: the Manager proxy, the delay-inhibitor lock value, the
//! shutdown signals (matched to logind as sender) and the connection with its reconnect backoff.
//!
//! The contract followed here is systemd's (`INHIBITOR_LOCKS.md`, `org.freedesktop.login1(5)`):
//! a delay lock is held while its fd is open; `PrepareForShutdown(true)` starts one shared timer
//! of `InhibitDelayMaxUSec`; `PrepareForShutdown(false)` cancels; systemd >= 255 sends
//! `PrepareForShutdownWithMetadata` just before the plain signal, naming the kind of shutdown.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::Duration;

use futures::StreamExt;
use zbus::proxy::CacheProperties;
use zbus::{Connection, OwnedVariant, proxy};

use crate::backoff::Backoff;
use crate::config::Settings;
pub use crate::host::lock::InhibitorLock;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::TimeLimit;

/// What logind's `Inhibit` is asked to block: shutdowns only, never sleep.
const INHIBIT_WHAT: &str = "shutdown";
/// A delay lock postpones the shutdown until it is released or logind's timer runs out; a block
/// lock would refuse the shutdown, which is not ours to decide.
const INHIBIT_MODE: &str = "delay";
/// The reboot gate's mode: `block` (not `block-weak`, which lets root past it on every systemd).
pub const GATE_MODE: &str = "block";
/// The `who` every lock of ours carries, so an admin sees it in `systemd-inhibit --list`.
pub const INHIBIT_WHO: &str = "kube-shutdown-drain";
/// Where D-Bus clients look for the system bus when `DBUS_SYSTEM_BUS_ADDRESS` is unset
/// (the D-Bus specification's well-known system bus address).
const DEFAULT_SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";
/// Every method call to logind gets an answer within this time or fails; logind answers in
/// microseconds, so this only bounds a hung bus.
const METHOD_TIMEOUT: Duration = Duration::from_secs(5);
/// First wait before reconnecting after the bus went away; doubled after each failure
/// (jittered, [`Backoff`]).
const RECONNECT_FIRST: Duration = Duration::from_millis(250);
/// Longest wait between reconnect attempts. The kubelet retries every 1 s
/// (`dbusReconnectPeriod`); 2 s keeps a restarted bus picked up within a few seconds.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// The error logind answers `Inhibit` with while the operation the lock would delay is already
/// running (`method_inhibit` in systemd's logind-dbus.c refuses a lock whose `what` overlaps
/// `m->action_what`, the shutdown being prepared or executed). Never "logind unavailable".
pub const OPERATION_IN_PROGRESS: &str = "org.freedesktop.login1.OperationInProgress";

/// `org.freedesktop.login1.Manager`, only the members the daemon uses.
#[proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
pub trait Manager {
    /// Takes an inhibitor lock; the returned fd holds it.
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<zbus::OwnedFd>;

    /// Asks logind to reboot (`interactive`: may polkit ask a person).
    fn reboot(&self, interactive: bool) -> zbus::Result<()>;

    /// Asks logind to power off.
    fn power_off(&self, interactive: bool) -> zbus::Result<()>;

    /// Every lock logind holds: (what, who, why, mode, uid, pid).
    #[allow(clippy::type_complexity)]
    fn list_inhibitors(&self) -> zbus::Result<Vec<(String, String, String, String, u32, u32)>>;

    /// The longest a delay lock can postpone a shutdown, in microseconds.
    #[zbus(property(emits_changed_signal = "false"), name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;

    /// True between `PrepareForShutdown(true)` and the shutdown (or its cancellation).
    #[zbus(property(emits_changed_signal = "false"))]
    fn preparing_for_shutdown(&self) -> zbus::Result<bool>;

    /// systemd >= 257: the same with the shutdown's metadata, as one `a{sv}`: `preparing` (b)
    /// and, while preparing, the kind under `type` (s) (`property_get_preparing_shutdown_with_
    /// metadata` in logind-dbus.c; read off systemd 257.13 with `busctl get-property`).
    #[zbus(property(emits_changed_signal = "false"))]
    fn preparing_for_shutdown_with_metadata(&self) -> zbus::Result<HashMap<String, OwnedVariant>>;

    /// `true`: a shutdown starts now and waits for delay locks; `false`: it was cancelled.
    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;

    /// systemd >= 255: sent just before `PrepareForShutdown`, with the kind under `type`.
    #[zbus(signal)]
    fn prepare_for_shutdown_with_metadata(
        &self,
        start: bool,
        metadata: HashMap<String, OwnedVariant>,
    ) -> zbus::Result<()>;
}

/// Failures talking to logind. Each names the bus address or the node the lock was for.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    #[error("cannot connect to the system bus at {address}: {source}")]
    Connect {
        address: String,
        source: zbus::Error,
    },
    #[error(
        "cannot reach logind (org.freedesktop.login1) on the system bus at {address}: {source}"
    )]
    Proxy {
        address: String,
        source: zbus::Error,
    },
    #[error("logind refused {what}: {source}")]
    ShutDown {
        what: &'static str,
        source: zbus::Error,
    },
    #[error("cannot read logind's property {property}: {source}")]
    Property {
        property: &'static str,
        source: zbus::Error,
    },
    #[error("cannot subscribe to logind's signal {signal}: {source}")]
    Subscribe {
        signal: &'static str,
        source: zbus::Error,
    },
    #[error("logind refused the delay inhibitor for node {node}: {source}")]
    Inhibit { node: String, source: zbus::Error },
    #[error(
        "logind refused the delay inhibitor for node {node} because a shutdown is already under \
         way ({OPERATION_IN_PROGRESS}: {message})"
    )]
    ShutdownUnderWay { node: String, message: String },
    #[error("logind refused the reboot gate's block lock for node {node}: {source}")]
    Gate { node: String, source: zbus::Error },
    #[error("the ask for the reboot gate's block lock ended: {message}")]
    GateTask { message: String },
    #[error("cannot list logind's inhibitors: {source}")]
    ListInhibitors { source: zbus::Error },
    #[error("the system bus connection at {address} closed")]
    Disconnected { address: String },
}

/// The PIDs holding a reboot gate of ours in `ListInhibitors`' answer. Pure.
pub fn gate_holders(locks: &[(String, String, String, String, u32, u32)]) -> Vec<u32> {
    locks
        .iter()
        .filter(|(what, who, _, mode, _, _)| {
            who == INHIBIT_WHO && mode == GATE_MODE && what.split(':').any(|w| w == INHIBIT_WHAT)
        })
        .map(|lock| lock.5)
        .collect()
}

/// The block locks on shutdowns other programs hold in `ListInhibitors`' answer, each as
/// "WHO (WHY, PID N)" with the foreign words cut ([`crate::text::outside`]: any local program may
/// take a lock with a reason of any length) and escaped. Before systemd 257 logind lets root past
/// them (`verify_shutdown_creds`), so the daemon's own reboot asks first and honours them. Pure.
pub fn foreign_blocks(locks: &[(String, String, String, String, u32, u32)]) -> Vec<String> {
    locks
        .iter()
        .filter(|(what, who, _, mode, _, _)| {
            who != INHIBIT_WHO && mode == "block" && what.split(':').any(|w| w == INHIBIT_WHAT)
        })
        .map(|(_, who, why, _, _, pid)| {
            let (who, why) = (crate::text::outside(who), crate::text::outside(why));
            crate::text::escaped(&format!("{who} ({why}, PID {pid})"))
        })
        .collect()
}

/// The system bus address this process uses, for messages: what `Connection::system()` reads.
pub fn system_bus_address() -> String {
    std::env::var("DBUS_SYSTEM_BUS_ADDRESS").unwrap_or_else(|_| DEFAULT_SYSTEM_BUS.to_owned())
}

/// One shutdown announcement from logind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownSignal {
    /// `PrepareForShutdown(true)`; the kind is known when the metadata signal came first
    /// (systemd >= 255), else [`ShutdownKind::Unknown`].
    Started { kind: ShutdownKind },
    /// `PrepareForShutdown(false)`: the shutdown was cancelled.
    Cancelled,
}

/// logind's Manager signals as one stream, read as [`ShutdownSignal`]s.
///
/// One subscription for both signals keeps their order: logind sends the metadata signal just
/// before the plain one, and two separate streams could hand them over in either order. The
/// stream was created from a proxy whose destination is logind's well-known name, so zbus passes
/// only signals whose sender is the unique name that currently owns it: a `busctl emit` from any
/// other connection is dropped. Other Manager signals (SessionNew, ...) are skipped.
pub struct ShutdownSignals {
    signals: zbus::proxy::SignalStream<'static>,
    kind: Option<ShutdownKind>,
    address: String,
}

impl ShutdownSignals {
    /// The next announcement. Malformed signals are logged and skipped (the kubelet crashed on
    /// one, kubernetes#97951). Fails with `Disconnected` once the bus connection is gone.
    pub async fn next(&mut self) -> Result<ShutdownSignal, LogindError> {
        while let Some(message) = self.signals.next().await {
            if let Some(signal) = PrepareForShutdownWithMetadata::from_message(message.clone()) {
                match signal.args() {
                    Ok(args) if *args.start() => {
                        self.kind = Some(metadata_kind(args.metadata()));
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(
                        "ignoring a malformed PrepareForShutdownWithMetadata signal from logind: {e}"
                    ),
                }
            } else if let Some(signal) = PrepareForShutdown::from_message(message) {
                match signal.args() {
                    Ok(args) if *args.start() => {
                        return Ok(ShutdownSignal::Started {
                            kind: self.kind.take().unwrap_or(ShutdownKind::Unknown),
                        });
                    }
                    Ok(_) => {
                        self.kind = None;
                        return Ok(ShutdownSignal::Cancelled);
                    }
                    Err(e) => tracing::warn!(
                        "ignoring a malformed PrepareForShutdown signal from logind: {e}"
                    ),
                }
            }
        }
        Err(LogindError::Disconnected {
            address: self.address.clone(),
        })
    }
}

/// The `preparing` entry of `PreparingForShutdownWithMetadata`; `None` when it is missing or not
/// a boolean.
fn preparing_in(metadata: &HashMap<String, OwnedVariant>) -> Option<bool> {
    metadata
        .get("preparing")
        .and_then(|v| bool::try_from(&**v).ok())
}

/// Reads the `type` entry of the metadata; a missing, non-string or undocumented one is
/// [`ShutdownKind::Unknown`] (said once, here).
fn metadata_kind(metadata: &HashMap<String, OwnedVariant>) -> ShutdownKind {
    let value = match metadata.get("type").map(<&str>::try_from) {
        Some(Ok(value)) => value,
        Some(Err(_)) => "(not a string)",
        None => "(none)",
    };
    ShutdownKind::from_logind(value).unwrap_or_else(|| {
        tracing::warn!(
            "logind names the shutdown's kind {value:?}, which this version does not know; \
             [shutdown] unknown applies"
        );
        ShutdownKind::Unknown
    })
}

/// A connection to the system bus with a proxy for logind's Manager.
#[derive(Clone)]
pub struct Logind {
    conn: Connection,
    manager: ManagerProxy<'static>,
    address: String,
}

impl Logind {
    /// Connects to the system bus (`DBUS_SYSTEM_BUS_ADDRESS` honoured) and builds the proxy.
    /// Properties are never cached: each read asks logind.
    pub async fn connect() -> Result<Logind, LogindError> {
        Logind::connect_at(&system_bus_address()).await
    }

    /// Connects to the bus at `address` (a D-Bus address such as `unix:path=...`).
    pub async fn connect_at(address: &str) -> Result<Logind, LogindError> {
        let address = address.to_owned();
        let conn = zbus::connection::Builder::address(address.as_str())
            .method_timeout(METHOD_TIMEOUT)
            .build()
            .await
            .map_err(|source| LogindError::Connect {
                address: address.clone(),
                source,
            })?;
        let manager = ManagerProxy::builder(&conn)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|source| LogindError::Proxy {
                address: address.clone(),
                source,
            })?;
        Ok(Logind {
            conn,
            manager,
            address,
        })
    }

    /// The bus connection (for other services on the same bus: systemd's manager).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Connects, retrying with a doubling backoff (250 ms up to 2 s) until it succeeds.
    /// Each failure is logged; the caller bounds the whole wait by dropping the future.
    pub async fn connect_with_backoff(address: &str) -> Logind {
        let mut backoff = Backoff::between(RECONNECT_FIRST, RECONNECT_MAX);
        loop {
            match Logind::connect_at(address).await {
                Ok(logind) => return logind,
                Err(e) => {
                    let wait = backoff.next_pause();
                    tracing::warn!("{e}; retrying in {} ms", wait.as_millis());
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// The bus address this connection went to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// logind's `InhibitDelayMaxUSec`, as a duration.
    pub async fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        self.manager
            .inhibit_delay_max_usec()
            .await
            .map(Duration::from_micros)
            .map_err(|source| LogindError::Property {
                property: "InhibitDelayMaxUSec",
                source,
            })
    }

    /// The shutdown logind is preparing now, if any, with its kind where logind tells
    /// (`PreparingForShutdownWithMetadata`, systemd >= 257; older ones have only the bool:
    /// [`ShutdownKind::Unknown`]).
    pub async fn shutdown_under_way(&self) -> Result<Option<ShutdownKind>, LogindError> {
        match self.manager.preparing_for_shutdown_with_metadata().await {
            Ok(metadata) => match preparing_in(&metadata) {
                Some(preparing) => return Ok(preparing.then(|| metadata_kind(&metadata))),
                None => tracing::warn!(
                    "logind's PreparingForShutdownWithMetadata has no boolean `preparing` \
                     ({metadata:?}); reading PreparingForShutdown, the kind unknown"
                ),
            },
            // An older logind has no such property: the plain one, without the kind.
            Err(zbus::Error::FDO(e))
                if matches!(
                    *e,
                    zbus::fdo::Error::UnknownProperty(_) | zbus::fdo::Error::InvalidArgs(_)
                ) => {}
            Err(e) => tracing::warn!(
                "cannot read logind's PreparingForShutdownWithMetadata ({e}); reading \
                 PreparingForShutdown, the kind unknown"
            ),
        }
        let preparing = self.preparing_for_shutdown().await?;
        Ok(preparing.then_some(ShutdownKind::Unknown))
    }

    /// Reads logind's `InhibitDelayMaxUSec` and computes the budget for `settings`: what the
    /// daemon does at each connection and each shutdown, and what `check` and `status` show.
    pub async fn time_limit(&self, settings: &Settings) -> Result<TimeLimit, LogindError> {
        let max = self.inhibit_delay_max().await?;
        Ok(crate::time_limit::compute(
            settings.drain.timeout,
            max,
            settings.daemon.release_margin,
        ))
    }

    /// logind's `PreparingForShutdown`: true while a shutdown waits for delay locks.
    pub async fn preparing_for_shutdown(&self) -> Result<bool, LogindError> {
        self.manager
            .preparing_for_shutdown()
            .await
            .map_err(|source| LogindError::Property {
                property: "PreparingForShutdown",
                source,
            })
    }

    /// Subscribes to both shutdown signals. Call it before [`Logind::take_lock`], so that a
    /// shutdown starting in between is not missed.
    pub async fn subscribe(&self) -> Result<ShutdownSignals, LogindError> {
        let signals = self
            .manager
            .inner()
            .receive_all_signals()
            .await
            .map_err(|source| LogindError::Subscribe {
                signal: "PrepareForShutdown",
                source,
            })?;
        Ok(ShutdownSignals {
            signals,
            kind: None,
            address: self.address.clone(),
        })
    }

    /// Takes the delay lock for shutdowns; `why` names the node. While a shutdown is under way
    /// logind refuses: that is [`LogindError::ShutdownUnderWay`], never a plain refusal.
    #[tracing::instrument(skip_all, fields(node = %node))]
    pub async fn take_lock(&self, node: &str) -> Result<InhibitorLock, LogindError> {
        let why = format!("draining Kubernetes node {node} before the shutdown");
        let fd = self
            .manager
            .inhibit(INHIBIT_WHAT, INHIBIT_WHO, &why, INHIBIT_MODE)
            .await
            .map_err(|source| match source {
                zbus::Error::MethodError(name, message, _)
                    if name.as_str() == OPERATION_IN_PROGRESS =>
                {
                    LogindError::ShutdownUnderWay {
                        node: node.to_owned(),
                        message: message.unwrap_or_default(),
                    }
                }
                source => LogindError::Inhibit {
                    node: node.to_owned(),
                    source,
                },
            })?;
        let lock = InhibitorLock::new(OwnedFd::from(fd));
        tracing::info!(
            fd = lock.raw_fd(),
            "holding a logind delay inhibitor for node {node}"
        );
        Ok(lock)
    }

    /// Takes the reboot gate's block lock on shutdowns (`crate::daemon::gate`); `why` is its
    /// reason as `systemd-inhibit --list` shows it. Closing the fd opens the gate.
    pub async fn take_block(&self, node: &str, why: &str) -> Result<OwnedFd, LogindError> {
        let fd = self
            .manager
            .inhibit(INHIBIT_WHAT, INHIBIT_WHO, why, GATE_MODE)
            .await
            .map_err(|source| LogindError::Gate {
                node: node.to_owned(),
                source,
            })?;
        Ok(OwnedFd::from(fd))
    }

    /// logind's `Reboot(false)`, or `PowerOff(false)`: the shutdown goes through logind, so every
    /// delay lock (the daemon's among them) is waited for as for `systemctl reboot`.
    pub async fn shut_down(&self, poweroff: bool) -> Result<(), LogindError> {
        let (what, answer) = if poweroff {
            ("PowerOff", self.manager.power_off(false).await)
        } else {
            ("Reboot", self.manager.reboot(false).await)
        };
        answer.map_err(|source| LogindError::ShutDown { what, source })
    }

    /// logind's `ListInhibitors`: (what, who, why, mode, uid, pid) for every lock.
    #[allow(clippy::type_complexity)]
    pub async fn list_inhibitors(
        &self,
    ) -> Result<Vec<(String, String, String, String, u32, u32)>, LogindError> {
        self.manager
            .list_inhibitors()
            .await
            .map_err(|source| LogindError::ListInhibitors { source })
    }

    /// Resolves once the bus connection is closed (the bus daemon went away).
    pub async fn closed(&self) {
        self.conn.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another program's lock may carry a reason of any length: it is cut where it enters, and
    /// its control characters escaped (issue 40 item 13).
    #[test]
    fn another_programs_block_lock_is_named_cut_and_escaped() {
        let lock = |who: &str, why: &str, mode: &str| {
            (
                "shutdown:sleep".to_string(),
                who.to_string(),
                why.to_string(),
                mode.to_string(),
                0,
                42,
            )
        };
        let locks = [
            lock(
                "backup",
                &format!("\x1b[2J{}", "w".repeat(100_000)),
                "block",
            ),
            lock("delayer", "short", "delay"),
            lock(INHIBIT_WHO, "ours", "block"),
        ];
        let theirs = foreign_blocks(&locks);
        assert_eq!(theirs.len(), 1, "{theirs:?}");
        assert!(
            theirs[0].starts_with("backup (\\u{1b}[2Jwww") && theirs[0].ends_with(" ..., PID 42)"),
            "{}",
            &theirs[0][..40]
        );
        assert!(
            theirs[0].len() < 2 * crate::text::OUTSIDE_MAX,
            "{}",
            theirs[0].len()
        );
    }
}
