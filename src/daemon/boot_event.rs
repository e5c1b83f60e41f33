//! The Warning Event about an unclean previous boot (`host::boot_record` judged it): posted
//! once the daemon's credentials work, retried until the API server takes it.

use crate::daemon::access::Access;
use crate::host::boot_record::{BootLog, PreviousBoot, Unclean};

/// First wait after a failed attempt to post the Event; doubled up to [`POST_RETRY_MAX`].
const POST_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
/// Longest wait between attempts: the Event is retried twice a minute until it is written.
const POST_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes the Warning Event about an unclean previous boot, retrying until the API server takes
/// it, then records it as posted (a daemon restarted before that posts it again).
pub(crate) async fn post_until_done(access: Access, log: BootLog, previous: PreviousBoot) {
    let settings = &access.settings;
    use crate::events::Reason;
    let reason = match previous.unclean {
        Some(Unclean::ShutdownWithoutDrain) => Reason::ShutdownWithoutDrain,
        Some(Unclean::DrainIncomplete) => Reason::DrainIncomplete,
        None => return,
    };
    let node = &settings.node_name;
    let mut backoff = crate::backoff::Backoff::between(POST_RETRY_FIRST, POST_RETRY_MAX);
    loop {
        let posted = match access.engine().await {
            Ok(engine) => engine.try_event(reason, &previous.message).await,
            Err(e) => Err(e),
        };
        match posted {
            Ok(()) => {
                log.event_posted();
                tracing::info!(
                    "wrote Event {} on node {node} about boot {}",
                    reason.as_str(),
                    previous.boot_id
                );
                return;
            }
            Err(e) => {
                // A refused certificate passes no sooner for asking: the slowest pace.
                let wait = if e.is_permanent() {
                    POST_RETRY_MAX
                } else {
                    backoff.next_pause()
                };
                tracing::warn!(
                    "{e}; the Event about boot {} is retried in {:.1} s",
                    previous.boot_id,
                    wait.as_secs_f64()
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
}
