//! The client's TLS: rustls' configuration from the kubeconfig's cluster and user, as client-go's
//! `transport.TLSConfigFor` makes it (`staging/src/k8s.io/client-go/transport/transport.go`):
//! - the server is checked against the cluster's `certificate-authority` (or its `-data`), and
//!   without one against the system's trust store (rustls-platform-verifier: the roots the
//!   system keeps, as Go's `x509.SystemCertPool`);
//! - `insecure-skip-tls-verify` checks nothing, as Go's `InsecureSkipVerify`;
//! - `tls-server-name` is the name sent and checked instead of the URL's host;
//! - the client certificate is the user's `client-certificate`/`client-key` (or their `-data`,
//!   which come first) or the one an exec plugin gave, which replaces them.
//!
//! Made here, not by kube's `Client::try_from`: kube's builder also builds its credential layer,
//! whose `gcp` auth provider links a JSONPath engine and the regex crate, a sixth of the shipped
//! binary, while the program sets every credential itself ([`super::credentials`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::config::AuthInfo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_platform_verifier::BuilderVerifierExt;
use secrecy::{ExposeSecret, SecretString};

use crate::config::file::{FileError, read_text};

/// What the client's TLS is made from: the parts of kube's reading of the kubeconfig that bear
/// on it, and the client certificate an exec plugin gave.
pub struct TlsFrom {
    /// The kubeconfig's path, for messages.
    pub kubeconfig: PathBuf,
    /// The cluster's certificate authority as DER certificates (kube read the file or the data).
    pub roots: Option<Vec<Vec<u8>>>,
    pub insecure: bool,
    pub server_name: Option<String>,
    /// The current user, whose client certificate files or data apply unless `issued` is set.
    pub user: AuthInfo,
    /// A plugin's client certificate and key (PEM).
    pub issued: Option<(String, SecretString)>,
}

/// The kubeconfig's TLS settings cannot be used. Names the file and what in it; never a key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "kubeconfig {path}: a certificate of the cluster's certificate authority is not one rustls accepts: {source}"
    )]
    Authority {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("kubeconfig {path}: cannot use the system's trust store: {source}")]
    TrustStore {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("kubeconfig {path}: tls-server-name `{name}` is neither a DNS name nor an IP address")]
    ServerName { path: PathBuf, name: String },
    #[error("kubeconfig {path}: the user's {name}-data is not valid base64")]
    Base64 { path: PathBuf, name: &'static str },
    #[error("kubeconfig {path}: {source}")]
    File { path: PathBuf, source: FileError },
    #[error("kubeconfig {path}: the {what} holds no PEM certificate, or one that is damaged")]
    NoCertificate { path: PathBuf, what: String },
    #[error("kubeconfig {path}: the {what} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: PathBuf, what: String },
    #[error(
        "kubeconfig {path}: a client certificate without its key, or a key without its certificate"
    )]
    HalfIdentity { path: PathBuf },
    #[error("kubeconfig {path}: the client certificate and key cannot be used: {source}")]
    Identity {
        path: PathBuf,
        source: rustls::Error,
    },
}

