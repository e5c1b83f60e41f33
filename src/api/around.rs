//! A `tower` service in front of a kube [`Client`] that hands each request to a [`Step`]: the
//! one shape of the services between our clients and kube's (watch pacing, our credentials,
//! answers that are not the API server's). The outer [`Client`] turns the step's errors back
//! into kube's, so callers see one client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;

/// What a service does with one request, given the client behind it.
pub trait Step: Clone + Send + Sync + 'static {
    fn run(
        &self,
        inner: Client,
        request: Request<Body>,
    ) -> impl Future<Output = Result<Response<Body>, kube::Error>> + Send + 'static;
}

/// `step` in front of `inner`, as a client.
pub fn around(inner: Client, step: impl Step) -> Client {
    let namespace = inner.default_namespace().to_string();
    Client::new(Around { inner, step }, namespace)
}

#[derive(Clone)]
struct Around<S> {
    inner: Client,
    step: S,
}

impl<S: Step> tower_service::Service<Request<Body>> for Around<S> {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        Box::pin(self.step.run(self.inner.clone(), request))
    }
}
