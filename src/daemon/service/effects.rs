//! Carrying out a transition: the phase machine names the effects, this file does each, once,
//! in one place (the lock, the boot record, the restore task, `quiet`, `STATUS=`, the metrics).

use super::Daemon;
use crate::daemon::phase::{Effect, Event, Phase, Undo};
use crate::daemon::restore::{self, Trigger};
use crate::host::boot_record;
use crate::host::lock::Released;
use crate::host::logind::{Logind, LogindError};

/// How long the start waits for this boot's record to be written before READY=1.
const BOOT_RECORD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Daemon {
    /// Applies `event`: the phase moves on and its effects are carried out, in order; an
    /// effect's answer (systemd's, to `AskSystemd`) is applied next. A refused event is logged and
    /// changes nothing.
    pub(super) async fn apply(&mut self, event: Event, logind: Option<&Logind>) {
        let mut next = Some(event);
        while let Some(event) = next.take() {
            next = self.apply_one(event, logind).await;
        }
    }

    /// One step of the table; the event an effect answered with, if any.
    async fn apply_one(&mut self, event: Event, logind: Option<&Logind>) -> Option<Event> {
        let (next, effects) = match self.state.on(event) {
            Ok(step) => step,
            Err(refused) => {
                tracing::warn!(
                    "ignored on node {}: {refused}",
                    self.access.settings.node_name
                );
                return None;
            }
        };
        let before = std::mem::replace(&mut self.state, next).phase;
        let mut answer = None;
        for effect in effects {
            if let Effect::AskSystemd { signal } = effect {
                answer = Some(self.stop_answer(signal, logind).await);
            } else {
                self.carry_out(effect, &before, logind).await;
            }
        }
        self.out.metrics.lock_held(self.inhibitor.is_held());
        let idle = self.state.phase.idle();
        self.watches
            .idle
            .send_if_modified(|was| std::mem::replace(was, idle) != idle);
        self.gate.want(self.state.phase.may_gate());
        answer
    }

    async fn carry_out(&mut self, effect: Effect, before: &Phase, logind: Option<&Logind>) {
        match effect {
            Effect::Quiet(quiet) => {
                self.watches.quiet.send_replace(quiet);
            }
            Effect::StartDrain {
                kind,
                announced_now,
            } => self.start_drain(kind, announced_now, logind).await,
            Effect::AbortDrain => {
                self.tasks.work.abort(super::work::Kind::Shutdown);
                // The lock stays for the next shutdown: its deadline is gone with this one.
                self.inhibitor.disarm();
            }
            Effect::RecordEnd => self.record_end().await,
            Effect::ReleaseLock => {
                self.release();
                // Before the outcome is said: the textfile never shows a drain's end with the
                // lock it no longer holds.
                self.out.metrics.lock_held(self.inhibitor.is_held());
            }
            Effect::TakeLock => self.take_lock(logind).await,
            Effect::ForgetShutdown { undo } => self.forget_shutdown(undo),
            Effect::RecordStopped => self.boot.log.stopped(),
            Effect::ShowWaiting => self.show_waiting(),
            Effect::ShowScheduled => self.show_scheduled(),
            Effect::StartEarly { kind } => self.start_early(kind),
            Effect::SayEarly => self.say_early(),
            Effect::StartStopStage { kind, within } => self.start_stop_stage(kind, within),
            Effect::HoldGate => self.hold_gate(logind),
            Effect::DropGate { because } => self.drop_gate(because),
            Effect::SayPassEnded => self.say_pass_ended(),
            Effect::SayStop { signal, during } => self.say_stop(signal, during),
            Effect::SayCancelled { kind, during } => self.say_cancelled(kind, during),
            Effect::SayStopStage(stage) => self.say_stop_stage(stage),
            Effect::SayOverdue(overdue) => self.say_overdue(overdue),
            // Carried out by `apply_one`, whose next event is its answer.
            Effect::AskSystemd { .. } => {}
            Effect::SayOutcome => self.say_outcome(before),
            reboot => self.carry_out_reboot(reboot),
        }
    }

    /// The effects of the reboots the node asks for.
    fn carry_out_reboot(&mut self, effect: Effect) {
        match effect {
            Effect::StartReboot => self.start_reboot(),
            Effect::AbortReboot => self.abort_reboot(),
            Effect::RebootLater { after, pause } => self.say_later(after, pause),
            Effect::SayNeed(need) => self.say_need(&need),
            Effect::PostRequired(need) => self.post_required(&need),
            Effect::NotPlanned(need) => self.not_planned(&need),
            Effect::SayHolds { holds, why } => self.say_holds(&holds, &why),
            Effect::PostWaiting(text) => self.post_waiting(text),
            Effect::RebootFacts(facts) => self.out.metrics.reboot(facts),
            Effect::LookAtHolds { drain_to_come } => self.reboot.look(true, drain_to_come),
            Effect::StopLooking => self.reboot.look(false, false),
            other => tracing::error!("not an effect of the reboots: {other:?}"),
        }
    }

    /// `SayOutcome`: how the drain of the shutdown `before` drained ended, said.
    fn say_outcome(&mut self, before: &Phase) {
        if let (Some(finished), Some(s)) = (self.tasks.work.take_over(), before.shutdown()) {
            crate::daemon::outcome::say(
                &self.access.settings,
                &self.out.status,
                &self.out.metrics,
                s.kind,
                finished,
                s.guarded,
            );
        }
    }

    /// `ForgetShutdown`: the boot record forgets the shutdown; the node is restored as `undo`
    /// says.
    fn forget_shutdown(&mut self, undo: Undo) {
        let node = self.access.settings.node_name.clone();
        self.scheduled.warm = None;
        let recorded = self.boot.log.shutdown_over();
        let restore = match undo {
            Undo::Heard => true,
            Undo::Missed => true,
            Undo::IfRecorded => recorded,
            Undo::Nothing => {
                tracing::info!(
                    "logind cancelled a shutdown that never started here; nothing to undo on \
                     node {node}"
                );
                false
            }
        };
        if undo == Undo::Missed || (undo == Undo::IfRecorded && recorded) {
            tracing::info!(
                "the recorded shutdown of node {node} ended without a reboot while the daemon was \
                 away; restoring the node"
            );
        }
        if restore {
            self.spawn_restore(Trigger::Cancel);
        }
    }

    /// How the drain ended goes into the boot record before the lock goes; the write is waited
    /// for briefly (it runs off this path: a stalled disk costs at most the allowance).
    async fn record_end(&mut self) {
        let Some(finished) = self.tasks.work.over() else {
            return;
        };
        let (end, detail) = crate::daemon::outcome::end_of(&finished.outcome);
        // A daemon started too late for this shutdown's budget keeps an earlier daemon's end.
        let ticket = if finished.outcome.is_spent() {
            self.boot.log.shutdown_ended_unless_recorded(end, detail)
        } else {
            self.boot.log.shutdown_ended(end, detail)
        };
        let by = tokio::time::Instant::now() + crate::time_limit::WRITE_ALLOWANCE;
        if !self.boot.log.written(ticket, by).await {
            tracing::warn!(
                "{} is still being written after {} ms; releasing the inhibitor for node {} first",
                self.access
                    .settings
                    .state_dir
                    .join(boot_record::FILE)
                    .display(),
                crate::time_limit::WRITE_ALLOWANCE.as_millis(),
                self.access.settings.node_name
            );
        }
    }

    /// Closes the lock (the log line comes after: logind waits for nothing of ours).
    pub(super) fn release(&self) {
        let node = &self.access.settings.node_name;
        match self.inhibitor.release() {
            Released::Now => {
                tracing::info!(node = %node, "released the logind delay inhibitor for node {node}")
            }
            Released::AtDeadline => tracing::warn!(
                node = %node,
                "the logind delay inhibitor for node {node} was released by its guard at the \
                 drain's deadline"
            ),
            Released::NoneHeld => {}
        }
    }

    /// Takes the lock unless one is held. Without a connection the next one takes it.
    async fn take_lock(&mut self, logind: Option<&Logind>) {
        let Some(logind) = logind else {
            return;
        };
        if self.inhibitor.is_held() {
            return;
        }
        match logind.take_lock(&self.access.settings.node_name).await {
            Ok(lock) => self.inhibitor.hold(lock),
            // Another shutdown began right after the cancel: its signal is queued behind this
            // one and starts a drain without the lock.
            Err(e @ LogindError::ShutdownUnderWay { .. }) => {
                tracing::warn!("{e}; a new shutdown started after the cancel");
            }
            Err(e) => tracing::warn!(
                "{e}; node {} has no inhibitor until logind grants one (the next reconnect asks \
                 again)",
                self.access.settings.node_name
            ),
        }
    }

    fn show_waiting(&self) {
        let (drain, max) = (self.watches.time_limit.borrow().as_ref())
            .map_or((None, None), |b| (Some(b.drain), Some(b.logind_max)));
        let secs = |d: Option<std::time::Duration>| {
            d.map_or_else(|| "unknown".to_owned(), crate::time_limit::seconds)
        };
        let verdict = self.reboot_status();
        self.out.status.set(format!(
            "waiting for a shutdown of node {} (drain budget {}, logind allows {}){verdict}",
            self.access.settings.node_name,
            secs(drain),
            secs(max)
        ));
    }

    /// Reads the record of the previous boot, starts this boot's, and posts the Event about an
    /// unclean end (retried in its own task until written).
    pub(super) fn open_boot_log(&mut self, under_way: bool) {
        if let Some(previous) = self.boot.log.open(&self.access.settings, under_way) {
            tokio::spawn(crate::daemon::boot_event::post_until_done(
                self.access.clone(),
                self.boot.log.clone(),
                previous,
            ));
        }
        if let Some(record) = self.boot.log.record() {
            self.out.metrics.unclean(record.unclean);
        }
    }

    /// READY=1, once: after the first connection's event is applied, so the shutdown state was
    /// read and every later shutdown reaches the daemon as a signal, and once this boot's record
    /// is on disk (waited for at most [`BOOT_RECORD_WAIT`]: the start is not the shutdown path).
    /// Then the kubelet check, beside the loop (a slow ListInhibitors must not delay a shutdown
    /// signal).
    pub(super) async fn ready_once(&mut self, logind: Option<&Logind>) {
        if self.boot.ready_sent {
            return;
        }
        self.boot.ready_sent = true;
        let by = tokio::time::Instant::now() + BOOT_RECORD_WAIT;
        if !self.boot.log.settled(by).await {
            tracing::warn!(
                "{} is not written after {} s; telling systemd the daemon for node {} is ready \
                 all the same",
                self.access
                    .settings
                    .state_dir
                    .join(boot_record::FILE)
                    .display(),
                BOOT_RECORD_WAIT.as_secs(),
                self.access.settings.node_name
            );
        }
        self.out.status.ready();
        // The credential fetched now, and again before it expires, so that no shutdown waits
        // for it: a drain takes at most its timeout, each request the request timeout more.
        let within = self.access.settings.drain.timeout + self.access.settings.request_timeout;
        tokio::spawn(self.access.clone().keep_fresh(within));
        if let Some(logind) = logind {
            let (settings, logind) = (self.access.settings.clone(), logind.clone());
            tokio::spawn(async move { check_kubelet(&settings, &logind).await });
        }
    }

    pub(super) fn spawn_restore(&mut self, trigger: Trigger) {
        self.abort_restore("a new restore starts");
        self.tasks.restore = Some(tokio::spawn(restore::restore_until_done(
            self.access.clone(),
            self.out.status.clone(),
            self.out.metrics.clone(),
            trigger,
            self.watches.quiet.subscribe(),
        )));
    }

    pub(super) fn abort_restore(&mut self, why: &str) {
        if let Some(task) = self.tasks.restore.take()
            && !task.is_finished()
        {
            task.abort();
            tracing::info!(
                "stopped the restore of node {}: {why}",
                self.access.settings.node_name
            );
            self.out.status.set_restore(None);
        }
    }
}

/// Once per start: warns (journal, one Node Event) when the kubelet holds its own delay
/// inhibitor for shutdowns (`crate::host::kubelet`).
async fn check_kubelet(settings: &std::sync::Arc<crate::config::Settings>, logind: &Logind) {
    let node = &settings.node_name;
    match crate::host::kubelet::inspect(settings, logind).await {
        Err(e) => tracing::warn!(
            "{e}; cannot tell whether the kubelet on node {node} holds a shutdown inhibitor"
        ),
        Ok(None) => {
            tracing::info!("the kubelet on node {node} holds no delay inhibitor for shutdowns")
        }
        Ok(Some(warning)) => {
            tracing::warn!("{warning}");
            tokio::spawn(crate::engine::Engine::post_event(
                settings.clone(),
                crate::events::Reason::KubeletShutdown,
                warning,
            ));
        }
    }
}
