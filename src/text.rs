//! Text from outside this program (state files, API answers, the Node) made fit to show. A
//! string from another program is cut to [`OUTSIDE_MAX`] where it enters ([`outside`]: an
//! update_engine status, a Lease's holder, another program's inhibitor lock), so no log line,
//! Event or condition that quotes it grows with it; a message for a Node Event gets its control
//! characters replaced and a length cap ([`clean`]);
//! a value `status` prints, every log line (its message and fields, in both sinks of
//! [`crate::logging`]) and the reboot gate's lock reason get them escaped, visible and inert
//! ([`escaped`]: the one function, so a Lease holder, an API answer's message or an annotation
//! value shows the same wherever it is logged). Control here means
//! Unicode's Cc (C0, DEL, C1: ESC starts terminal sequences) and the bidirectional formatting
//! characters (U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), which reorder what a terminal
//! shows (CVE-2021-42574).

use std::fmt::Write as _;

/// The longest Event message we post: the API server's limit on an events.k8s.io note
/// (kubernetes `pkg/apis/core/validation/events.go`, `NoteLengthLimit`, 1024 bytes), which the
/// scheduler cuts its own messages to as well.
pub const EVENT_MESSAGE_MAX: usize = 1024;

/// The longest string from another program kept where it enters ([`outside`]): a Lease
/// holder's `NODE/BOOT_ID` at its longest (a 253-byte node name, a 36-byte boot ID) fits, as
/// does the API server's own message as an error line quotes it.
pub const OUTSIDE_MAX: usize = 300;

const CUT: &str = " ...";

fn is_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character replaced by a space, cut (on a character boundary,
/// ending in " ...") to at most `max` bytes.
pub fn clean(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if is_control(c) { ' ' } else { c })
        .collect();
    cut(&clean, max)
}

/// `text` cut (on a character boundary, ending in " ...") to at most `max` bytes; its
/// characters as they are (a log line escapes them, an Event cleans them).
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let room = max.saturating_sub(CUT.len());
    let end = (0..=room)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}{CUT}", &text[..end])
}

/// A string from another program as it enters: cut to [`OUTSIDE_MAX`] bytes.
pub fn outside(text: &str) -> String {
    cut(text, OUTSIDE_MAX)
}

/// `text` with every control character written as an escape (`\n`, `\t`, `\u{1b}`), so it
/// shows as what it is and does nothing to a terminal.
pub fn escaped(text: &str) -> String {
    if !text.chars().any(is_control) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_replaces_control_characters_and_cuts_on_a_character_boundary() {
        assert_eq!(clean("a\nb\x1b[2Jc\u{202e}d", 100), "a b [2Jc d");
        assert_eq!(clean("short", 100), "short");
        let long = "é".repeat(600);
        let cut = clean(&long, EVENT_MESSAGE_MAX);
        assert!(cut.len() <= EVENT_MESSAGE_MAX, "{}", cut.len());
        assert!(cut.ends_with(" ...") && cut.starts_with("éé"));
        assert_eq!(clean(&"x".repeat(2000), 10), "xxxxxx ...");
    }

    #[test]
    fn text_from_outside_is_cut_where_it_enters_and_keeps_its_characters() {
        assert_eq!(outside("node-b/boot-1"), "node-b/boot-1");
        assert_eq!(
            outside("a\nb"),
            "a\nb",
            "escaped or cleaned where it is shown"
        );
        let long = outside(&"é".repeat(60_000));
        assert!(
            long.len() <= OUTSIDE_MAX && long.ends_with(" ..."),
            "{}",
            long.len()
        );
        let holder = format!(
            "{}/{}",
            "n".repeat(253),
            "0b0e1d00-0000-4000-8000-000000000001"
        );
        assert_eq!(outside(&holder), holder, "the longest holder we write fits");
        assert_eq!(cut("abcdef", 5), "a ...");
    }

    #[test]
    fn escaped_shows_control_characters_as_escapes() {
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(
            escaped("a\x1b]0;owned\x07\n\u{202e}b"),
            "a\\u{1b}]0;owned\\u{7}\\n\\u{202e}b"
        );
    }
}
