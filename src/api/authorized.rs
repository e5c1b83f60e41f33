//! The `Authorization` header from [`Credentials`] on each request of a kube client, and a 401
//! answer marking the credential stale so the next request fetches it anew (client-go's exec
//! authenticator re-runs its plugin after a 401 too, `plugin/pkg/client/auth/exec/exec.go`).

use std::future::Future;

use http::header::AUTHORIZATION;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;

use super::around::{Step, around};
use super::credentials::Credentials;

/// The step ([`super::around`]) in front of a kube client that authorizes each request with
/// [`Credentials`] (when they are ours; kube's own credentials are set by the inner client).
#[derive(Clone)]
pub struct Authorized {
    credentials: Credentials,
}

impl Authorized {
    /// `inner` with our credentials on each request.
    pub fn client(inner: Client, credentials: Credentials) -> Client {
        around(inner, Authorized { credentials })
    }
}

impl Step for Authorized {
    fn run(
        &self,
        inner: Client,
        mut request: Request<Body>,
    ) -> impl Future<Output = Result<Response<Body>, kube::Error>> + Send + 'static {
        let credentials = self.credentials.clone();
        async move {
            let header = credentials
                .header()
                .await
                .map_err(|e| kube::Error::Service(Box::new(e)))?;
            if let Some(value) = header {
                request.headers_mut().insert(AUTHORIZATION, value);
            }
            let response = inner.send(request).await?;
            if response.status() == StatusCode::UNAUTHORIZED {
                credentials.unauthorized();
            }
            Ok(response)
        }
    }
}
