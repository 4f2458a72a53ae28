//! No calls into private networks (CONTRACT §10): the addresses an endpoint may be sent to, the
//! check of a URL at creation, and the DNS resolver of the dispatcher's HTTP client, which
//! refuses a name that resolves to an address outside the rule at every connection (DNS can
//! change between creation and sending).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// How long a name may take to resolve at creation.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which addresses endpoints may reach: every public one, and the private ones the operator
/// allowed (`HERALD_WEBHOOK_ALLOWED_NETWORKS`).
#[derive(Clone, Debug, Default)]
pub struct NetworkRule {
    allowed: Arc<Vec<IpNet>>,
}

impl NetworkRule {
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Self { allowed: Arc::new(allowed) }
    }

    /// Whether an address may be connected to.
    pub fn permits(&self, ip: IpAddr) -> bool {
        !is_private(ip) || self.allowed.iter().any(|net| net.contains(&ip))
    }

    /// The address `host` names if it is an IP literal (`[…]` for IPv6, as in a URL), which no
    /// resolver sees.
    pub fn literal(host: &str) -> Option<IpAddr> {
        host.trim_start_matches('[').trim_end_matches(']').parse().ok()
    }

    /// Every address of `host` (a name or a literal), or why it may not be called.
    pub async fn check_host(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let addresses: Vec<SocketAddr> = match Self::literal(host) {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => {
                match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
                    Ok(Ok(found)) => found.collect(),
                    Ok(Err(_)) => return Err(format!("`{host}` does not resolve")),
                    Err(_) => {
                        return Err(format!(
                            "`{host}` did not resolve within {}s",
                            RESOLVE_TIMEOUT.as_secs()
                        ));
                    }
                }
            }
        };
        if addresses.is_empty() {
            return Err(format!("`{host}` does not resolve"));
        }
        match addresses.iter().find(|a| !self.permits(a.ip())) {
            Some(refused) => Err(format!(
                "resolves to {}, a loopback, private, link-local, CGNAT or multicast address \
                 (HERALD_WEBHOOK_ALLOWED_NETWORKS can allow it)",
                refused.ip()
            )),
            None => Ok(addresses),
        }
    }
}

/// Loopback, private, link-local, CGNAT, multicast, unspecified, broadcast and reserved ranges,
/// IPv4 and IPv6 (an IPv4-mapped IPv6 address counts as its IPv4 address).
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_private_v4(v4),
            None => is_private_v6(v6),
        },
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        // CGNAT, 100.64.0.0/10.
        || (a == 100 && (64..128).contains(&b))
        // Reserved, 240.0.0.0/4.
        || a >= 240
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // Unique local, fc00::/7.
        || (first & 0xfe00) == 0xfc00
        // Link-local, fe80::/10.
        || (first & 0xffc0) == 0xfe80
        // NAT64 (64:ff9b::/96) and IPv4-compatible addresses reach IPv4 hosts: judge those.
        || (ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && is_private_v4(embedded_v4(ip)))
        || (ip.segments()[..6] == [0, 0, 0, 0, 0, 0] && is_private_v4(embedded_v4(ip)))
}

fn embedded_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let [.., a, b, c, d] = ip.octets();
    Ipv4Addr::new(a, b, c, d)
}

/// The dispatcher's DNS resolver: the system's, refusing a name with any address the rule does
/// not permit (so a name cannot mix a public address with a private one).
pub struct GuardedResolver(pub NetworkRule);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let rule = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(refused) = found.iter().find(|a| !rule.permits(a.ip())) {
                return Err(
                    format!("refused: `{host}` resolves to {}, a private address", refused.ip()).into()
                );
            }
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges_are_refused_and_public_ones_permitted() {
        let rule = NetworkRule::default();
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!rule.permits(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "100.128.0.1", "2606:2800:220:1::1", "8.8.8.8"] {
            assert!(rule.permits(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn allowed_networks_open_their_ranges_only() {
        let rule = NetworkRule::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(rule.permits("127.0.0.1".parse().unwrap()));
        assert!(!rule.permits("10.0.0.1".parse().unwrap()));
    }

    #[tokio::test]
    async fn literals_and_names_are_checked() {
        let rule = NetworkRule::default();
        assert!(rule.check_host("10.0.0.1", 80).await.is_err());
        assert!(rule.check_host("[::1]", 80).await.is_err());
        assert!(rule.check_host("localhost", 80).await.is_err());
        let open = NetworkRule::new(vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]);
        assert!(open.check_host("localhost", 80).await.is_ok());
    }
}
