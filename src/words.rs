//! Counted nouns in messages: `1 pod`, `2 pods`, never `1 pods`.

/// `n` and the noun in the number `n` asks for.
pub fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// [`plural`] for a count held as `usize`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    plural(u64::try_from(n).unwrap_or(u64::MAX), one, many)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "volume", "volumes"), "1 volume");
        assert_eq!(count(0, "volume", "volumes"), "0 volumes");
        assert_eq!(count(2, "pod", "pods"), "2 pods");
        assert_eq!(plural(1u32, "time", "times"), "1 time");
    }
}
