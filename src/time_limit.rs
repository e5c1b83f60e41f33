//! The shutdown's time limit: the one deadline for prepare + drain, computed by a pure function from
//! the configured drain timeout and logind's `InhibitDelayMaxUSec`, with the warning to show when
//! logind allows less than the configuration asks for; and the allowances around it, each the
//! longest some step may run past a deadline, all covered by the release margin (checked when
//! this compiles).
//!
//! logind runs one timer of `InhibitDelayMaxUSec` from `PrepareForShutdown(true)` and then shuts
//! down whatever the locks say (systemd `manager_dispatch_delayed` in logind-dbus.c). The daemon
//! must have released its lock before that timer fires, so its time limit is the smaller of the drain
//! timeout and logind's maximum minus a safety margin (`[daemon] release_margin`).

use std::time::Duration;

/// The smallest `[daemon] release_margin`: the lock is released by [`RELEASE_GUARD`] past the
/// drain's deadline at the latest, so the margin must cover that with room to spare.
pub const MIN_RELEASE_MARGIN: Duration = Duration::from_secs(1);

/// How long past the drain's deadline the inhibitor may still be held: the lock's own thread
/// (`host::lock`) closes it then, whatever the drain, the disk, the journal or the runtime are
/// doing.
pub const RELEASE_GUARD: Duration = Duration::from_millis(500);

/// How long after a drain ends the report file and the boot record's end of the shutdown are
/// waited for before the lock goes (they are written off the shutdown path; a stalled disk
/// costs no more than this).
pub const WRITE_ALLOWANCE: Duration = Duration::from_millis(100);

/// The share of the drain's deadline kept back for the deadline action (`on_deadline`) and the
/// final Node Events: min(this, a tenth of the time limit).
pub const DRAIN_RESERVE_MAX: Duration = Duration::from_millis(500);

/// The final Node Events of a drain wait at most this long, and never past its deadline.
pub const FINAL_EVENTS_MAX: Duration = Duration::from_secs(1);

/// How long past a restore's deadline its Node Events may take (they are for people; no logind
/// timer runs during a restore).
pub const RESTORE_EVENTS_ALLOWANCE: Duration = Duration::from_millis(500);

// The release margin covers everything that may run past the drain's deadline while the lock
// is held: the guard, and within it the writes waited for.
const _: () = assert!(WRITE_ALLOWANCE.as_millis() <= RELEASE_GUARD.as_millis());
const _: () = assert!(RELEASE_GUARD.as_millis() < MIN_RELEASE_MARGIN.as_millis());

/// The logind drop-in that raises `InhibitDelayMaxSec` for us. It sorts after the kubelet's
/// `99-kubelet.conf` (drop-ins are read in file-name order and the last one wins).
pub const LOGIND_DROP_IN: &str = "/usr/lib/systemd/logind.conf.d/99-zz-kube-shutdown-drain.conf";

/// The shutdown's time limit and, when logind allows less than asked, why it was clamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeLimit {
    /// How long prepare + drain may take, counted from `PrepareForShutdown(true)`.
    pub drain: Duration,
    /// logind's `InhibitDelayMaxUSec` the limit was computed from.
    pub logind_max: Duration,
    /// Set when logind's maximum is below the configured drain timeout plus the margin.
    pub warning: Option<TimeLimitWarning>,
}

/// logind's maximum delay is too short for the configured drain timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeLimitWarning {
    /// What the configuration asks of logind: drain timeout + margin.
    pub needed: Duration,
    /// What logind allows.
    pub logind_max: Duration,
    /// What the drain gets instead of the configured timeout.
    pub clamped_to: Duration,
}

impl std::fmt::Display for TimeLimitWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "logind's InhibitDelayMaxSec is {}, below the {} the drain timeout needs; drains are \
             cut to {}. Fix: set InhibitDelayMaxSec={} in the [Login] section of {} (or of a drop-in in \
             /etc/systemd/logind.conf.d/ that sorts after 99-kubelet.conf) and run \
             \"systemctl kill -s HUP systemd-logind\"",
            seconds(self.logind_max),
            seconds(self.needed),
            seconds(self.clamped_to),
            self.needed.as_secs() + u64::from(self.needed.subsec_nanos() > 0),
            LOGIND_DROP_IN,
        )
    }
}

