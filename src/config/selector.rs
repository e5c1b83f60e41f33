//! Kubernetes label selectors in their string form (`app=web,tier in (a,b),!canary`), parsed once
//! from the configuration, or taken from an API object's `LabelSelector` (a budget's
//! `spec.selector`), and matched against pod labels without any API call.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::config::names::{is_label_value, is_qualified_name};

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; all requirements must hold (logical AND), like the API server's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    text: String,
}

/// Why a selector string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {text:?}: {reason}")]
pub struct SelectorError {
    text: String,
    reason: Problem,
}

/// What is wrong in a selector: each names the part at fault where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("nested parentheses")]
    NestedParentheses,
    #[error("unbalanced ')'")]
    Unbalanced,
    #[error("missing ')'")]
    Unclosed,
    #[error("empty requirement")]
    EmptyRequirement,
    #[error("{0:?} is not a label key")]
    NotAKey(String),
    #[error("{0:?} is not a label value")]
    NotAValue(String),
    #[error("expected a value set like (a,b), found {0:?}")]
    NotAValueSet(String),
    #[error("empty value set")]
    EmptyValueSet,
    #[error("unknown operator in {0:?}; use =, ==, !=, in, notin, ! or a bare key")]
    UnknownOperatorIn(String),
    /// An API object's `In` or `NotIn` without values.
    #[error("operator {0} needs at least one value")]
    NeedsValues(String),
    /// An API object's `Exists` or `DoesNotExist` with values.
    #[error("operator {0} takes no values")]
    TakesNoValues(String),
    /// An API object's operator we do not know.
    #[error("unknown operator {0:?}")]
    UnknownOperator(String),
}

impl Selector {
    /// The selector that matches every pod.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Parses the string form used by `kubectl -l`.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let fail = |reason: Problem| SelectorError {
            text: text.to_string(),
            reason,
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(fail)? {
            let part = part.trim();
            if part.is_empty() {
                return Err(fail(Problem::EmptyRequirement));
            }
            requirements.push(parse_requirement(part).map_err(fail)?);
        }
        Ok(Selector {
            requirements,
            text: text.trim().to_string(),
        })
    }

    /// The selector of an API object's `LabelSelector`, with apimachinery's
    /// `LabelSelectorAsSelector` rules (k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go): no
    /// `matchLabels` and no `matchExpressions` select everything; operators `In` and `NotIn`
    /// need at least one value, `Exists` and `DoesNotExist` none; any other operator, or a key
    /// or value that is not a label's, is an error. (A missing selector, which selects nothing
    /// in policy/v1, is the caller's `None`.)
    pub fn from_label_selector(sel: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut parts: Vec<String> = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            parts.push(format!("{k}={v}"));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.as_deref().unwrap_or_default();
            let set = || format!("({})", values.join(","));
            let part = match (e.operator.as_str(), values.is_empty()) {
                ("In", false) => format!("{} in {}", e.key, set()),
                ("NotIn", false) => format!("{} notin {}", e.key, set()),
                ("Exists", true) => e.key.clone(),
                ("DoesNotExist", true) => format!("!{}", e.key),
                (op @ ("In" | "NotIn"), true) => {
                    return Err(SelectorError {
                        text: e.key.clone(),
                        reason: Problem::NeedsValues(op.to_string()),
                    });
                }
                (op @ ("Exists" | "DoesNotExist"), false) => {
                    return Err(SelectorError {
                        text: e.key.clone(),
                        reason: Problem::TakesNoValues(op.to_string()),
                    });
                }
                (op, _) => {
                    return Err(SelectorError {
                        text: e.key.clone(),
                        reason: Problem::UnknownOperator(op.to_string()),
                    });
                }
            };
            parts.push(part);
        }
        Selector::parse(&parts.join(","))
    }

    /// Whether a pod with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits on commas that are not inside a `( … )` value set.
