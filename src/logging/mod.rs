//! Logging: to the journal with structured fields when stderr is the journal (systemd sets
//! `JOURNAL_STREAM` to the device and inode of that stream), else one line per event on stderr.
//! The level comes from `KUBE_SHUTDOWN_DRAIN_LOG` (tracing's `Targets`), default `info`; one that is
//! not a filter is a warning naming the variable, and the default applies ([`filter`]). kube's
//! own crates log only when the filter names them: every failed request is said once, by us,
//! where kube's client logs an ERROR per attempt and its watcher a Debug dump of the error.
//! Neither sink ever makes the caller wait: the journal's sends are non-blocking ([`journal`]),
//! stderr is written by a worker thread from a bounded queue that drops lines when full; a
//! journald or a terminal that stops reading costs lost lines, never a stalled drain.
//!
//! A stderr line is `TIME LEVEL MESSAGE [FIELD=VALUE ...]`: the wall-clock time in UTC (to the
//! microsecond), the
//! message (which names its object), then only the event's own fields whose value the message
//! does not already say. Span fields (node, pod, boot ID, shutdown kind) are not repeated on
//! stderr: they exist for the journal, where every event carries them as `NODE=`, `POD=`,
//! `BUDGET=`, `OUTCOME=`, `SHUTDOWN_KIND=`, `BOOT_ID=` (tracing-journald upper-cases field names;
//! the field prefix is off). Colour (the level only) only when stderr is a terminal and
//! `NO_COLOR` is unset or empty (<https://no-color.org>).

use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::os::fd::AsFd;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub mod journal;

/// The environment variable holding the log filter.
pub const LOG_ENV: &str = "KUBE_SHUTDOWN_DRAIN_LOG";

/// Whether `JOURNAL_STREAM` (`DEV:INODE`) names the file our stderr is.
pub fn stderr_is_journal() -> bool {
    std::env::var("JOURNAL_STREAM").is_ok_and(|v| stream_names(&v, std::io::stderr().as_fd()))
}

/// Whether a `JOURNAL_STREAM` value (`DEV:INODE`) names the file behind `fd`.
pub fn stream_names(value: &str, fd: impl AsFd) -> bool {
    let Some((dev, ino)) = value.split_once(':') else {
        return false;
    };
    // Compared as decimal text: the width of st_dev and st_ino differs between platforms.
    match nix::sys::stat::fstat(fd) {
        Ok(st) => st.st_dev.to_string() == dev && st.st_ino.to_string() == ino,
        Err(_) => false,
    }
}

/// Installs the global subscriber. Call once, from `main`, and keep the returned guard until
/// the process ends: dropping it writes out the stderr lines still queued.
pub fn init() -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let (filter, problem) = match std::env::var(LOG_ENV) {
        Ok(value) => filter(&value),
        Err(std::env::VarError::NotPresent) => filter(""),
        Err(std::env::VarError::NotUnicode(_)) => (filter("").0, Some("it is not UTF-8".into())),
    };
    if stderr_is_journal() {
        match journal::JournalLayer::new("kube-shutdown-drain") {
            Ok(layer) => {
                tracing_subscriber::registry()
                    .with(filter)
                    .with(layer)
                    .init();
                warn_filter(problem.as_deref());
                return None;
            }
            Err(e) => eprintln!("cannot log to the journal ({e}); logging to stderr"),
        }
    }
    let colour = std::io::stderr().is_terminal() && !no_color(std::env::var_os("NO_COLOR"));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(STDERR_QUEUE_LINES)
        .lossy(true)
        .thread_name("log-writer")
        .finish(std::io::stderr());
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .event_format(Line { colour }),
        )
        .init();
    warn_filter(problem.as_deref());
    Some(guard)
}

/// Lines the stderr queue holds before it drops them. tracing-appender's default, 128,000, is
/// a bounded crossbeam channel whose slots are all written when it is made: 4 MiB resident for
/// the life of the process. 4,096 lines (128 KiB) are a burst of a large drain; a stderr that
/// falls further behind has stopped reading, and then lines are lost either way.
const STDERR_QUEUE_LINES: usize = 4096;