/// rustls' client configuration, and the name to send and check if not the URL's host.
pub type Made = (ClientConfig, Option<ServerName<'static>>);

impl TlsFrom {
    /// rustls' client configuration, and the name to send and check if not the URL's host.
    pub fn config(self) -> Result<Made, TlsError> {
        let path = self.kubeconfig.clone();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::TrustStore {
                path: path.clone(),
                source,
            })?;
        let builder = match &self.roots {
            // Nothing is checked (`Unchecked` below): no trust store is needed either.
            _ if self.insecure => builder.with_root_certificates(RootCertStore::empty()),
            Some(roots) => {
                let mut store = RootCertStore::empty();
                for der in roots {
                    store
                        .add(CertificateDer::from(der.clone()))
                        .map_err(|source| TlsError::Authority {
                            path: path.clone(),
                            source,
                        })?;
                }
                builder.with_root_certificates(store)
            }
            None => builder
                .with_platform_verifier()
                .map_err(|source| TlsError::TrustStore {
                    path: path.clone(),
                    source,
                })?,
        };
        let mut config = match self.identity()? {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|source| TlsError::Identity {
                    path: path.clone(),
                    source,
                })?,
            None => builder.with_no_client_auth(),
        };
        if self.insecure {
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(Unchecked(provider)));
        }
        let name = match &self.server_name {
            Some(name) => {
                Some(
                    ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName {
                        path,
                        name: name.clone(),
                    })?,
                )
            }
            None => None,
        };
        Ok((config, name))
    }

    /// The client certificate chain and key: the plugin's, else the user's data, else their
    /// files; none when neither is set.
    fn identity(
        &self,
    ) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, TlsError> {
        let path = self.kubeconfig.as_path();
        let (cert, key, cert_what, key_what) = match &self.issued {
            Some((cert, key)) => (
                cert.as_bytes().to_vec(),
                key.expose_secret().as_bytes().to_vec(),
                "client certificate the exec plugin gave".to_owned(),
                "client key the exec plugin gave".to_owned(),
            ),
            None => {
                let user = &self.user;
                let cert = pem_of(
                    path,
                    user.client_certificate_data.as_deref(),
                    user.client_certificate.as_deref(),
                    "client-certificate",
                )?;
                let key = pem_of(
                    path,
                    user.client_key_data.as_ref().map(|k| k.expose_secret()),
                    user.client_key.as_deref(),
                    "client-key",
                )?;
                match (cert, key) {
                    (None, None) => return Ok(None),
                    (Some(cert), Some(key)) => (cert.0, key.0, cert.1, key.1),
                    _ => {
                        return Err(TlsError::HalfIdentity {
                            path: path.to_path_buf(),
                        });
                    }
                }
            }
        };
        let chain = CertificateDer::pem_slice_iter(&cert).collect::<Result<Vec<_>, _>>();
        let Some(chain) = chain.ok().filter(|c| !c.is_empty()) else {
            return Err(TlsError::NoCertificate {
                path: path.to_path_buf(),
                what: cert_what,
            });
        };
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| TlsError::NoKey {
            path: path.to_path_buf(),
            what: key_what,
        })?;
        Ok(Some((chain, key)))
    }
}

/// rustls' configuration for a client without a certificate of its own that checks the server
/// against `roots` (DER certificates), or against the system's trust store without them: for
/// servers other than the API server (`[fleet.alerts]`, [`crate::reboot::alerts`]).
pub fn server_checked(
    roots: Option<Vec<CertificateDer<'static>>>,
) -> Result<ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    let builder = match roots {
        Some(roots) => {
            let mut store = RootCertStore::empty();
            for cert in roots {
                store.add(cert)?;
            }
            builder.with_root_certificates(store)
        }
        None => builder.with_platform_verifier()?,
    };
    Ok(builder.with_no_client_auth())
}

/// The PEM text of a user's `NAME-data` (base64, first) or `NAME` (a file), and what it was,
/// for messages.
fn pem_of(
    kubeconfig: &Path,
    data: Option<&str>,
    file: Option<&str>,
    name: &'static str,
) -> Result<Option<(Vec<u8>, String)>, TlsError> {
    use base64::Engine as _;
    if let Some(data) = data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|_| TlsError::Base64 {
                path: kubeconfig.to_path_buf(),
                name,
            })?;
        return Ok(Some((bytes, format!("user's {name}-data"))));
    }
    let Some(file) = file else {
        return Ok(None);
    };
    let text = read_text(Path::new(file), name).map_err(|source| TlsError::File {
        path: kubeconfig.to_path_buf(),
        source,
    })?;
    Ok(Some((text.into_bytes(), format!("{name} file {file}"))))
}

/// `insecure-skip-tls-verify`: any server certificate and any handshake signature pass, as with
/// Go's `InsecureSkipVerify`. The provider only names the schemes offered.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `TlsFrom` whose user has `cert` and `key` as PEM text in `-data`.
    fn with_identity(cert: &str, key: &str) -> TlsFrom {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        TlsFrom {
            kubeconfig: PathBuf::from("/etc/kc"),
            roots: None,
            insecure: true,
            server_name: None,
            user: AuthInfo {
                client_certificate_data: Some(b64.encode(cert)),
                client_key_data: Some(SecretString::from(b64.encode(key))),
                ..AuthInfo::default()
            },
            issued: None,
        }
    }

    #[test]
    fn a_damaged_certificate_in_the_client_chain_is_an_error_naming_the_kubeconfig() {
        let made = rcgen::generate_simple_self_signed(vec!["node-a".to_owned()]).unwrap();
        let (cert, key) = (made.cert.pem(), made.signing_key.serialize_pem());
        assert!(with_identity(&cert, &key).config().is_ok());
        let damaged =
            format!("{cert}-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n");
        let e = with_identity(&damaged, &key)
            .config()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "kubeconfig /etc/kc: the user's client-certificate-data holds no PEM certificate, or \
             one that is damaged"
        );
        let e = with_identity(&cert, "").config().unwrap_err().to_string();
        assert!(e.contains("holds no PEM private key"), "{e}");
    }
}
