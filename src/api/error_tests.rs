//! [`ApiError`]'s classification and words, from errors built as the client's stack builds
//! them (hyper-util's own client error cannot be built outside it: `tests/tls.rs` meets it).

use std::io;

use super::*;

/// The trust of a kubeconfig `/etc/kc` with a certificate authority and no tls-server-name.
fn authority() -> Trust {
    Trust {
        kubeconfig: PathBuf::from("/etc/kc"),
        authority: true,
        server_name: None,
    }
}

/// kube's error for a request whose connection failed on `e`, wrapped as hyper-rustls wraps
/// tokio-rustls' error: `io::Error::other(io::Error(InvalidData, e))`.
fn tls(e: rustls::Error) -> kube::Error {
    let inner = io::Error::new(io::ErrorKind::InvalidData, e);
    kube::Error::Service(Box::new(io::Error::other(inner)))
}

fn classified(e: kube::Error) -> ApiError {
    ApiError::from_kube("node n1", "https://s:6443", &authority(), e)
}

/// An error with these words and this source, as a connector's is.
#[derive(Debug)]
struct Words(&'static str, Option<io::Error>);

impl fmt::Display for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl StdError for Words {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.1.as_ref().map(|e| e as _)
    }
}

#[test]
fn api_errors_are_one_line_naming_the_object_without_the_status_dump() {
    let status: kube::core::Status = serde_json::from_value(serde_json::json!({
        "status": "Failure", "code": 503, "reason": "ServiceUnavailable",
        "message": "etcd\nleader changed",
    }))
    .unwrap();
    let e = classified(kube::Error::Api(Box::new(status)));
    assert_eq!(
        e.to_string(),
        "node n1: etcd leader changed (ServiceUnavailable, HTTP 503)"
    );
    let bare = ApiError::from_kube(
        "pod a/b",
        "s",
        &authority(),
        kube::Error::Api(Box::new(kube::core::Status {
            code: 500,
            ..kube::core::Status::default()
        })),
    );
    assert_eq!(
        bare.to_string(),
        "pod a/b: the API server refused the request (HTTP 500)"
    );
    let t = ApiError::new(
        "node n1",
        "https://s:6443",
        Kind::Timeout(Duration::from_secs(10)),
    );
    assert_eq!(
        t.to_string(),
        "node n1: no answer from API server https://s:6443 within 10s"
    );
    let long = ApiError::new(
        "node n1",
        "s",
        Kind::Status {
            code: 400,
            reason: "BadRequest".into(),
            message: "x".repeat(100_000),
            retry_after: None,
        },
    );
    assert!(long.to_string().len() < 400, "a huge message is cut");
}

#[test]
fn transport_causes_are_told_by_their_types_and_stay_transient() {
    let refused = classified(kube::Error::Service(Box::new(io::Error::from(
        io::ErrorKind::ConnectionRefused,
    ))));
    assert_eq!(
        refused.to_string(),
        "node n1: API server https://s:6443 unreachable: connection refused"
    );
    assert!(refused.is_unreachable() && refused.is_transient() && !refused.is_permanent());
    assert!(!refused.is_dead_connection());

    // The connector's "dns error" over the resolver's io::Error (kind Uncategorized).
    let lookup =
        io::Error::other("failed to lookup address information: Name or service not known");
    let dns = classified(kube::Error::Service(Box::new(Words(
        "dns error",
        Some(lookup),
    ))));
    assert_eq!(
        dns.kind(),
        &Kind::Transport(Cause::NameResolution(
            "failed to lookup address information: Name or service not known".into()
        ))
    );
    assert!(dns.is_transient());

    let reset = classified(kube::Error::ReadEvents(io::Error::from(
        io::ErrorKind::ConnectionReset,
    )));
    assert!(
        reset.is_dead_connection() && reset.is_transient(),
        "{reset}"
    );
    let timed_out = classified(kube::Error::ReadEvents(io::Error::from(
        io::ErrorKind::TimedOut,
    )));
    assert_eq!(timed_out.kind(), &Kind::Transport(Cause::AnswerTimeout));

    // A TLS alert (a server restarting, or one refusing our client certificate) is transient.
    let alert = classified(tls(rustls::Error::AlertReceived(
        rustls::AlertDescription::HandshakeFailure,
    )));
    assert!(
        matches!(alert.kind(), Kind::Transport(Cause::Tls(_))),
        "{alert:?}"
    );
    assert!(alert.is_transient() && !alert.is_permanent());
    let not_tls = classified(tls(rustls::Error::InvalidMessage(
        rustls::InvalidMessage::InvalidContentType,
    )));
    assert!(
        not_tls.to_string().contains("did not answer in TLS"),
        "{not_tls}"
    );
    assert!(not_tls.is_transient());
}

