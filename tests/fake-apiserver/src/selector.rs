//! Label selectors (string form and the `matchLabels`/`matchExpressions` object) and field selectors.
//!
//! The grammar follows the apimachinery `labels.Parse` and `fields.ParseSelector` documentation:
//! `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1` for labels;
//! `f=v`, `f==v`, `f!=v` for fields. A `notin`/`!=` term also matches objects without the key.

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectorError {
    #[error("unable to parse requirement {term:?} in label selector {selector:?}: {reason}")]
    Label {
        selector: String,
        term: String,
        reason: String,
    },
    #[error("invalid field selector {selector:?}: {reason}")]
    Field { selector: String, reason: String },
    #[error("field label not supported: {field}")]
    UnsupportedField { field: String },
    #[error("invalid label selector object {selector}: {reason}")]
    Object { selector: String, reason: String },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// Splits on commas that are not inside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

fn parse_set(selector: &str, term: &str, rest: &str) -> Result<Vec<String>, SelectorError> {
    let err = |reason: &str| SelectorError::Label {
        selector: selector.to_string(),
        term: term.to_string(),
        reason: reason.to_string(),
    };
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| err("expected a parenthesised set of values"))?;
    let values: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Err(err("a set needs at least one value"));
    }
    Ok(values)
}

impl LabelSelector {
    /// Parses the string form used in `?labelSelector=`.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for raw in split_terms(selector) {
            let term = raw.trim();
            let err = |reason: &str| SelectorError::Label {
                selector: selector.to_string(),
                term: term.to_string(),
                reason: reason.to_string(),
            };
            if term.is_empty() {
                return Err(err("empty requirement"));
            }
            if let Some(key) = term.strip_prefix('!') {
                let key = key.trim();
                if key.is_empty() || !key.chars().all(is_key_char) {
                    return Err(err("invalid key after '!'"));
                }
                requirements.push(Requirement::NotExists(key.to_string()));
                continue;
            }
            let key_end = term.find(|c: char| !is_key_char(c)).unwrap_or(term.len());
            let key = term[..key_end].to_string();
            if key.is_empty() {
                return Err(err("missing key"));
            }
            let rest = term[key_end..].trim_start();
            let req = if rest.is_empty() {
                Requirement::Exists(key)
            } else if let Some(v) = rest.strip_prefix("!=") {
                Requirement::NotEquals(key, v.trim().to_string())
            } else if let Some(v) = rest.strip_prefix("==") {
                Requirement::Equals(key, v.trim().to_string())
            } else if let Some(v) = rest.strip_prefix('=') {
                Requirement::Equals(key, v.trim().to_string())
            } else if let Some(v) = rest.strip_prefix('>') {
                let n = v.trim().parse().map_err(|_| err("'>' needs an integer"))?;
                Requirement::GreaterThan(key, n)
            } else if let Some(v) = rest.strip_prefix('<') {
                let n = v.trim().parse().map_err(|_| err("'<' needs an integer"))?;
                Requirement::LessThan(key, n)
            } else if let Some(v) = rest.strip_prefix("notin") {
                Requirement::NotIn(key, parse_set(selector, term, v)?)
            } else if let Some(v) = rest.strip_prefix("in") {
                Requirement::In(key, parse_set(selector, term, v)?)
            } else {
                return Err(err("unknown operator"));
            };
            if let Requirement::Equals(_, v) | Requirement::NotEquals(_, v) = &req
                && v.contains(|c: char| c.is_whitespace() || c == '(' || c == ')')
            {
                return Err(err("invalid value"));
            }
            requirements.push(req);
        }
        Ok(Self { requirements })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels` and
    /// `matchExpressions` with In, NotIn, Exists, DoesNotExist).
    pub fn from_object(selector: &Value) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError::Object {
            selector: selector.to_string(),
            reason,
        };
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels") {
            let labels = labels
                .as_object()
                .ok_or_else(|| err("matchLabels is not an object".into()))?;
            for (k, v) in labels {
                let v = v
                    .as_str()
                    .ok_or_else(|| err(format!("matchLabels.{k} is not a string")))?;
                requirements.push(Requirement::Equals(k.clone(), v.to_string()));
            }
        }
        if let Some(exprs) = selector.get("matchExpressions") {
            let exprs = exprs
                .as_array()
                .ok_or_else(|| err("matchExpressions is not a list".into()))?;
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err("matchExpressions entry without key".into()))?
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                requirements.push(match op {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::NotExists(key),
                    other => return Err(err(format!("unknown operator {other:?} for key {key}"))),
                });
            }
        }
        Ok(Self { requirements })
    }

    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::GreaterThan(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Requirement::LessThan(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, object: &Value) -> bool {
        // `get`, not `pointer`: a watch of 5,000 nodes' Leases runs this for every watcher at
        // every change, and `pointer` builds a string for each step of its path.
        self.matches(
            object
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(Value::as_object),
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FieldTerm {
    pub field: String,
    pub equal: bool,
    pub value: String,
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses `?fieldSelector=`; `accepts` says which field names the resource supports.
    pub fn parse(selector: &str, accepts: impl Fn(&str) -> bool) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self { terms });
        }
        for raw in selector.split(',') {
            let term = raw.trim();
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError::Field {
                    selector: selector.to_string(),
                    reason: format!("{term:?} has no operator (=, ==, !=)"),
                });
            };
            let field = field.trim();
            if !accepts(field) {
                return Err(SelectorError::UnsupportedField {
                    field: field.to_string(),
                });
            }
            terms.push(FieldTerm {
                field: field.to_string(),
                equal,
                value: value.trim().to_string(),
            });
        }
        Ok(Self { terms })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|t| {
            let equal = match field_str(object, &t.field) {
                Some(actual) => actual == t.value,
                None => field_value(object, &t.field) == t.value,
            };
            equal == t.equal
        })
    }

    /// The value a term requires for `field` with `=`, if any (used to narrow scans).
    pub fn required(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.field == field)
            .map(|t| t.value.as_str())
    }
}

/// An object's string field as is, without a copy; `None` when it is missing or not a string
/// (then [`field_value`] says how it compares).
fn field_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    if field == "source" {
        return None;
    }
    field
        .split('.')
        .try_fold(object, |cur, part| cur.get(part))
        .and_then(Value::as_str)
}

/// An object's field as a selector compares it: strings as is, booleans and numbers printed,
/// missing fields as the empty string. `source` on core Events means `source.component`.
pub fn field_value(object: &Value, field: &str) -> String {
    let path = if field == "source" {
        "source.component"
    } else {
        field
    };
    let mut cur = object;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_operators_match_as_apimachinery_documents() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db, cache)", true),
            ("missing notin (a)", true),
            ("app notin (web)", false),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("n>4", true),
            ("n<5", false),
            ("missing>1", false),
            ("app=web,tier in (front,back),!canary", true),
            ("app=web,tier=back", false),
            ("", true),
        ];
        for (sel, want) in cases {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(Some(&l)), want, "selector {sel:?}");
        }
        assert!(LabelSelector::parse("drain!=skip").is_ok_and(|s| s.matches(None)));
    }

    #[test]
    fn malformed_label_selectors_are_rejected_with_the_term() {
        for bad in ["app in web", "=x", "app in ()", "a,,b", "n>x", "app ~ x"] {
            let err = LabelSelector::parse(bad).expect_err(bad);
            assert!(err.to_string().contains("label selector"), "{bad}: {err}");
        }
    }

    #[test]
    fn selector_objects_cover_match_labels_and_expressions() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                {"key": "team", "operator": "Exists"}
            ]
        }))
        .expect("valid selector");
        let ok = labels(json!({"app": "web", "tier": "front", "team": "x", "zone": "a"}));
        assert!(sel.matches(Some(&ok)));
        let mut canary = ok.clone();
        canary.insert("canary".into(), json!("1"));
        assert!(!sel.matches(Some(&canary)));
        let mut no_team = ok.clone();
        no_team.remove("team");
        assert!(!sel.matches(Some(&no_team)));
        assert!(
            LabelSelector::from_object(
                &json!({"matchExpressions": [{"key": "a", "operator": "Near"}]})
            )
            .is_err()
        );
        assert!(LabelSelector::from_object(&json!({})).is_ok_and(|s| s.matches(None)));
    }

    #[test]
    fn field_selectors_compare_strings_and_reject_unknown_fields() {
        let pod = json!({"metadata": {"name": "p", "namespace": "work"},
                         "spec": {"nodeName": "node-a", "hostNetwork": true},
                         "status": {"phase": "Running"}});
        let accepts = |f: &str| f != "spec.bogus";
        let m = |s: &str| FieldSelector::parse(s, accepts).expect(s).matches(&pod);
        assert!(m("spec.nodeName=node-a"));
        assert!(m("spec.nodeName==node-a,status.phase!=Succeeded"));
        assert!(!m("spec.nodeName!=node-a"));
        assert!(m("metadata.name=p,metadata.namespace=work"));
        assert!(m("spec.hostNetwork=true"));
        assert!(m("spec.schedulerName="));
        assert!(!m("status.phase=Pending"));
        assert_eq!(
            FieldSelector::parse("spec.bogus=1", accepts),
            Err(SelectorError::UnsupportedField {
                field: "spec.bogus".into()
            })
        );
        assert!(FieldSelector::parse("spec.nodeName", accepts).is_err());
        let sel = FieldSelector::parse("spec.nodeName=node-a", accepts).expect("valid");
        assert_eq!(sel.required("spec.nodeName"), Some("node-a"));
    }
}
