//! Who is calling the FleetLock server, judged once per connection at accept from the kernel's
//! socket table (`peer.rs`), before a byte of the request is read: the update agent, or anyone
//! else with the reason of the refusal. Fails closed: a connection whose row is not in the table
//! (its client gone) or a table that could not be read is refused like a stranger's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;

use super::fleetlock::{Kind, Refusal};
use super::peer;
use super::server::Identity;
use crate::words;

/// The owners of the clients connected to the server, from one read of the socket table, or
/// why it could not be read.
pub type Owners = Result<HashMap<SocketAddr, u32>, Arc<std::io::Error>>;

/// Whose refusals are counted together in the journal ([`super::refusals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Who {
    /// A local user, by uid.
    Uid(u32),
    /// A connection whose owner the table did not give.
    Unknown,
    /// The agent itself, beyond its own bound of connections at once.
    AgentBeyondBound,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::Uid(uid) => write!(f, "uid {uid}"),
            Who::Unknown => f.write_str("an unknown owner"),
            Who::AgentBeyondBound => f.write_str("the update agent beyond its bound"),
        }
    }
}

/// A connection refused at accept: who, and the answer written to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub who: Who,
    pub refusal: Refusal,
}

impl Refused {
    /// The whole HTTP answer, written without hyper (nothing of the request is parsed): the
    /// status, the JSON error body, and the connection's end.
    pub fn response(&self) -> Vec<u8> {
        let body = self.refusal.body();
        let status = self.refusal.status;
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes()
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Agent,
    Other(Refused),
}

/// The caller of the connection from `client` to `server`, from `owners`. Pure: only a row
/// owned by the agent's uid lets a connection through.
pub fn judge(owners: &Owners, client: SocketAddr, server: SocketAddr, id: &Identity) -> Caller {
    let (user, uid) = (&id.agent_user, id.agent_uid);
    let table = peer::table_path(&server);
    let (who, why) = match owners.as_ref().map(|o| o.get(&client)) {
        Ok(Some(&owner)) if owner == uid => return Caller::Agent,
        Ok(Some(&owner)) => (
            Who::Uid(owner),
            format!(
                "only the update agent (user {user}, uid {uid}) may ask this node's FleetLock \
                 server; this connection is from uid {owner}"
            ),
        ),
        Ok(None) => (
            Who::Unknown,
            format!(
                "the connection from {client} is not in {table}: its owner is unknown, and only \
                 the update agent (user {user}) may ask"
            ),
        ),
        Err(e) => (
            Who::Unknown,
            format!(
                "cannot read {table} to identify the caller ({e}); only the update agent (user \
                 {user}) may ask"
            ),
        ),
    };
    Caller::Other(Refused {
        who,
        refusal: Refusal::new(StatusCode::FORBIDDEN, Kind::NotTheAgent, why),
    })
}

/// The refusal of an agent connection beyond the agent's bound (`bound` at once).
pub fn beyond_bound(id: &Identity, bound: usize) -> Refused {
    Refused {
        who: Who::AgentBeyondBound,
        refusal: Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Kind::NoAnswer,
            format!(
                "the update agent (user {}) has {} open already, the most served at once; ask \
                 again once one has ended",
                id.agent_user,
                words::count(bound, "FleetLock connection", "FleetLock connections")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            node_id: "c988d2509fdf5cdcbed39037c56406fb".into(),
            agent_user: "zincati".into(),
            agent_uid: 978,
        }
    }

    const SERVER: &str = "127.0.0.1:9753";
    const CLIENT: &str = "127.0.0.1:50000";

    fn owners(rows: &[(&str, u32)]) -> Owners {
        Ok(rows.iter().map(|(a, u)| (a.parse().unwrap(), *u)).collect())
    }

    fn judged(owners: &Owners) -> Caller {
        judge(
            owners,
            CLIENT.parse().unwrap(),
            SERVER.parse().unwrap(),
            &identity(),
        )
    }

    #[test]
    fn only_a_row_owned_by_the_agents_uid_lets_a_connection_through() {
        assert_eq!(judged(&owners(&[(CLIENT, 978)])), Caller::Agent);
        let Caller::Other(r) = judged(&owners(&[(CLIENT, 65534), ("127.0.0.1:50001", 978)])) else {
            panic!("another user's connection was let through");
        };
        assert_eq!(r.who, Who::Uid(65534));
        assert_eq!(r.refusal.status, StatusCode::FORBIDDEN);
        assert_eq!(r.refusal.kind, Kind::NotTheAgent);
        assert_eq!(
            r.refusal.value,
            "only the update agent (user zincati, uid 978) may ask this node's FleetLock \
             server; this connection is from uid 65534"
        );
    }

    /// Fails closed: the planted bug "a connection whose row is missing is let through" and
    /// "a table that cannot be read lets everyone through" both fail here.
    #[test]
    fn a_missing_row_or_an_unreadable_table_refuses_the_connection() {
        let Caller::Other(missing) = judged(&owners(&[("127.0.0.1:50001", 978)])) else {
            panic!("a connection without a row was let through");
        };
        assert_eq!(missing.who, Who::Unknown);
        assert_eq!(missing.refusal.kind, Kind::NotTheAgent);
        assert_eq!(
            missing.refusal.value,
            "the connection from 127.0.0.1:50000 is not in /proc/net/tcp: its owner is \
             unknown, and only the update agent (user zincati) may ask"
        );
        let unreadable: Owners = Err(Arc::new(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied,
        )));
        let Caller::Other(r) = judged(&unreadable) else {
            panic!("an unreadable table let the connection through");
        };
        assert_eq!(r.who, Who::Unknown);
        assert!(
            r.refusal
                .value
                .starts_with("cannot read /proc/net/tcp to identify the caller (permission denied"),
            "{}",
            r.refusal.value
        );
    }

    #[test]
    fn a_refusal_is_a_whole_http_answer_that_closes_the_connection() {
        let Caller::Other(r) = judged(&owners(&[(CLIENT, 1000)])) else {
            panic!("let through");
        };
        let text = String::from_utf8(r.response()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(
            head.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["kind"], "caller_not_update_agent");
    }
}
