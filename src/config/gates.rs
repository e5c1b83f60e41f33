//! The cluster-health gates of `[fleet]`: `max_unready` and the `[fleet.alerts]` table, their
//! checked values and their validation into [`FleetSettings`](super::FleetSettings)'
//! `max_unready` and `alerts`. What they hold is judged in `crate::reboot::health`.
//!
//! ```toml
//! [fleet]
//! max_unready = 1                # or "10%" of the group's nodes
//!
//! [fleet.alerts]
//! prometheus_url = "https://prometheus.example:9090"   # or alertmanager_url
//! filter = "^(Watchdog|InfoInhibitor)$"                 # kured's --alert-filter-regexp
//! firing_only = true                                    # kured's --alert-firing-only
//! match_only = false                                    # kured's --alert-filter-match-only
//! ca_file = "/etc/kube-shutdown-drain/prometheus-ca.crt"
//! bearer_token_file = "/etc/kube-shutdown-drain/prometheus-token"
//! ```

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::from_value::{FromValue, Invalid, Value, deserialize_checked, quote, string};
use super::table::{Table, table};
use super::values::{AbsolutePath, Flag};
use super::{ConfigError, Source};

/// The largest count `max_unready` takes: no group is larger (Kubernetes' own tested limit is
/// 5,000 nodes a cluster).
const MAX_UNREADY_NODES: i64 = 10_000;

/// `[fleet] max_unready`: how many nodes of the node's slot group may be out at once, this
/// node's own reboot included: a count, or a percentage of the group's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnready {
    Nodes(u32),
    Percent(u32),
}

impl MaxUnready {
    /// The most nodes of a group of `group` nodes (this one included) that may be out at once.
    /// A percentage is rounded down, as Kubernetes rounds a Deployment's `maxUnavailable`, and
    /// is at least 1, as the Machine Config Operator takes a pool's `maxUnavailable`: a group too
    /// small for its percentage still lets one node go at a time.
    pub fn limit(self, group: usize) -> usize {
        match self {
            MaxUnready::Nodes(n) => n as usize,
            MaxUnready::Percent(p) => (group.saturating_mul(p as usize) / 100).max(1),
        }
    }
}

impl fmt::Display for MaxUnready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnready::Nodes(n) => write!(f, "{n}"),
            MaxUnready::Percent(p) => write!(f, "\"{p}%\""),
        }
    }
}

impl FromValue for MaxUnready {
    fn from_value(value: Value) -> Result<MaxUnready, Invalid> {
        let allowed = format!(
            "a number of nodes from 1 to {MAX_UNREADY_NODES}, or a percentage of the group's \
             nodes from \"1%\" to \"100%\" (this node's own reboot counts as one)"
        );
        match value {
            Value::Integer(n) if (1..=MAX_UNREADY_NODES).contains(&n) => {
                Ok(MaxUnready::Nodes(u32::try_from(n).unwrap_or(1)))
            }
            Value::Integer(n) => Err(Invalid::new(
                if n == 0 {
                    "0 would never let a node of the group reboot".to_string()
                } else {
                    format!("{n} is out of range")
                },
                allowed,
            )),
            Value::String(s) => s
                .strip_suffix('%')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u32>().ok())
                .filter(|p| (1..=100).contains(p))
                .map(MaxUnready::Percent)
                .ok_or_else(|| Invalid::new(format!("{} is not a percentage", quote(&s)), allowed)),
            other => Err(Invalid::wrong_type(
                "an integer or a string",
                &other,
                allowed,
            )),
        }
    }
}

/// Where the alerts are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertSource {
    /// Prometheus' `GET /api/v1/alerts`: its pending and firing alerts.
    Prometheus,
    /// Alertmanager's `GET /api/v2/alerts`: the alerts it holds active, neither silenced nor
    /// inhibited.
    Alertmanager,
}

