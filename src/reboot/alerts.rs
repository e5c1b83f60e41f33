//! The alerts of `[fleet.alerts]`, asked of Prometheus (`GET /api/v1/alerts`: its pending and
//! firing alerts, Prometheus' HTTP API "Alerts") or of Alertmanager (`GET /api/v2/alerts` of the
//! active alerts neither silenced nor inhibited, Alertmanager's OpenAPI v2, as kured's
//! Alertmanager client asks). One GET per judging of the holds, within the judging's deadline
//! and [`MAX_BODY`] bytes; https checked against `ca_file` or the system's trust store
//! ([`crate::api::tls::server_checked`]); the `bearer_token_file` read at each query, so a
//! rotated token is used at once. What comes back is only read: which alerts count is the
//! judge's (`super::health`).

use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;
use tokio::time::Instant;

use crate::config::file::{FileError, read_text};
use crate::config::gates::{AlertSource, AlertsSettings};

/// The most bytes of an answer read: thousands of alerts with their labels and annotations fit
/// in it; more is refused, not read on.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// The most bytes of an error answer's body a message quotes.
const BODY_SHOWN: usize = 200;

/// One active alert as the server listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// Its `alertname` label, cut to [`crate::text::OUTSIDE_MAX`] bytes (empty when it has none).
    pub name: String,
    /// Firing (Prometheus' `firing`, every alert Alertmanager holds), or else pending.
    pub firing: bool,
}

/// The alerts could not be read. Every variant names the URL asked, never the token.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AlertsError {
    #[error("{url}: {source}")]
    File { url: String, source: FileErrorText },
    #[error("{url}: ca_file {path} holds no PEM certificate, or one that is damaged")]
    NoCertificate { url: String, path: String },
    #[error("{url}: bearer_token_file {path} is empty")]
    EmptyToken { url: String, path: String },
    #[error("{url}: cannot set up TLS: {why}")]
    Tls { url: String, why: String },
    #[error("{url}: no answer within {} s", .after.as_secs_f64().ceil())]
    Timeout { url: String, after: Duration },
    #[error("{url}: {why}")]
    Request { url: String, why: String },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url}: the answer is larger than {MAX_BODY} bytes")]
    TooLarge { url: String },
    #[error("{url}: the answer is not {source_kind}'s list of alerts: {why}")]
    Body {
        url: String,
        source_kind: AlertSource,
        why: String,
    },
}

/// A [`FileError`]'s words, so the error can be cloned into what the judge saw.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct FileErrorText(String);

impl From<FileError> for FileErrorText {
    fn from(e: FileError) -> FileErrorText {
        FileErrorText(e.to_string())
    }
}

/// The active alerts of the configured server, asked once by `deadline`.
#[tracing::instrument(skip_all, fields(url = %settings.endpoint()))]
pub async fn active(
    settings: &AlertsSettings,
    deadline: Instant,
) -> Result<Vec<Alert>, AlertsError> {
    let url = settings.endpoint();
    let started = Instant::now();
    let timeout = || AlertsError::Timeout {
        url: url.clone(),
        after: deadline.saturating_duration_since(started),
    };
    let body = tokio::time::timeout_at(deadline, get(settings, &url))
        .await
        .map_err(|_| timeout())??;
    parse(settings.source, &url, &body)
}

/// The GET and its body, unbounded in time (the caller bounds it).
async fn get(settings: &AlertsSettings, url: &str) -> Result<Bytes, AlertsError> {
    use hyper_util::client::legacy::connect::HttpConnector;
    let request_error = |why: String| AlertsError::Request {
        url: url.to_string(),
        why,
    };
    let mut request = http::Request::get(url)
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| request_error(e.to_string()))?;
    if let Some(value) = authorization(settings, url)? {
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, value);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls(settings, url)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let client = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<Bytes>>(connector);
    let response = client
        .request(request)
        .await
        .map_err(|e| request_error(error_chain(&e)))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                AlertsError::TooLarge {
                    url: url.to_string(),
                }
            } else {
                request_error(format!("reading the answer: {e}"))
            }
        })?
        .to_bytes();
    if !status.is_success() {
        return Err(AlertsError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: crate::text::clean(&String::from_utf8_lossy(&body), BODY_SHOWN),
        });
    }
    Ok(body)
}

/// `Authorization: Bearer TOKEN` from `bearer_token_file`, read now; none without the key.
fn authorization(
    settings: &AlertsSettings,
    url: &str,
) -> Result<Option<http::HeaderValue>, AlertsError> {
    let Some(path) = &settings.bearer_token_file else {
        return Ok(None);
    };
    let text = read_text(path, "bearer_token_file").map_err(|e| AlertsError::File {
        url: url.to_string(),
        source: e.into(),
    })?;
    let token = text.trim();
    let path = path.display().to_string();
    let mut value = http::HeaderValue::try_from(format!("Bearer {token}"))
        .ok()
        .filter(|_| !token.is_empty())
        .ok_or_else(|| AlertsError::EmptyToken {
            url: url.to_string(),
            path,
        })?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// The client's TLS: the server checked against `ca_file` (read now) or the system's roots.
fn tls(settings: &AlertsSettings, url: &str) -> Result<rustls::ClientConfig, AlertsError> {
    let roots = match &settings.ca_file {
        None => None,
        Some(path) => {
            let pem = read_text(path, "ca_file").map_err(|e| AlertsError::File {
                url: url.to_string(),
                source: e.into(),
            })?;
            let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| AlertsError::NoCertificate {
                    url: url.to_string(),
                    path: path.display().to_string(),
                })?;
            Some(certs)
        }
    };
    crate::api::tls::server_checked(roots).map_err(|e| AlertsError::Tls {
        url: url.to_string(),
        why: e.to_string(),
    })
}