/// The targets that are off unless a directive names them. kube's crates: their lines repeat,
/// per attempt and as Debug dumps, what our one line per failure says. rustls-platform-verifier:
/// an ERROR per refused certificate with its source path, where our one line says `TLS handshake
/// failed: invalid peer certificate: ...`.
const QUIET: [&str; 3] = ["kube_client", "kube_runtime", "rustls_platform_verifier"];

/// The levels a directive may name.
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// The filter for a `KUBE_SHUTDOWN_DRAIN_LOG` value, and why the value was not used, if it was
/// not (then the filter is the default, `info`). Each comma-separated directive is a level or
/// `TARGET=LEVEL` (tracing-subscriber's `Targets`: no span or field filters, and so none of
/// `EnvFilter`'s regex engine in the binary). Stricter than `Targets`, which reads a lone word as
/// a target at level trace (so `degub` would silence every line). The [`QUIET`] targets stay off
/// unless a directive names them.
pub fn filter(value: &str) -> (Targets, Option<String>) {
    // Trimmed: `Targets` does not trim, and ` kube_shutdown_drain=debug` would name a target
    // that is no one's.
    let directives: Vec<&str> = value.split(',').map(str::trim).collect();
    if directives.iter().all(|d| d.is_empty()) {
        return (default_filter(), None);
    }
    let lone = directives
        .iter()
        .find(|d| !d.contains('=') && !LEVELS.contains(&d.to_ascii_lowercase().as_str()));
    if let Some(d) = lone {
        let why = format!(
            "`{d}` is neither a level ({}) nor TARGET=LEVEL",
            LEVELS.join(", ")
        );
        return (default_filter(), Some(why));
    }
    if let Some(d) = directives.iter().find(|d| d.contains(['[', '{'])) {
        let why = format!("`{d}` filters by span or field, which this filter does not");
        return (default_filter(), Some(why));
    }
    match with_quiet(&directives).parse::<Targets>() {
        Ok(f) => (f, None),
        Err(e) => (default_filter(), Some(e.to_string())),
    }
}

/// `directives` joined, then `TARGET=off` for each [`QUIET`] target none of them names: a
/// directive names it when it would apply to it (its target is a prefix of it, as `Targets`
/// matches: `kube=debug` names `kube_client`) or to a part of it (`kube_client::client=debug`).
fn with_quiet(directives: &[&str]) -> String {
    let targets: Vec<&str> = directives
        .iter()
        .filter_map(|d| d.split_once('=').map(|(target, _)| target))
        .collect();
    let mut filter = directives.join(",");
    for quiet in QUIET {
        if !targets
            .iter()
            .any(|t| quiet.starts_with(t) || t.starts_with(quiet))
        {
            filter.push_str(&format!(",{quiet}=off"));
        }
    }
    filter
}

/// `info`, the [`QUIET`] targets off.
fn default_filter() -> Targets {
    with_quiet(&["info"])
        .parse()
        .expect("the default filter is a valid filter (unit-tested)")
}

/// Says, once logging is up, that `KUBE_SHUTDOWN_DRAIN_LOG` was not used, and why.
fn warn_filter(problem: Option<&str>) {
    if let Some(why) = problem {
        let value = std::env::var_os(LOG_ENV).unwrap_or_default();
        tracing::warn!(
            "environment variable {LOG_ENV}={:?} is not a log filter ({why}); logging at the \
             default, info",
            value.to_string_lossy()
        );
    }
}

/// Whether a `NO_COLOR` value asks for no colour: present and not empty.
pub fn no_color(value: Option<std::ffi::OsString>) -> bool {
    value.is_some_and(|v| !v.is_empty())
}

