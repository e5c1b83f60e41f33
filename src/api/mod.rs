//! The one path to the API server: the clients and their error ([`client`]), the one backoff and
//! deadline-bounded retry ([`retry`]), the one guarded write ([`guarded`]), the pacing of watch
//! requests ([`pace`]) and the names in request paths ([`path`]). Every request the engine sends
//! goes through here, so a deadline given to prepare, drain, restore or the Ready wait bounds
//! each request and each pause.

pub mod client;
pub mod guarded;
pub mod pace;
pub mod path;
pub mod retry;

pub use client::{ApiError, ClientError, Clients};