/// An error and its sources, as one line (hyper's own says only "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        words.push_str(": ");
        words.push_str(&s.to_string());
        source = s.source();
    }
    crate::text::outside(&words)
}

#[derive(Deserialize)]
struct PrometheusAnswer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<PrometheusData>,
}

#[derive(Deserialize)]
struct PrometheusData {
    alerts: Vec<ListedAlert<String>>,
}

/// An alert as either server lists it: its labels, and its state (Prometheus: a string;
/// Alertmanager: an object whose `state` is `active`, `suppressed` or `unprocessed`).
#[derive(Deserialize)]
struct ListedAlert<S> {
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(alias = "status")]
    state: S,
}

#[derive(Deserialize)]
struct AlertmanagerStatus {
    state: String,
}

/// The alerts of an answer; pure.
pub fn parse(source: AlertSource, url: &str, body: &[u8]) -> Result<Vec<Alert>, AlertsError> {
    let bad = |why: String| AlertsError::Body {
        url: url.to_string(),
        source_kind: source,
        why: crate::text::outside(&why),
    };
    let name = |labels: &std::collections::BTreeMap<String, String>| {
        crate::text::outside(labels.get("alertname").map_or("", String::as_str))
    };
    match source {
        AlertSource::Prometheus => {
            let answer: PrometheusAnswer =
                serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
            if answer.status != "success" {
                return Err(bad(format!(
                    "status {:?}: {}",
                    answer.status,
                    answer.error.unwrap_or_default()
                )));
            }
            let data = answer.data.ok_or_else(|| bad("no data".to_string()))?;
            Ok(data
                .alerts
                .iter()
                .map(|a| Alert {
                    name: name(&a.labels),
                    firing: a.state == "firing",
                })
                .collect())
        }
        AlertSource::Alertmanager => {
            let alerts: Vec<ListedAlert<AlertmanagerStatus>> =
                serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
            // Asked with active=true only; a server that ignores the query says its state.
            Ok(alerts
                .iter()
                .filter(|a| a.state.state == "active")
                .map(|a| Alert {
                    name: name(&a.labels),
                    firing: true,
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:9090/api/v1/alerts";

    #[test]
    fn prometheus_lists_pending_and_firing_alerts() {
        let body = br#"{"status":"success","data":{"alerts":[
            {"labels":{"alertname":"NodeDown","severity":"critical"},"annotations":{},
             "state":"firing","activeAt":"2026-12-04T11:00:00Z","value":"1e+00"},
            {"labels":{"alertname":"DiskFilling"},"state":"pending"},
            {"labels":{},"state":"firing"}]}}"#;
        let alerts = parse(AlertSource::Prometheus, URL, body).unwrap();
        assert_eq!(
            alerts,
            [
                Alert {
                    name: "NodeDown".into(),
                    firing: true
                },
                Alert {
                    name: "DiskFilling".into(),
                    firing: false
                },
                Alert {
                    name: String::new(),
                    firing: true
                },
            ]
        );
        let e = parse(
            AlertSource::Prometheus,
            URL,
            br#"{"status":"error","error":"bad"}"#,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "http://127.0.0.1:9090/api/v1/alerts: the answer is not Prometheus's list of alerts: \
             status \"error\": bad"
        );
        let e = parse(AlertSource::Prometheus, URL, b"<html>")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("http://127.0.0.1:9090/api/v1/alerts: the answer is not"),
            "{e}"
        );
    }

    #[test]
    fn alertmanager_lists_its_active_alerts_as_firing() {
        let body = br#"[
            {"labels":{"alertname":"NodeDown"},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]}},
            {"labels":{"alertname":"Quiet"},"status":{"state":"suppressed","silencedBy":["x"],"inhibitedBy":[]}}]"#;
        let alerts = parse(AlertSource::Alertmanager, URL, body).unwrap();
        assert_eq!(
            alerts,
            [Alert {
                name: "NodeDown".into(),
                firing: true
            }]
        );
    }

    #[test]
    fn a_long_alert_name_is_cut_where_it_enters() {
        let name = "A".repeat(1000);
        let body = format!(
            r#"{{"status":"success","data":{{"alerts":[{{"labels":{{"alertname":"{name}"}},"state":"firing"}}]}}}}"#
        );
        let alerts = parse(AlertSource::Prometheus, URL, body.as_bytes()).unwrap();
        assert!(alerts[0].name.len() <= crate::text::OUTSIDE_MAX);
    }
}