#[test]
fn a_refused_certificate_is_permanent_and_named_with_the_kubeconfig() {
    let e = classified(tls(rustls::CertificateError::UnknownIssuer.into()));
    assert_eq!(
        e.to_string(),
        "node n1: API server https://s:6443: certificate refused (UnknownIssuer): not signed by \
         the certificate-authority of kubeconfig /etc/kc"
    );
    assert!(e.is_permanent(), "{e:?}");
    assert!(!e.is_transient() && !e.is_unreachable() && !e.is_server_trouble());
    assert_eq!(e.code(), None);

    let system = Trust {
        authority: false,
        ..authority()
    };
    let e = ApiError::from_kube(
        "node n1",
        "https://s:6443",
        &system,
        tls(rustls::CertificateError::UnknownIssuer.into()),
    );
    assert!(
        e.to_string().contains(
            "kubeconfig /etc/kc names no certificate-authority, and no authority of the \
             system's trust store signed it"
        ),
        "{e}"
    );
}

#[test]
fn a_refusal_names_the_names_and_the_validity_as_rustls_found_them() {
    let name = rustls::CertificateError::NotValidForNameContext {
        expected: rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
        presented: vec!["DnsName(\"api.test\")".into()],
    };
    let e = classified(tls(name.clone().into()));
    assert_eq!(
        e.problem(),
        "API server https://s:6443: certificate refused (NotValidForName): not valid for \
         127.0.0.1, the host of its server URL in kubeconfig /etc/kc; it is valid for \
         DnsName(\"api.test\")"
    );
    let named = Trust {
        server_name: Some("api.other".into()),
        ..authority()
    };
    let e = ApiError::from_kube("node n1", "s", &named, tls(name.into()));
    assert!(
        e.to_string().contains("its tls-server-name in kubeconfig"),
        "{e}"
    );

    let second = |s: u64| rustls::pki_types::UnixTime::since_unix_epoch(Duration::from_secs(s));
    let expired = rustls::CertificateError::ExpiredContext {
        time: second(1_767_225_600),
        not_after: second(1_735_689_600),
    };
    let e = classified(tls(expired.into()));
    assert_eq!(
        e.problem(),
        "API server https://s:6443: certificate refused (Expired): not valid after \
         2025-01-01T00:00:00Z, and the node's clock says 2026-01-01T00:00:00Z; kubeconfig /etc/kc"
    );
    assert!(e.is_permanent());
    let early = rustls::CertificateError::NotValidYetContext {
        time: second(1_735_689_600),
        not_before: second(1_767_225_600),
    };
    let e = classified(tls(early.into()));
    assert!(
        e.problem().contains(
            "certificate refused (NotValidYet): not valid before 2026-01-01T00:00:00Z, and the \
             node's clock says 2025-01-01T00:00:00Z (is it right?)"
        ),
        "{e}"
    );
    let signature = classified(tls(rustls::CertificateError::BadSignature.into()));
    assert!(
        signature.problem().contains(
            "certificate refused (BadSignature): not signed by the certificate-authority of \
             kubeconfig /etc/kc, though that authority bears its issuer's name"
        ),
        "{signature}"
    );
    assert!(signature.is_permanent());
    let other = classified(tls(rustls::CertificateError::InvalidPurpose.into()));
    assert_eq!(
        other.problem(),
        "API server https://s:6443: certificate refused: InvalidPurpose; kubeconfig /etc/kc"
    );
    assert!(other.is_permanent());
    // A verifier's own error is named by its words, not by rustls' wrapping of them.
    let own = rustls::OtherError(std::sync::Arc::new(io::Error::other("CaUsedAsEndEntity")));
    let wrapped = classified(tls(rustls::CertificateError::Other(own).into()));
    assert_eq!(
        wrapped.problem(),
        "API server https://s:6443: certificate refused: CaUsedAsEndEntity; kubeconfig /etc/kc"
    );
}
