//! `[reboot] update_engine = true`: Flatcar's update_engine on the system bus says when an
//! update waits for a reboot; followed by the daemon's reboot follower (`crate::daemon::reboot`).
//!
//! The names are update_engine's own (coreos update_engine, `src/update_engine/main.cc`
//! requests the bus name `com.coreos.update1` and registers its object at `/com/coreos/update1`;
//! `dbus_service.cc` has `GetStatus` answer, and the `StatusUpdate` signal carry, the same five
//! values: last checked time (int64), progress (double), current operation (string), new
//! version (string), new size (int64), D-Bus signature `xdssx`); the interface,
//! `com.coreos.update1.Manager`, is the one locksmith's and FLUO's clients call. The operation
//! `UPDATE_STATUS_UPDATED_NEED_REBOOT` means an update is installed and waits for a reboot
//! (update_engine's `UpdateStatusOperation`).

use tokio::sync::watch;
use zbus::{Connection, proxy};

use crate::reboot::need::Need;
use crate::text;

/// update_engine's bus name.
pub const SERVICE: &str = "com.coreos.update1";
/// The operation that means an update waits for a reboot.
pub const NEED_REBOOT: &str = "UPDATE_STATUS_UPDATED_NEED_REBOOT";

/// `com.coreos.update1.Manager`, only what is read here.
#[proxy(
    interface = "com.coreos.update1.Manager",
    default_service = "com.coreos.update1",
    default_path = "/com/coreos/update1"
)]
pub trait Manager {
    /// (last checked time, progress, current operation, new version, new size).
    fn get_status(&self) -> zbus::Result<(i64, f64, String, String, i64)>;

    /// Sent at every change of the status, with the same values as `GetStatus`.
    #[zbus(signal)]
    fn status_update(
        &self,
        last_checked_time: i64,
        progress: f64,
        current_operation: String,
        new_version: String,
        new_size: i64,
    ) -> zbus::Result<()>;
}

/// What an operation and the version it names say. Both are update_engine's words, cut where
/// they enter ([`crate::text::outside`]): a status of any length makes a line of a few hundred
/// bytes at most.
pub fn need(operation: &str, new_version: &str) -> Need {
    if operation == NEED_REBOOT {
        Need::Needed(format!(
            "update_engine ({SERVICE}) installed {} and waits for a reboot",
            if new_version.is_empty() {
                "an update".to_string()
            } else {
                text::outside(new_version)
            }
        ))
    } else {
        Need::NotNeeded(format!(
            "update_engine ({SERVICE}) reports {}",
            text::outside(operation)
        ))
    }
}

/// A D-Bus error, which may carry the words of whoever answered, cut as [`need`] cuts.
fn said(e: &zbus::Error) -> String {
    text::outside(&e.to_string())
}

/// Asks update_engine for its status once.
pub async fn status(conn: &Connection) -> Need {
    let asked = async {
        let manager = ManagerProxy::new(conn).await?;
        manager.get_status().await
    };
    match asked.await {
        Ok((_, _, operation, version, _)) => need(&operation, &version),
        Err(e) => Need::Unknown(format!(
            "cannot read update_engine's status ({SERVICE}): {}",
            said(&e)
        )),
    }
}

/// Publishes update_engine's status on `tx`: once from `GetStatus`, then at every
/// `StatusUpdate`. The signal is subscribed to before the status is asked, so no change falls
/// between the two. Returns when the signal stream ends (the bus went away), after publishing
/// an unknown answer saying so, or when every receiver is gone.
pub async fn follow(conn: &Connection, tx: &watch::Sender<Need>) {
    use futures::StreamExt;
    let subscribed = async {
        let manager = ManagerProxy::new(conn).await?;
        manager.receive_status_update().await
    };
    let mut updates = match subscribed.await {
        Ok(updates) => updates,
        Err(e) => {
            let _ = tx.send(Need::Unknown(format!(
                "cannot follow update_engine's status ({SERVICE}): {}",
                said(&e)
            )));
            return;
        }
    };
    if tx.send(status(conn).await).is_err() {
        return;
    }
    loop {
        let update = tokio::select! {
            update = updates.next() => update,
            () = tx.closed() => return,
        };
        let Some(update) = update else {
            let _ = tx.send(Need::Unknown(format!(
                "update_engine's status signal ({SERVICE}) ended: the bus went away"
            )));
            return;
        };
        let answer = match update.args() {
            Ok(args) => need(&args.current_operation, &args.new_version),
            Err(e) => Need::Unknown(format!(
                "update_engine ({SERVICE}) sent a status this daemon cannot read: {}",
                said(&e)
            )),
        };
        if tx.send(answer).is_err() {
            return;
        }
    }
}