fn split_top_level(text: &str) -> Result<Vec<&str>, Problem> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err(Problem::NestedParentheses),
            ')' if depth == 1 => depth = 0,
            ')' => return Err(Problem::Unbalanced),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(Problem::Unclosed);
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn key(k: &str) -> Result<String, Problem> {
    let k = k.trim();
    if is_qualified_name(k) {
        Ok(k.to_string())
    } else {
        Err(Problem::NotAKey(k.to_string()))
    }
}

fn value(v: &str) -> Result<String, Problem> {
    let v = v.trim();
    if is_label_value(v) {
        Ok(v.to_string())
    } else {
        Err(Problem::NotAValue(v.to_string()))
    }
}

fn value_set(rest: &str) -> Result<Vec<String>, Problem> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| Problem::NotAValueSet(rest.to_string()))?;
    if inner.trim().is_empty() {
        return Err(Problem::EmptyValueSet);
    }
    inner.split(',').map(value).collect()
}

fn parse_requirement(part: &str) -> Result<Requirement, Problem> {
    if let Some(k) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key(k)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, value(v)?));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok(Requirement::Equals(key(k)?, value(v)?));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok(Requirement::Equals(key(k)?, value(v)?));
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let k = words.next().unwrap_or_default();
    match words.next().map(str::trim_start) {
        None => Ok(Requirement::Exists(key(k)?)),
        Some(rest) => {
            if let Some(set) = rest.strip_prefix("notin") {
                Ok(Requirement::NotIn(key(k)?, value_set(set)?))
            } else if let Some(set) = rest.strip_prefix("in") {
                Ok(Requirement::In(key(k)?, value_set(set)?))
            } else {
                Err(Problem::UnknownOperatorIn(part.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matching_table() {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let db = labels(&[("app", "db"), ("canary", "")]);
        let none = labels(&[]);
        let cases: &[(&str, bool, bool, bool)] = &[
            ("", true, true, true),
            ("app=web", true, false, false),
            ("app==web", true, false, false),
            ("app!=web", false, true, true),
            ("app in (web, db)", true, true, false),
            ("app notin (web)", false, true, true),
            ("canary", false, true, false),
            ("!canary", true, false, true),
            ("app=web,tier=front", true, false, false),
            ("app in (web,db),!canary", true, false, false),
            ("example.com/role=x", false, false, false),
        ];
        for (sel, w, d, n) in cases {
            let s = Selector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(
                (s.matches(&web), s.matches(&db), s.matches(&none)),
                (*w, *d, *n),
                "{sel}"
            );
        }
    }

    /// A budget's `LabelSelector` matches as the API server's: empty selects everything,
    /// expressions with their operators, and malformed ones are errors.
    #[test]
    fn label_selectors_of_api_objects() {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let db = labels(&[("app", "db"), ("canary", "")]);
        let none = labels(&[]);
        let sel = |v: serde_json::Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        let cases = [
            (serde_json::json!({}), (true, true, true)),
            (
                serde_json::json!({"matchLabels": {"app": "web"}}),
                (true, false, false),
            ),
            (
                serde_json::json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["front", "back"]}]}),
                (true, false, false),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
                (false, true, true),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "canary", "operator": "Exists"}]}),
                (false, true, false),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}),
                (true, false, true),
            ),
        ];
        for (v, want) in cases {
            let s = Selector::from_label_selector(&sel(v.clone()))
                .unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(
                (s.matches(&web), s.matches(&db), s.matches(&none)),
                want,
                "{v}"
            );
        }
        for (bad, why) in [
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
                "operator In needs at least one value",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "operator Exists takes no values",
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                "unknown operator \"Gt\"",
            ),
            (
                serde_json::json!({"matchLabels": {"a": "not a value"}}),
                "is not a label value",
            ),
        ] {
            let e = Selector::from_label_selector(&sel(bad.clone()))
                .expect_err("rejected")
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn rejects_bad_selectors() {
        for bad in [
            "app in (a",
            "app=(x",
            "a b c",
            "=x",
            "app=web,",
            "app in ()",
            "Bad Key=1",
            "a in ((b))",
            "a=b)",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad} should be rejected");
        }
    }
}
