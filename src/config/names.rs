//! Kubernetes name syntax, checked once for every caller: DNS labels and subdomains (namespaces,
//! node names, `--node`, label-key prefixes), qualified names (label and taint keys) and label
//! values. The rules are the API server's (`k8s.io/apimachinery/pkg/util/validation`:
//! `IsDNS1123Label`, `IsDNS1123Subdomain`, `IsQualifiedName`, `IsValidLabelValue`).

/// At most 63 characters of a-z, 0-9 and '-', starting and ending alphanumeric (namespaces).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Dot-separated DNS labels, at most 253 characters (node names, label-key prefixes). Such a name
/// holds no '/', '?', '%' or '#', so it is safe as one segment of a request path.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A qualified name as label and taint keys use it: an optional DNS-subdomain `prefix/` and a
/// name of 1 to 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return false;
    }
    !name.is_empty() && is_label_value(name)
}

/// A label value: empty, or at most 63 alphanumerics, '-', '_', '.', alphanumeric at both ends.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return true;
    };
    s.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_subdomains_are_lower_case_labels_joined_by_dots() {
        for good in ["n", "node-1", "worker-1.example.com", &"a".repeat(63)] {
            assert!(is_dns_subdomain(good), "{good}");
        }
        let long = format!("{}.{}", "a".repeat(200), "b".repeat(60));
        for bad in [
            "",
            "Node_1",
            "node-1/status",
            "x?y=1",
            "a..b",
            "-a",
            "a-",
            ".a",
            "a.",
            "n%2F",
            &long,
            &"a".repeat(64),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn qualified_names_take_an_optional_subdomain_prefix() {
        for good in [
            "a",
            "A_b.c-D",
            "example.com/shutdown",
            "kube-shutdown-drain/shutdown",
        ] {
            assert!(is_qualified_name(good), "{good}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "Ex.com/a",
            "a b",
            "a/b/c",
            "-a",
            &"a".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }

    #[test]
    fn label_values_may_be_empty() {
        for good in ["", "true", "a.b_c-D", &"a".repeat(63)] {
            assert!(is_label_value(good), "{good}");
        }
        for bad in ["a b", "-a", "a.", "ü", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }
}
