//! The `Authorization` header from [`Credentials`] on each request of a kube client, and a 401
//! answer marking the credential stale so the next request fetches it anew (client-go's exec
//! authenticator re-runs its plugin after a 401 too, `plugin/pkg/client/auth/exec/exec.go`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::header::AUTHORIZATION;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;

use super::credentials::Credentials;

/// A `tower` service in front of a kube client that authorizes each request with
/// [`Credentials`] (when they are ours; kube's own credentials are set by the inner client).
#[derive(Clone)]
pub struct Authorized {
    inner: Client,
    credentials: Credentials,
}

impl Authorized {
    pub fn new(inner: Client, credentials: Credentials) -> Authorized {
        Authorized { inner, credentials }
    }
}

impl tower_service::Service<Request<Body>> for Authorized {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let (inner, credentials) = (self.inner.clone(), self.credentials.clone());
        Box::pin(async move {
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
        })
    }
}