/// The stderr line format (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct Line {
    /// Colour the level with ANSI escapes.
    pub colour: bool,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *event.metadata().level();
        let (on, off) = match (self.colour, level) {
            (false, _) => ("", ""),
            (true, Level::ERROR) => ("\x1b[31m", "\x1b[0m"),
            (true, Level::WARN) => ("\x1b[33m", "\x1b[0m"),
            (true, Level::INFO) => ("\x1b[32m", "\x1b[0m"),
            (true, _) => ("\x1b[2m", "\x1b[0m"),
        };
        let mut line = format!(
            "{:.6} {on}{level:>5}{off} {}",
            jiff::Timestamp::now(),
            shown(&fields.message)
        );
        for (name, value) in &fields.others {
            if !fields.message.contains(value.as_str()) {
                let _ = write!(line, " {name}={}", shown(value));
            }
        }
        writeln!(w, "{line}")
    }
}

/// A message or field value as a stderr line shows it: one line per event, whatever it holds
/// (line breaks become spaces), and every other control character escaped by the one function
/// for text from outside ([`crate::text::escaped`]): a Lease holder, an API answer's message or
/// an annotation value cannot drive the terminal or the log reader.
fn shown(value: &str) -> String {
    crate::text::escaped(&value.replace(['\n', '\r'], " "))
}

