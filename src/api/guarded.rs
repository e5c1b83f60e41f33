//! The one guarded write: a JSON patch built by a pure function from the object as read, whose
//! `test` operations are its precondition; when a guard fails (422 for a failed `test`, 409 for
//! a resourceVersion conflict) the object is read again and the patch built anew. Each request
//! is retried after transient failures until the deadline ([`Clients::retry`]); a write that was
//! applied although its answer was lost fails its guard on the next attempt instead of applying
//! twice, and the builder then sees the object as that write left it.

use std::fmt::Debug;

use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::{ApiError, Clients};

/// The field manager name on our writes.
pub const FIELD_MANAGER: &str = "kube-shutdown-drain";
/// Read-modify-write rounds before a guarded write gives up (another writer keeps winning).
pub const ATTEMPTS: usize = 10;

/// What a guarded write did.
#[derive(Debug)]
pub struct Written<K, T> {
    /// The object as the last answer showed it.
    pub object: K,
    /// The plan of the patch that was applied; `None` when the builder found nothing to do.
    pub applied: Option<T>,
}

/// A guarded write failed.
#[derive(Debug)]
pub enum GuardedError<E> {
    /// The builder refused the object as read.
    Build(E),
    /// A request failed for good, or until the deadline.
    Api(ApiError),
    /// The guard failed [`ATTEMPTS`] times.
    Contended,
}

/// Writes `name` guarded: `build` turns the object as read into `(patch, plan)` or `None`
/// (nothing to do). `current` is the object as last read. The write names [`FIELD_MANAGER`].
pub async fn write<K, T, E, B>(
    clients: &Clients,
    api: &Api<K>,
    name: &str,
    object: &str,
    deadline: Instant,
    current: K,
    build: B,
) -> Result<Written<K, T>, GuardedError<E>>
where
    K: Clone + DeserializeOwned + Debug,
    B: FnMut(&K) -> Result<Option<(json_patch::Patch, T)>, E>,
{
    let at = Target { api, name, object };
    write_as(FIELD_MANAGER, clients, at, deadline, current, build).await
}

/// The object a guarded write changes: its API, its name, and how messages name it.
pub struct Target<'a, K> {
    pub api: &'a Api<K>,
    pub name: &'a str,
    pub object: &'a str,
}

/// [`write`] naming `manager` as the field manager (an admin's `fleet` command).
pub async fn write_as<K, T, E, B>(
    manager: &str,
    clients: &Clients,
    Target { api, name, object }: Target<'_, K>,
    deadline: Instant,
    mut current: K,
    mut build: B,
) -> Result<Written<K, T>, GuardedError<E>>
where
    K: Clone + DeserializeOwned + Debug,
    B: FnMut(&K) -> Result<Option<(json_patch::Patch, T)>, E>,
{
    let pp = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    for _ in 0..ATTEMPTS {
        let Some((patch, plan)) = build(&current).map_err(GuardedError::Build)? else {
            return Ok(Written {
                object: current,
                applied: None,
            });
        };
        let patch = Patch::<()>::Json(patch);
        match clients
            .retry(deadline, object, || api.patch(name, &pp, &patch))
            .await
        {
            Ok(object) => {
                return Ok(Written {
                    object,
                    applied: Some(plan),
                });
            }
            Err(e) if e.is_guard_failure() => {
                tracing::debug!("{e}; {object} changed under us, reading it again");
                current = clients
                    .retry(deadline, object, || api.get(name))
                    .await
                    .map_err(GuardedError::Api)?;
            }
            Err(e) => return Err(GuardedError::Api(e)),
        }
    }
    Err(GuardedError::Contended)
}

/// Parses JSON-patch operations built as values (a builder's last step).
pub fn patch_of(ops: Vec<serde_json::Value>) -> Result<json_patch::Patch, serde_json::Error> {
    serde_json::from_value(serde_json::Value::Array(ops))
}
