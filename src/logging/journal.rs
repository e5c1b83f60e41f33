//! The journal sink: every event as one datagram of systemd's native journal protocol
//! (<https://systemd.io/JOURNAL_NATIVE_PROTOCOL/>) sent to `/run/systemd/journal/socket`, never
//! waiting for journald. A journald that stops reading fills the socket's queue; a blocking send
//! would then stall whatever logs, the shutdown path included (a drain logs every eviction). Here
//! the send is non-blocking: an entry the queue cannot take is dropped and counted, and the
//! next entry that gets through says how many were lost.
//!
//! tracing-journald writes the same protocol but blocks in `send_to`; it offers no way to send
//! without waiting, which is the one thing this sink must do.
//!
//! Fields: `MESSAGE`, `PRIORITY` (syslog levels: error 3, warning 4, info 6, debug 7),
//! `SYSLOG_IDENTIFIER`, `TARGET`, `CODE_FILE`, `CODE_LINE`, then the fields of every span from
//! the root and of the event, named in upper case (`node` -> `NODE`); a field a span sets again
//! keeps its last value.

use std::fmt::{self, Write as _};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Where journald listens for native entries.
pub const SOCKET: &str = "/run/systemd/journal/socket";
/// The longest message sent: an entry must fit one datagram (the socket's send buffer, about
/// 208 KiB by default); no message of ours comes near this.
const MESSAGE_MAX: usize = 48 * 1024;

/// A tracing layer that sends every event to journald without ever blocking.
pub struct JournalLayer {
    socket: UnixDatagram,
    /// Sent to by name each time (not connected): a restarted journald binds a new socket.
    path: std::path::PathBuf,
    identifier: String,
    dropped: AtomicU64,
}

/// The fields of one span, kept in its extensions (the layer's copy of its `record`s).
struct SpanFields(Vec<(&'static str, String)>);

impl JournalLayer {
    /// A layer sending to [`SOCKET`]; fails when no datagram socket can be made or journald's
    /// socket is not there (the caller then logs to stderr).
    pub fn new(identifier: &str) -> io::Result<JournalLayer> {
        let path = Path::new(SOCKET);
        std::fs::symlink_metadata(path)?;
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        Ok(JournalLayer {
            socket,
            path: path.to_owned(),
            identifier: identifier.to_owned(),
            dropped: AtomicU64::new(0),
        })
    }

    fn send(&self, entry: &[u8]) {
        match self.socket.send_to(entry, &self.path) {
            Ok(_) => {
                let lost = self.dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    let note = entry_of(
                        &[
                            ("PRIORITY", "4".to_owned()),
                            ("SYSLOG_IDENTIFIER", self.identifier.clone()),
                            (
                                "MESSAGE",
                                format!(
                                    "{lost} log entries were dropped while journald did not read \
                                     its socket"
                                ),
                            ),
                        ],
                        &[],
                    );
                    let _ = self.socket.send_to(&note, &self.path);
                }
            }
            // The queue is full (journald does not read) or journald is gone: the entry is lost,
            // the caller never waits.
            Err(_) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for JournalLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Collect::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut more = Collect::default();
        values.record(&mut more);
        let mut extensions = span.extensions_mut();
        if let Some(SpanFields(fields)) = extensions.get_mut::<SpanFields>() {
            fields.extend(more.fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut own = Collect::default();
        event.record(&mut own);
        let mut message = shown(&own.message.unwrap_or_default());
        if message.len() > MESSAGE_MAX {
            let mut cut = MESSAGE_MAX;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" [cut]");
        }
        let mut fixed = vec![
            ("PRIORITY", priority(*meta.level()).to_owned()),
            ("SYSLOG_IDENTIFIER", self.identifier.clone()),
            ("MESSAGE", message),
            ("TARGET", meta.target().to_owned()),
        ];
        if let Some(file) = meta.file() {
            fixed.push(("CODE_FILE", file.to_owned()));
        }
        if let Some(line) = meta.line() {
            fixed.push(("CODE_LINE", line.to_string()));
        }
        // Span fields from the root, then the event's own: the innermost value of a field wins.
        let mut named: Vec<(&'static str, String)> = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(SpanFields(fields)) = span.extensions().get::<SpanFields>() {
                    named.extend(fields.iter().cloned());
                }
            }
        }
        named.extend(own.fields);
        let named = named.into_iter().map(|(n, v)| (n, shown(&v)));
        let mut latest: Vec<(&'static str, String)> = Vec::with_capacity(named.len());
        for (name, value) in named {
            match latest.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => latest.push((name, value)),
            }
        }
        self.send(&entry_of(&fixed, &latest));
    }
}

/// A message or field value as the journal gets it: its lines kept (the protocol carries them,
/// and journalctl indents every line after the first), every other control character escaped
/// by the one function for text from outside ([`crate::text::escaped`]), so a Lease holder, an
/// API answer's message or an annotation value shows as what it is.
fn shown(value: &str) -> String {
    if !value.contains('\n') {
        return crate::text::escaped(value);
    }
    value
        .split('\n')
        .map(crate::text::escaped)
        .collect::<Vec<_>>()
        .join("\n")
}

/// syslog(3) levels, as journald reads `PRIORITY`.
fn priority(level: Level) -> &'static str {
    match level {
        Level::ERROR => "3",
        Level::WARN => "4",
        Level::INFO => "6",
        Level::DEBUG | Level::TRACE => "7",
    }
}

