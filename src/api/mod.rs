//! The one path to the API server: the connection and its clients ([`client`]), their error,
//! classified once as transient or permanent ([`error`]), the one backoff and deadline-bounded
//! retry ([`retry`]), the one guarded write ([`guarded`]), the pacing of watch requests
//! ([`pace`]), the names in request paths ([`path`]), the credentials we fetch ourselves
//! ([`credentials`], [`exec`]) set on each request ([`authorized`]), the connection's TLS
//! ([`tls`]), and answers that are not the API server's ([`answers`]). Every request the engine sends goes through here, so
//! a deadline given to prepare, drain, restore or the Ready wait bounds each request and each
//! pause.

pub mod answers;
pub mod around;
pub mod authorized;
pub mod client;
pub mod credentials;
pub mod error;
pub mod exec;
pub mod guarded;
pub mod pace;
pub mod path;
pub mod retry;
pub mod tls;

pub use client::{ClientError, Clients};
pub use credentials::{CredentialError, Credentials};
pub use error::ApiError;