/// An event's message and other fields, as text.
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.others.push((field.name(), value.to_owned()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `format_args!` messages and `%`-fields arrive here; their Debug is their Display.
        self.record_str(field, &format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::{Arc, Mutex};

    /// Collects what the formatter writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn formatted(colour: bool, emit: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .event_format(Line { colour })
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    /// Spans as the daemon nests them, with the fields the journal wants; one event inside.
    fn a_drain_event() {
        let deadline = std::time::Instant::now();
        let outer = tracing::info_span!("shutdown", shutdown_kind = "reboot");
        let _o = outer.enter();
        let span = tracing::info_span!("prepare", node = "node-a", boot_id = "b-1", ?deadline);
        let _s = span.enter();
        tracing::info!(
            pod = "work/web",
            budget = "work/web-pdb",
            "eviction of pod work/web refused (429): \nCannot evict"
        );
    }

    #[test]
    fn a_line_has_wall_clock_time_no_span_prefix_no_repeats_and_no_colour_when_asked() {
        let text = formatted(false, a_drain_event);
        assert_eq!(text.lines().count(), 1, "{text:?}");
        let line = text.lines().next().unwrap();
        // 2026-11-30T07:08:01.673734Z: microseconds, as the demo measures the release from them
        let time = line.split(' ').next().unwrap();
        assert!(
            time.parse::<jiff::Timestamp>().is_ok() && time.ends_with('Z') && time.len() == 27,
            "{line}"
        );
        assert!(
            line.ends_with(
                " INFO eviction of pod work/web refused (429):  Cannot evict budget=work/web-pdb"
            ),
            "{line}"
        );
        for never in [
            "\x1b",
            "Instant",
            "node-a",
            "b-1",
            "prepare{",
            "shutdown{",
            "pod=",
        ] {
            assert!(!line.contains(never), "{never:?} in {line}");
        }
        let coloured = formatted(true, a_drain_event);
        assert!(coloured.contains("\x1b[32m INFO\x1b[0m"), "{coloured:?}");
    }

    /// Issue 29: a Lease holder of NUL, ESC `[31m` and U+202E went raw into the log line.
    #[test]
    fn text_from_the_cluster_is_escaped_in_the_line_and_its_fields() {
        let holder = "evil\0/\x1b[31mred\u{202e}txt";
        let text = formatted(false, || {
            tracing::info!(
                status = "denied\x1b]0;title\x07",
                "no drain slot for node node-a within 5.0 s: held by {holder}"
            )
        });
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(
            text.contains("held by evil\\u{0}/\\u{1b}[31mred\\u{202e}txt")
                && text.contains(" status=denied\\u{1b}]0;title\\u{7}"),
            "{text:?}"
        );
        assert!(
            !text.contains(['\0', '\x1b', '\x07', '\u{202e}']),
            "{text:?}"
        );
        // Colour is ours: the level's escapes stay.
        let coloured = formatted(true, || tracing::info!("held by {holder}"));
        assert!(
            coloured.contains("\x1b[32m INFO\x1b[0m held by evil\\u{0}/\\u{1b}[31m"),
            "{coloured:?}"
        );
    }

    /// Whether `filter` lets an event of `target` at `level` through.
    fn lets_through(filter: Targets, target: &'static str, level: Level) -> bool {
        use tracing_subscriber::layer::SubscriberExt as _;
        let seen = Arc::new(Mutex::new(false));
        struct Flag(Arc<Mutex<bool>>);
        impl<S: Subscriber> tracing_subscriber::Layer<S> for Flag {
            fn on_event(&self, _: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
                *self.0.lock().unwrap() = true;
            }
        }
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(Flag(seen.clone()));
        tracing::subscriber::with_default(subscriber, || match (target, level) {
            ("kube_client", Level::ERROR) => tracing::error!(target: "kube_client", "x"),
            ("kube_runtime::watcher", Level::WARN) => {
                tracing::warn!(target: "kube_runtime::watcher", "x")
            }
            ("kube_shutdown_drain", Level::INFO) => {
                tracing::info!(target: "kube_shutdown_drain", "x")
            }
            ("kube_shutdown_drain", Level::DEBUG) => {
                tracing::debug!(target: "kube_shutdown_drain", "x")
            }
            _ => unreachable!("not a case of this test"),
        });
        *seen.lock().unwrap()
    }

    #[test]
    fn the_log_filter_refuses_what_is_not_one_and_keeps_kube_quiet_unless_named() {
        let ours = "kube_shutdown_drain";
        assert!(
            lets_through(
                filter("warn, kube_shutdown_drain=debug").0,
                ours,
                Level::DEBUG
            ),
            "a space after the comma"
        );
        for good in ["", "debug", "warn,kube_shutdown_drain=debug", "INFO"] {
            assert_eq!(filter(good).1, None, "{good:?}");
        }
        let (f, why) = filter("degub");
        assert_eq!(
            why.as_deref(),
            Some(
                "`degub` is neither a level (off, error, warn, info, debug, trace) nor TARGET=LEVEL"
            )
        );
        assert!(lets_through(f, ours, Level::INFO), "the default applies");
        let (_, why) = filter("info,x=loud");
        assert!(why.is_some(), "a bad level after `=`");
        // Span and field filters are not kept silently.
        for dynamic in ["kube_shutdown_drain[drain]=debug", "info,[{pod=x}]=trace"] {
            assert!(filter(dynamic).1.is_some(), "{dynamic:?}");
        }
        // Unset or a level: kube's own lines (an ERROR per failed attempt, Debug dumps) are off.
        assert!(!lets_through(filter("").0, "kube_client", Level::ERROR));
        assert!(!lets_through(
            filter("debug").0,
            "kube_runtime::watcher",
            Level::WARN
        ));
        assert!(lets_through(filter("debug").0, ours, Level::DEBUG));
        assert!(!lets_through(
            filter("kube_shutdown_drain=debug").0,
            "kube_client",
            Level::ERROR
        ));
        // Named, they are the caller's.
        assert!(lets_through(
            filter("info,kube_client=error").0,
            "kube_client",
            Level::ERROR
        ));
        // Named by a prefix, as `Targets` matches: `kube` is kube_client's too.
        assert!(lets_through(
            filter("info,kube=error").0,
            "kube_client",
            Level::ERROR
        ));
    }

    #[test]
    fn no_color_counts_only_when_set_and_not_empty() {
        assert!(no_color(Some("1".into())));
        assert!(!no_color(Some("".into())));
        assert!(!no_color(None));
    }

    #[test]
    fn journal_stream_must_name_the_very_file() {
        let file = tempfile::tempfile().unwrap();
        let st = nix::sys::stat::fstat(file.as_fd()).unwrap();
        assert!(stream_names(
            &format!("{}:{}", st.st_dev, st.st_ino),
            file.as_fd()
        ));
        assert!(!stream_names(
            &format!("{}:{}", st.st_dev, st.st_ino.wrapping_add(1)),
            file.as_fd()
        ));
        assert!(!stream_names("garbage", file.as_fd()));
        assert!(!stream_names("", file.as_fd()));
    }
}
