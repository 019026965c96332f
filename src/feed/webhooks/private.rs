//! Which addresses a webhook may not reach: everything the IANA special-purpose address
//! registries (IPv4 and IPv6) do not mark globally reachable, plus multicast.
//!
//! An attacker who controls a webhook's DNS picks the address, so any address that is not
//! plainly on the public internet is refused: loopback and private ranges, but also the
//! benchmarking, documentation, reserved and protocol-assignment blocks, which some networks
//! route internally. An IPv6 address that carries an IPv4 one (IPv4-mapped, IPv4-compatible,
//! NAT64's well-known prefix, 6to4) is judged by the IPv4 address it carries, since that is
//! where a translator or relay would connect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether an address is one a webhook may not reach unless it allows private targets.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_is_private(v4),
        IpAddr::V6(v6) => v6_is_private(v6),
    }
}

/// IPv4 blocks that are not globally reachable (the IPv4 special-purpose registry, multicast
/// and the reserved class E), as (network, prefix length).
const V4_BLOCKS: &[([u8; 4], u8)] = &[
    ([0, 0, 0, 0], 8),       // "this network"
    ([10, 0, 0, 0], 8),      // private
    ([100, 64, 0, 0], 10),   // carrier-grade NAT
    ([127, 0, 0, 0], 8),     // loopback
    ([169, 254, 0, 0], 16),  // link-local, where cloud metadata lives
    ([172, 16, 0, 0], 12),   // private
    ([192, 0, 0, 0], 24),    // IETF protocol assignments (DS-Lite, NAT64 discovery, ...)
    ([192, 0, 2, 0], 24),    // documentation (TEST-NET-1)
    ([192, 88, 99, 0], 24),  // the deprecated 6to4 relay anycast
    ([192, 168, 0, 0], 16),  // private
    ([198, 18, 0, 0], 15),   // benchmarking
    ([198, 51, 100, 0], 24), // documentation (TEST-NET-2)
    ([203, 0, 113, 0], 24),  // documentation (TEST-NET-3)
    ([224, 0, 0, 0], 4),     // multicast
    ([240, 0, 0, 0], 4),     // reserved, and the limited broadcast 255.255.255.255
];

fn v4_is_private(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    V4_BLOCKS.iter().any(|&(net, len)| {
        let mask = u32::MAX << (32 - u32::from(len));
        bits & mask == u32::from(Ipv4Addr::from(net))
    })
}

/// IPv6 blocks inside the global unicast range 2000::/3 that are not globally reachable.
const V6_BLOCKS: &[(u128, u8)] = &[
    (0x2001_0000 << 96, 23), // IETF protocol assignments (Teredo, benchmarking, ORCHID)
    (0x2001_0db8 << 96, 32), // documentation
    (0x3fff_0000 << 96, 20), // documentation (RFC 9637)
];

/// The parts of 2001::/23 that the registry marks globally reachable (anycast services and
/// overlay identifiers a public host may legitimately use).
const V6_GLOBAL_EXCEPTIONS: &[(u128, u8)] = &[
    ((0x2001_0001 << 96) | 1, 128),             // PCP anycast
    ((0x2001_0001 << 96) | 2, 128),             // TURN anycast
    ((0x2001_0001 << 96) | 3, 128),             // DNS-SD service registration anycast
    (0x2001_0003 << 96, 32),                    // AMT
    ((0x2001_0004 << 96) | (0x0112 << 80), 48), // AS112-v6
    (0x2001_0020 << 96, 28),                    // ORCHIDv2
    (0x2001_0030 << 96, 28),                    // drone remote ID
];

fn in_block(bits: u128, (net, len): (u128, u8)) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    bits & mask == net
}

fn v6_is_private(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return v4_is_private(v4);
    }
    let bits = u128::from(ip);
    // Outside 2000::/3 nothing is globally routed: loopback, unspecified, the discard and
    // dummy prefixes (100::/64, 100:0:0:1::/64), NAT64's local-use prefix (64:ff9b:1::/48,
    // whose IPv4 sits wherever the operator chose), SRv6 (5f00::/16), unique-local (fc00::/7),
    // link-local (fe80::/10), site-local (fec0::/10) and multicast (ff00::/8) are all there.
    if !in_block(bits, (0x2 << 124, 3)) {
        return true;
    }
    V6_BLOCKS.iter().any(|&block| in_block(bits, block))
        && !V6_GLOBAL_EXCEPTIONS
            .iter()
            .any(|&block| in_block(bits, block))
}

/// The IPv4 address an IPv6 address carries, where its prefix says where it is: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated but still parsed), NAT64's
/// well-known prefix (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::/48`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low = Ipv4Addr::from(bits as u32);
    if in_block(bits, (0xffff << 32, 96)) || in_block(bits, (0, 96)) {
        return Some(low);
    }
    if in_block(bits, (0x0064_ff9b << 96, 96)) {
        return Some(low);
    }
    if in_block(bits, (0x2002 << 112, 16)) {
        return Some(Ipv4Addr::from((bits >> 80) as u32));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private(ip: &str) -> bool {
        is_private(ip.parse().unwrap())
    }

    #[test]
    fn special_purpose_ipv4_blocks_are_refused() {
        for ip in [
            "0.1.2.3",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.0.170",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(private(ip), "{ip} is refused");
        }
    }

    #[test]
    fn public_ipv4_addresses_are_allowed() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "192.0.3.1",
            "192.31.196.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.255",
        ] {
            assert!(!private(ip), "{ip} is allowed");
        }
    }

    #[test]
    fn special_purpose_ipv6_blocks_are_refused() {
        for ip in [
            "::",
            "::1",
            "100::1",
            "100:0:0:1::1",
            "64:ff9b:1::808:808",
            "2001::1",
            "2001:2::1",
            "2001:10::1",
            "2001:1ff::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "ff0e::1",
        ] {
            assert!(private(ip), "{ip} is refused");
        }
    }

    #[test]
    fn an_embedded_ipv4_is_judged_as_ipv4() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::169.254.169.254",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::192.168.0.1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "2002:c0a8:101:1::1",
        ] {
            assert!(private(ip), "{ip} is refused");
        }
        for ip in [
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(!private(ip), "{ip} is allowed");
        }
    }

    #[test]
    fn public_ipv6_addresses_are_allowed() {
        for ip in [
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001::1",
            "2001:1::1",
            "2001:1::2",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:200::1",
            "2620:4f:8000::1",
        ] {
            assert!(!private(ip), "{ip} is allowed");
        }
    }
}