/// One entry in the native protocol: fixed fields (names already valid) and tracing's fields
/// (named in upper case, other characters than letters, digits and `_` dropped).
fn entry_of(fixed: &[(&str, String)], named: &[(&str, String)]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(512);
    for (name, value) in fixed {
        put(&mut entry, name, value);
    }
    for (name, value) in named {
        let name = journal_name(name);
        // Names the journal reserves (a leading `_`) or that end up empty are not ours to send.
        if !name.is_empty() && !name.starts_with('_') {
            put(&mut entry, &name, value);
        }
    }
    entry
}

/// A tracing field name as a journal field name: `shutdown_kind` -> `SHUTDOWN_KIND`.
fn journal_name(name: &str) -> String {
    name.chars()
        .map(|c| if c == '.' { '_' } else { c })
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

/// `NAME=value\n`, or for a value with a newline `NAME\n`, its length as 64-bit little endian,
/// the value, `\n` (the protocol's two forms).
fn put(entry: &mut Vec<u8>, name: &str, value: &str) {
    entry.extend_from_slice(name.as_bytes());
    if value.contains('\n') {
        entry.push(b'\n');
        entry.extend_from_slice(&(value.len() as u64).to_le_bytes());
        entry.extend_from_slice(value.as_bytes());
    } else {
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
    }
    entry.push(b'\n');
}

/// A visitor that keeps the message and every other field as text.
#[derive(Default)]
struct Collect {
    message: Option<String>,
    fields: Vec<(&'static str, String)>,
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_owned());
        } else {
            self.fields.push((field.name(), value.to_owned()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        self.record_str(field, &text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_take_both_forms_of_the_protocol() {
        let entry = entry_of(
            &[("MESSAGE", "one\ntwo".to_owned())],
            &[
                ("shutdown_kind", "reboot".to_owned()),
                ("_pid", "1".to_owned()),
            ],
        );
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(b"one\ntwo\nSHUTDOWN_KIND=reboot\n");
        assert_eq!(entry, want, "a field named _PID is the journal's own");
    }

    /// Issue 29: a Lease holder of NUL, ESC `[31m` and U+202E went raw into the journal.
    #[test]
    fn text_from_the_cluster_is_escaped_in_the_entry_lines_kept() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket");
        let journald = UnixDatagram::bind(&path).unwrap();
        let socket = UnixDatagram::unbound().unwrap();
        socket.set_nonblocking(true).unwrap();
        let layer = JournalLayer {
            socket,
            path,
            identifier: "test".to_owned(),
            dropped: AtomicU64::new(0),
        };
        let subscriber = tracing_subscriber::registry().with(layer);
        let holder = "evil\0/\x1b[31mred\u{202e}txt";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("slot", node = "node-a\x1b[2J");
            let _s = span.enter();
            tracing::warn!(budget = "b\u{202e}", "held by {holder}");
        });
        let mut buf = vec![0u8; 64 * 1024];
        let n = journald.recv(&mut buf).unwrap();
        let entry = String::from_utf8(buf[..n].to_vec()).unwrap();
        for want in [
            "MESSAGE=held by evil\\u{0}/\\u{1b}[31mred\\u{202e}txt\n",
            "NODE=node-a\\u{1b}[2J\n",
            "BUDGET=b\\u{202e}\n",
        ] {
            assert!(entry.contains(want), "{want:?} in {entry:?}");
        }
        assert!(!entry.contains(['\0', '\x1b', '\u{202e}']), "{entry:?}");
        // A message of several lines keeps them (the protocol's other form carries them).
        assert_eq!(shown("one\x1b[2J\ntwo"), "one\\u{1b}[2J\ntwo");
    }

    #[test]
    fn a_journald_that_does_not_read_costs_a_dropped_entry_never_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket");
        // Bound and never read: the queue fills after a few datagrams.
        let _journald = UnixDatagram::bind(&path).unwrap();
        let socket = UnixDatagram::unbound().unwrap();
        socket.set_nonblocking(true).unwrap();
        let layer = JournalLayer {
            socket,
            path,
            identifier: "test".to_owned(),
            dropped: AtomicU64::new(0),
        };
        let started = std::time::Instant::now();
        let entry = vec![b'x'; 4096];
        for _ in 0..10_000 {
            layer.send(&entry);
        }
        assert!(
            layer.dropped.load(Ordering::Relaxed) > 0,
            "the queue never filled: nothing was dropped"
        );
        // Not a timing assertion on the machine's speed: a blocking send would never return.
        println!("10,000 sends in {:?}", started.elapsed());
    }
}