/// The time limit: min(drain timeout, logind max - margin). Zero when logind's maximum does not
/// even cover the margin; then the drain is skipped, not stretched.
pub fn compute(drain_timeout: Duration, logind_max: Duration, margin: Duration) -> TimeLimit {
    let available = logind_max.saturating_sub(margin);
    let drain = drain_timeout.min(available);
    let needed = drain_timeout.saturating_add(margin);
    let warning = (logind_max < needed).then_some(TimeLimitWarning {
        needed,
        logind_max,
        clamped_to: drain,
    });
    TimeLimit {
        drain,
        logind_max,
        warning,
    }
}

/// What is left of `limit` at `now` for a shutdown whose logind timer started at `started_at`
/// (both on one clock, e.g. CLOCK_BOOTTIME). Zero once the limit is spent. A start that lies
/// after `now` (a clock that cannot be trusted) leaves the whole limit, never more.
pub fn remaining(started_at: Duration, now: Duration, limit: Duration) -> Duration {
    limit.saturating_sub(now.saturating_sub(started_at))
}

/// A duration as seconds for humans: "5 s", "2.5 s".
pub fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn time_limit_table() {
        // (drain timeout, logind max, margin) -> (time limit, warning expected)
        let table = [
            // logind generous: the drain timeout is the limit, no warning
            ((60.0, 90.0, 1.0), (60.0, false)),
            // exactly enough: timeout + margin == logind max
            ((60.0, 61.0, 1.0), (60.0, false)),
            // just short: clamped by the margin, warned
            ((60.0, 60.0, 1.0), (59.0, true)),
            // logind's default of 5 s
            ((60.0, 5.0, 1.0), (4.0, true)),
            // logind's maximum smaller than the margin: nothing left
            ((60.0, 0.5, 1.0), (0.0, true)),
            // zero margin
            ((10.0, 10.0, 0.0), (10.0, false)),
            // short drain timeout, short logind: timeout still wins
            ((2.0, 5.0, 1.0), (2.0, false)),
        ];
        for ((timeout, max, margin), (want, warned)) in table {
            let limit = compute(s(timeout), s(max), s(margin));
            assert_eq!(
                limit.drain,
                s(want),
                "time limit for timeout {timeout}, logind {max}, margin {margin}"
            );
            assert_eq!(
                limit.warning.is_some(),
                warned,
                "warning for timeout {timeout}, logind {max}, margin {margin}"
            );
            assert_eq!(limit.logind_max, s(max));
        }
    }

    #[test]
    fn remaining_table() {
        // (started at, now, limit) -> remaining
        let table = [
            // the signal just came: the whole limit
            ((100.0, 100.0, 10.0), 10.0),
            // restarted 4 s into a 10 s limit
            ((100.0, 104.0, 10.0), 6.0),
            // restarted exactly at the end
            ((100.0, 110.0, 10.0), 0.0),
            // restarted after the limit: nothing left, not negative
            ((100.0, 130.0, 10.0), 0.0),
            // a start in the future (untrustworthy clock): the limit, never more
            ((200.0, 100.0, 10.0), 10.0),
            // a zero limit stays zero
            ((100.0, 100.0, 0.0), 0.0),
            // sub-second precision
            ((1.25, 3.5, 4.0), 1.75),
        ];
        for ((started, now, limit), want) in table {
            assert_eq!(
                remaining(s(started), s(now), s(limit)),
                s(want),
                "remaining of {limit} s started at {started} s, now {now} s"
            );
        }
    }

    #[test]
    fn warning_names_the_drop_in_and_the_value_that_fixes_it() {
        let limit = compute(s(60.0), s(5.0), s(1.0));
        let warning = limit.warning.expect("5 s is below 61 s");
        assert_eq!(warning.needed, s(61.0));
        assert_eq!(warning.clamped_to, s(4.0));
        let text = warning.to_string();
        assert!(text.contains(LOGIND_DROP_IN), "{text}");
        assert!(text.contains("InhibitDelayMaxSec=61"), "{text}");
        assert!(text.contains("is 5 s"), "{text}");
        assert!(text.contains("cut to 4 s"), "{text}");
    }

    #[test]
    fn needed_seconds_round_up() {
        let warning = compute(s(60.5), s(5.0), s(1.0)).warning.expect("warned");
        assert!(warning.to_string().contains("InhibitDelayMaxSec=62"));
        assert_eq!(seconds(s(61.5)), "61.5 s");
    }

    #[test]
    fn the_drop_in_sorts_after_the_kubelets() {
        let ours = LOGIND_DROP_IN.rsplit('/').next().expect("a file name");
        assert!(ours > "99-kubelet.conf");
    }
}
