//! Who sent a notice, for its rate limit: the credential it carried and the network it came from.
//!
//! One token is often shared by several runtimes (replicas of an agent), so the credential alone would let one
//! of them, flooding, starve the others; the address alone would let everyone behind one NAT share a quota. The
//! key is both.
//!
//! - **The credential** is the `Authorization` header's value, hashed with a key drawn at random by each server
//!   (`RandomState`): the secret itself is never kept, and a client cannot aim its hashes at another's. Without
//!   the header (another authentication scheme, or none), every client has the same credential and they are told
//!   apart by address only.
//! - **The address** is the peer's, from axum's `ConnectInfo<SocketAddr>`: present when the router is served
//!   with `into_make_service_with_connect_info::<SocketAddr>()`. Served without it, clients are told apart by
//!   their credential only (logged once). An IPv6 client is keyed on its /64, the block one host is usually
//!   given (else one host would have 2^64 quotas); an IPv4-mapped address is its IPv4 one. Behind a reverse
//!   proxy, every client has the proxy's address: put the real one in `ConnectInfo<SocketAddr>` with a layer of
//!   your own (from the proxy's `Forwarded` header) before the tool server's routes.

use std::{
    hash::{BuildHasher, RandomState},
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::atomic::{AtomicBool, Ordering},
};

use axum::extract::ConnectInfo;
use http::{header, Extensions, HeaderMap};

/// A client of the rate limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum ClientKey {
    /// One client: its credential's hash and its network (`None` when the server does not know addresses).
    Client {
        credential: u64,
        network: Option<IpAddr>,
    },
    /// Every client that came while the table of clients was full: they share one quota (see
    /// `client_limits`).
    Overflow,
}

/// Tells clients apart: one per server, with its own hashing key.
#[derive(Debug, Default)]
pub(super) struct ClientKeys {
    credentials: RandomState,
    // Set once the server was found served without the peers' addresses, so that it is said once.
    warned_no_address: AtomicBool,
}

impl ClientKeys {
    /// The client that sent a request of these headers and extensions.
    pub(super) fn of(&self, headers: &HeaderMap, extensions: &Extensions) -> ClientKey {
        let credential = self.credentials.hash_one(
            headers
                .get(header::AUTHORIZATION)
                .map(|value| value.as_bytes()),
        );
        let network = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| network_of(peer.ip()));
        if network.is_none() && !self.warned_no_address.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the RAP tool server is served without the peers' addresses (serve it with \
                 `into_make_service_with_connect_info::<SocketAddr>()`): its rate limits tell clients apart by \
                 their credential only"
            );
        }
        ClientKey::Client {
            credential,
            network,
        }
    }
}

/// The network a client is keyed on: its IPv4 address, or its IPv6 /64.
fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};

    use axum::extract::ConnectInfo;

    use super::{ClientKey, ClientKeys};

    fn key(keys: &ClientKeys, authorization: Option<&str>, peer: Option<&str>) -> ClientKey {
        let mut request = http::Request::new(());
        if let Some(value) = authorization {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value.parse().unwrap());
        }
        if let Some(peer) = peer {
            let peer: SocketAddr = peer.parse().unwrap();
            request.extensions_mut().insert(ConnectInfo(peer));
        }
        keys.of(request.headers(), request.extensions())
    }

    fn network(key: ClientKey) -> Option<std::net::IpAddr> {
        match key {
            ClientKey::Client { network, .. } => network,
            ClientKey::Overflow => panic!("not a client"),
        }
    }

    #[test]
    fn the_credential_and_the_address_both_tell_clients_apart() {
        let keys = ClientKeys::default();
        let a = key(&keys, Some("Bearer one"), Some("127.0.0.1:1000"));
        assert_eq!(
            a,
            key(&keys, Some("Bearer one"), Some("127.0.0.1:2000")),
            "another connection of the same host is the same client"
        );
        assert_ne!(a, key(&keys, Some("Bearer two"), Some("127.0.0.1:1000")));
        assert_ne!(a, key(&keys, Some("Bearer one"), Some("127.0.0.2:1000")));
        assert_ne!(
            key(
                &ClientKeys::default(),
                Some("Bearer one"),
                Some("127.0.0.1:1000")
            ),
            a,
            "each server hashes with a key of its own"
        );
    }

    #[test]
    fn an_ipv6_client_is_its_64_and_a_mapped_one_its_ipv4() {
        let keys = ClientKeys::default();
        let one = key(&keys, None, Some("[2001:db8:1:2:aaaa::1]:80"));
        let other = key(&keys, None, Some("[2001:db8:1:2:bbbb::9]:80"));
        assert_eq!(one, other);
        assert_eq!(network(one), Some("2001:db8:1:2::".parse().unwrap()));
        assert_ne!(one, key(&keys, None, Some("[2001:db8:1:3::1]:80")));
        let mapped = key(&keys, None, Some("[::ffff:10.1.2.3]:80"));
        assert_eq!(network(mapped), Some(Ipv4Addr::new(10, 1, 2, 3).into()));
    }

    #[test]
    fn without_the_peers_address_clients_are_their_credential() {
        let keys = ClientKeys::default();
        let one = key(&keys, Some("Bearer one"), None);
        assert_eq!(network(one), None);
        assert_eq!(one, key(&keys, Some("Bearer one"), None));
        assert_ne!(one, key(&keys, Some("Bearer two"), None));
    }
}
