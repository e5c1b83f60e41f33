//! Who is on the other end of a loopback TCP connection: the uid that owns the client's socket,
//! read from the kernel's socket tables `/proc/net/tcp` and `/proc/net/tcp6` (proc(5)).
//!
//! Both ends of a loopback connection are sockets of this host, so each has a row in those
//! tables: the client's row has the client's address as `local_address`, the server's as
//! `rem_address`, and the uid of the process that created the socket. Only the kernel writes
//! that uid, and a process that is not root cannot create a socket with another user's uid, so
//! it is an identity where the address (any local user can connect to loopback) is none.
//!
//! The uid is printed as the reader's user namespace sees it: the kernel maps it into the
//! namespace of whoever opened the table (`from_kuid_munged(seq_user_ns(f), sock_i_uid(sk))`,
//! `get_tcp4_sock` in Linux's net/ipv4/tcp_ipv4.c), and a uid that namespace does not map reads
//! as the overflow uid 65534. A server in a namespace that does not map the agent could not tell
//! it from anyone else: `userns.rs` refuses to start it there.
//!
//! Addresses are printed as the raw bytes of the address read as native-endian 32-bit words in
//! hex (`%08X` of each `__be32`), ports as big-endian numbers in hex.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The socket table listing `addr`'s family.
pub fn table_path(addr: &SocketAddr) -> &'static str {
    match addr {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    }
}

/// The owners of the client sockets connected to `server`, by client address, from the text of
/// a socket table: the rows whose remote address is `server` (the server's own rows have it as
/// their local address, and the listener's remote address is all zeros). A client that has gone
/// has no row, and neither has one whose socket no process holds any more: a row with inode 0
/// (a connection closed by its client, orphaned or in TIME_WAIT, `get_timewait4_sock` printing
/// uid 0 for the latter) could otherwise pass a request its client sent before it closed as
/// root's, or have a new connection that reuses its address judged by it.
pub fn owners(table: &str, server: SocketAddr) -> HashMap<SocketAddr, u32> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl, local_address, rem_address, st, tx_queue:rx_queue, tr:tm->when, retrnsmt,
            // uid, timeout, inode.
            let (local, remote) = (address(fields.get(1)?)?, address(fields.get(2)?)?);
            let (uid, inode) = (fields.get(7)?.parse().ok()?, *fields.get(9)?);
            (remote == server && inode != "0").then_some((local, uid))
        })
        .collect()
}

/// [`owners`] of the table listing `server`'s family, read now: one read for every connection
/// accepted at once. The server listens on one loopback address of one family, so both ends of
/// each connection are in that table.
pub async fn read_owners(server: SocketAddr) -> std::io::Result<HashMap<SocketAddr, u32>> {
    let table = tokio::fs::read_to_string(table_path(&server)).await?;
    Ok(owners(&table, server))
}

/// `0100007F:2611` or the 32-digit IPv6 form, into an address.
fn address(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words = (0..ip.len() / 8)
        .map(|i| {
            ip.get(8 * i..8 * i + 8)
                .and_then(|w| u32::from_str_radix(w, 16).ok())
        })
        .collect::<Option<Vec<u32>>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match (ip.len(), bytes.len()) {
        (8, 4) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        (32, 16) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words printed as the kernel prints them on this host's byte order.
    fn word(bytes: [u8; 4]) -> String {
        format!("{:08X}", u32::from_ne_bytes(bytes))
    }

    #[test]
    fn the_client_row_gives_its_owner_and_the_server_and_closed_rows_do_not() {
        let lo = word([127, 0, 0, 1]);
        // The listener, the server's end (root) and the client's end (uid 980) of one connection;
        // then a TIME_WAIT row (uid 0) an earlier connection from the same port left, and a
        // client of uid 65534 that sent its request and closed (FIN_WAIT1, no inode).
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  \
             timeout inode\n\
             \x20  0: {lo}:2611 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 \
             0 100 1 0 100 0 0 10 0\n\
             \x20  1: {lo}:2611 {lo}:C350 01 00000000:00000000 00:00000000 00000000     0 \
             0 101 1 0 20 4 30 10 -1\n\
             \x20  2: {lo}:C350 {lo}:2611 01 00000000:00000000 00:00000000 00000000   980 \
             0 102 1 0 20 4 30 10 -1\n\
             \x20  3: {lo}:C350 {lo}:2611 06 00000000:00000000 03:00000D1C 00000000     0 \
             0 0 3 0000000000000000\n\
             \x20  4: {lo}:C351 {lo}:2611 04 00000051:00000000 01:00000014 00000000 65534 \
             0 0 1 0000000000000000 20 4 30 10 -1\n"
        );
        let server: SocketAddr = "127.0.0.1:9745".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        let owners = owners(&table, server);
        assert_eq!(owners.get(&client), Some(&980));
        // The server's own end, the listener and the closed connection are not its clients.
        assert_eq!(owners.len(), 1, "{owners:?}");
        let other: SocketAddr = "127.0.0.1:50001".parse().unwrap();
        assert_eq!(owners.get(&other), None);
    }

    #[test]
    fn ipv6_rows_are_read_word_by_word() {
        let one = [
            word([0, 0, 0, 0]),
            word([0, 0, 0, 0]),
            word([0, 0, 0, 0]),
            word([0, 0, 0, 1]),
        ]
        .concat();
        let table = format!(
            "header\n   0: {one}:C350 {one}:2611 01 00000000:00000000 00:00000000 00000000  \
             1000 0 7 1\n"
        );
        let client: SocketAddr = "[::1]:50000".parse().unwrap();
        assert_eq!(
            owners(&table, "[::1]:9745".parse().unwrap()).get(&client),
            Some(&1000)
        );
    }

    /// The kernel as the oracle: a real loopback connection of this process is owned by our uid.
    #[tokio::test]
    async fn a_real_connection_is_owned_by_this_process_user() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(server).await.unwrap();
        let (_accepted, peer) = listener.accept().await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert_eq!(
            read_owners(server).await.unwrap().get(&peer),
            Some(&nix::unistd::geteuid().as_raw())
        );
    }
}
