//! Text from outside this program (state files, API answers, the Node) made fit to show: a
//! message for a Node Event gets its control characters replaced and a length cap ([`clean`]);
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
    if clean.len() <= max {
        return clean;
    }
    let room = max.saturating_sub(CUT.len());
    let end = (0..=room)
        .rev()
        .find(|&i| clean.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}{CUT}", &clean[..end])
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
    fn escaped_shows_control_characters_as_escapes() {
        assert_eq!(escaped("plain"), "plain");
        assert_eq!(
            escaped("a\x1b]0;owned\x07\n\u{202e}b"),
            "a\\u{1b}]0;owned\\u{7}\\n\\u{202e}b"
        );
    }
}
