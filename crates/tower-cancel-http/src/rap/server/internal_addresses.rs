//! Which addresses a result may not be POSTed to when the server refuses private callbacks: those that reach the
//! server's own host or its private network rather than the internet (a `callback_url` is chosen by the
//! runtime, so without this a token holder could aim results, and their retries, at a cloud's metadata service
//! or an admin port on localhost).
//!
//! IPv4: "this network" 0/8, private 10/8, 172.16/12 and 192.168/16, shared (CGNAT) 100.64/10, loopback 127/8,
//! link-local 169.254/16 (cloud metadata services), the IETF's 192.0.0/24, the documentation and benchmarking
//! ranges, multicast 224/4 and the reserved 240/4 (broadcast included). IPv6: unspecified, loopback, unique
//! local fc00::/7, link-local fe80::/10, the old site-local fec0::/10, multicast, discard 100::/64,
//! documentation 2001:db8::/32, NAT64's local-use 64:ff9b:1::/48; and an IPv4 address carried in IPv6
//! (IPv4-mapped, IPv4-compatible, NAT64's 64:ff9b::/96, 6to4's 2002::/16) is judged as that IPv4 address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is one a result is not POSTed to when private callbacks are refused.
pub(super) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    const RANGES: [([u8; 4], u32); 15] = [
        ([0, 0, 0, 0], 8),
        ([10, 0, 0, 0], 8),
        ([100, 64, 0, 0], 10),
        ([127, 0, 0, 0], 8),
        ([169, 254, 0, 0], 16),
        ([172, 16, 0, 0], 12),
        ([192, 0, 0, 0], 24),
        ([192, 0, 2, 0], 24),
        ([192, 88, 99, 0], 24),
        ([192, 168, 0, 0], 16),
        ([198, 18, 0, 0], 15),
        ([198, 51, 100, 0], 24),
        ([203, 0, 113, 0], 24),
        ([224, 0, 0, 0], 4),
        ([240, 0, 0, 0], 4),
    ];
    let ip = u32::from(ip);
    RANGES.iter().any(|&(network, bits)| {
        let mask = u32::MAX << (32 - bits);
        ip & mask == u32::from_be_bytes(network)
    })
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_internal_v4(v4);
    }
    const RANGES: [(u128, u32); 9] = [
        (0, 128),                                   // ::, unspecified
        (1, 128),                                   // ::1, loopback
        (0xfc00 << 112, 7),                         // unique local
        (0xfe80 << 112, 10),                        // link-local
        (0xfec0 << 112, 10),                        // site-local (deprecated)
        (0xff00 << 112, 8),                         // multicast
        (0x0100 << 112, 64),                        // discard-only
        (0x2001_0db8 << 96, 32),                    // documentation
        ((0x0064_ff9b << 96) | (0x0001 << 80), 48), // NAT64, local use
    ];
    let ip = u128::from(ip);
    RANGES.iter().any(|&(network, bits)| {
        let mask = u128::MAX << (128 - bits);
        ip & mask == network
    })
}

/// The IPv4 address an IPv6 one stands for, if any: where a connection to it would end up.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from(bits as u32);
    match bits >> 32 {
        // ::ffff:a.b.c.d, mapped.
        0xffff => Some(low32),
        // ::a.b.c.d, compatible (deprecated); :: and ::1 are judged as themselves.
        0 if bits > 1 => Some(low32),
        // 64:ff9b::a.b.c.d, NAT64's well-known prefix.
        prefix if prefix == 0x0064_ff9b << 64 => Some(low32),
        _ if bits >> 112 == 0x2002 => Some(Ipv4Addr::from((bits >> 80) as u32)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::is_internal;

    #[test]
    fn internal_addresses_are_refused() {
        for ip in [
            "127.0.0.1",
            "127.255.1.2",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.0.192",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "2002:7f00:0001::1",
            "2001:db8::1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip} is internal");
        }
    }

    #[test]
    fn public_addresses_are_not() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip} is public");
        }
    }
}