impl AlertSource {
    /// The key that names it.
    pub fn key(self) -> &'static str {
        match self {
            AlertSource::Prometheus => "prometheus_url",
            AlertSource::Alertmanager => "alertmanager_url",
        }
    }

    /// The path below the base URL that lists the alerts, with its query.
    pub fn path(self) -> &'static str {
        match self {
            AlertSource::Prometheus => "/api/v1/alerts",
            AlertSource::Alertmanager => {
                "/api/v2/alerts?active=true&silenced=false&inhibited=false&unprocessed=false"
            }
        }
    }
}

impl fmt::Display for AlertSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AlertSource::Prometheus => "Prometheus",
            AlertSource::Alertmanager => "Alertmanager",
        })
    }
}

/// `prometheus_url` or `alertmanager_url`: an `http` or `https` URL with a host, maybe a path
/// prefix (a server behind a reverse proxy), no query, fragment or user info (a password in it
/// would be in every message that names the URL). Kept without its trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertsUrl {
    pub base: String,
    pub https: bool,
    /// The host is `localhost` or a loopback address.
    pub loopback: bool,
}

impl FromValue for AlertsUrl {
    fn from_value(value: Value) -> Result<AlertsUrl, Invalid> {
        const ALLOWED: &str = "an http or https URL such as \"https://prometheus.example:9090\", \
            without query, fragment or user info";
        let text = string(value, ALLOWED)?;
        let bad = |why: &str| Invalid::new(format!("{} {why}", quote(&text)), ALLOWED);
        if text.contains(['#', '?']) {
            return Err(bad("has a query or a fragment"));
        }
        let uri: http::Uri = text.parse().map_err(|_| bad("is not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("is not an http or https URL")),
        };
        let Some(authority) = uri.authority() else {
            return Err(bad("names no host"));
        };
        if authority.as_str().contains('@') {
            return Err(bad("has user info"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        Ok(AlertsUrl {
            base: text.trim_end_matches('/').to_string(),
            https,
            loopback,
        })
    }
}

/// `filter`: a regular expression on an alert's name (kured's `--alert-filter-regexp`, a Go
/// regexp: regex-lite reads the same RE2 syntax), searched anywhere in the name unless anchored.
#[derive(Debug, Clone)]
pub struct AlertFilter(pub regex_lite::Regex);

impl PartialEq for AlertFilter {
    fn eq(&self, other: &AlertFilter) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for AlertFilter {}

impl FromValue for AlertFilter {
    fn from_value(value: Value) -> Result<AlertFilter, Invalid> {
        const ALLOWED: &str =
            "a regular expression on alert names, e.g. \"^(Watchdog|InfoInhibitor)$\"";
        let text = string(value, ALLOWED)?;
        regex_lite::RegexBuilder::new(&text)
            .size_limit(1 << 20)
            .build()
            .map(AlertFilter)
            .map_err(|e| {
                let why = e.to_string().replace('\n', " ");
                Invalid::new(
                    format!("{} is not a regular expression: {why}", quote(&text)),
                    ALLOWED,
                )
            })
    }
}

deserialize_checked!(MaxUnready, AlertsUrl, AlertFilter);

/// `[fleet.alerts]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlerts {
    /// One of the two URLs is required.
    pub prometheus_url: Option<Spanned<AlertsUrl>>,
    pub alertmanager_url: Option<Spanned<AlertsUrl>>,
    /// Default: none (every alert counts).
    pub filter: Option<AlertFilter>,
    /// Default: false (pending alerts count too). Prometheus only.
    pub firing_only: Option<Spanned<Flag>>,
    /// Default: false (alerts the filter matches do not count). Only with `filter`.
    pub match_only: Option<Spanned<Flag>>,
    /// Default: none (the system's trust store). https only.
    pub ca_file: Option<Spanned<AbsolutePath>>,
    /// Default: none (no `Authorization` header).
    pub bearer_token_file: Option<Spanned<AbsolutePath>>,
}

impl Table for RawAlerts {
    const EXPECTING: &'static str = "`alerts` to be a [fleet.alerts] table (keys prometheus_url, \
         alertmanager_url, filter, firing_only, match_only, ca_file, bearer_token_file)";
}

/// `[fleet.alerts]` read through [`table`], so a value that is not a table is refused by name.
#[derive(Debug)]
pub struct AlertsEntry(pub RawAlerts);

impl<'de> Deserialize<'de> for AlertsEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        table(d).map(AlertsEntry)
    }
}

/// The validated `[fleet.alerts]`: present only when the table is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertsSettings {
    pub source: AlertSource,
    /// The configured URL without its trailing `/`.
    pub base: String,
    pub filter: Option<AlertFilter>,
    pub firing_only: bool,
    pub match_only: bool,
    pub ca_file: Option<PathBuf>,
    /// Read at each query, so a rotated token is used at once.
    pub bearer_token_file: Option<PathBuf>,
}

impl AlertsSettings {
    /// The URL asked: the base and the source's path.
    pub fn endpoint(&self) -> String {
        format!("{}{}", self.base, self.source.path())
    }
}

/// One URL, a filter for `match_only`, `firing_only` for Prometheus only, the CA for https only,
/// and a token never sent in clear text to another host.
pub fn alerts(
    entry: Option<Spanned<AlertsEntry>>,
    src: &Source<'_>,
) -> Result<Option<AlertsSettings>, ConfigError> {
    let Some(entry) = entry else {
        return Ok(None);
    };
    let span = entry.span();
    let raw = entry.into_inner().0;
    let refuse = |span, key: &str, problem: &str, allowed: &str| {
        Err(src.invalid(
            span,
            &format!("fleet.alerts.{key}"),
            Invalid::new(problem, allowed),
        ))
    };
    let (source, url) = match (raw.prometheus_url, raw.alertmanager_url) {
        (Some(p), None) => (AlertSource::Prometheus, p),
        (None, Some(a)) => (AlertSource::Alertmanager, a),
        (Some(_), Some(a)) => {
            return refuse(
                a.span(),
                "alertmanager_url",
                "the alerts are asked of one server, and prometheus_url is set too",
                "prometheus_url or alertmanager_url, not both",
            );
        }
        (None, None) => {
            return refuse(
                span,
                "prometheus_url",
                "[fleet.alerts] names no server to ask",
                "`prometheus_url = \"https://...\"` or `alertmanager_url = \"https://...\"` in it",
            );
        }
    };
    let url = url.into_inner();
    if let Some(f) = &raw.firing_only
        && source == AlertSource::Alertmanager
    {
        return refuse(
            f.span(),
            "firing_only",
            "Alertmanager holds only alerts that fire (Prometheus sends it no pending ones)",
            "firing_only with prometheus_url",
        );
    }
    if let Some(m) = &raw.match_only
        && raw.filter.is_none()
    {
        return refuse(
            m.span(),
            "match_only",
            "it keeps the alerts `filter` matches, and there is no filter",
            "`filter = \"REGEX\"` in [fleet.alerts] together with it",
        );
    }
    if let Some(ca) = &raw.ca_file
        && !url.https
    {
        return refuse(
            ca.span(),
            "ca_file",
            &format!(
                "{} is a plain http URL: there is no certificate to check",
                url.base
            ),
            "ca_file with an https URL",
        );
    }
    if let Some(t) = &raw.bearer_token_file
        && !url.https
        && !url.loopback
    {
        return refuse(
            t.span(),
            "bearer_token_file",
            &format!(
                "{} is a plain http URL of another host: the token would cross the network in \
                 clear text",
                url.base
            ),
            "an https URL (or http on loopback) with a token",
        );
    }
    Ok(Some(AlertsSettings {
        source,
        base: url.base,
        filter: raw.filter,
        firing_only: raw.firing_only.is_some_and(|f| f.get_ref().0),
        match_only: raw.match_only.is_some_and(|m| m.get_ref().0),
        ca_file: raw.ca_file.map(|c| c.into_inner().0),
        bearer_token_file: raw.bearer_token_file.map(|t| t.into_inner().0),
    }))
}
