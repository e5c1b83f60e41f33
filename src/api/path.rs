//! Names in request paths. A name that comes from an API answer (a pod, its namespace, a
//! budget, a claim) goes into a path only through [`segment`]: one the API server could never
//! have stored is refused, anything else is percent-encoded, so an answer cannot steer a request
//! to another path (`../../..`) or add a query (`x?dryRun=All`).
//!
//! The API server refuses to store names that are `.` or `..` or contain `/` or `%` in every
//! resource (apimachinery `pkg/api/validation/path`: `IsValidPathSegmentName`), and the kinds
//! the drain touches are stricter still (DNS subdomains, kubernetes.io/docs/concepts/overview/
//! working-with-objects/names/).

use std::borrow::Cow;
use std::fmt::Write as _;

/// The longest name any kind allows (a DNS subdomain, 253), with room for the kinds that allow
/// more; a longer one is not a name.
const NAME_MAX: usize = 1024;

/// A name from an API answer that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} cannot be the name of an object on an API server ({why})")]
pub struct BadName {
    /// The name, cut to 100 characters.
    pub name: String,
    pub why: &'static str,
}

/// `name` as one path segment: refused when the API server could not hold it, else
/// percent-encoded (RFC 3986: every byte outside the unreserved characters; real names never
/// need it, so they come back borrowed).
pub fn segment(name: &str) -> Result<Cow<'_, str>, BadName> {
    let why = if name.is_empty() {
        Some("empty")
    } else if name == "." || name == ".." {
        Some("a relative path")
    } else if name.contains('/') {
        Some("contains '/'")
    } else if name.contains('%') {
        Some("contains '%'")
    } else if name.len() > NAME_MAX {
        Some("too long")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(BadName {
            name: name.chars().take(100).collect(),
            why,
        });
    }
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    if name.bytes().all(plain) {
        return Ok(Cow::Borrowed(name));
    }
    let mut out = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_names_pass_unchanged_and_others_are_refused_or_encoded() {
        assert_eq!(segment("web-1.x_y~z").unwrap(), "web-1.x_y~z");
        assert!(matches!(segment("web-1").unwrap(), Cow::Borrowed(_)));
        for bad in ["", ".", "..", "../../..", "a/b", "a%2Fb"] {
            assert!(segment(bad).is_err(), "{bad:?}");
        }
        assert!(segment(&"a".repeat(NAME_MAX + 1)).is_err());
        assert_eq!(segment("a?dryRun=All").unwrap(), "a%3FdryRun%3DAll");
        assert_eq!(segment("a#b c").unwrap(), "a%23b%20c");
        assert_eq!(segment("é").unwrap(), "%C3%A9");
        let e = segment("../x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"../x\" cannot be the name of an object on an API server (contains '/')"
        );
    }
}
