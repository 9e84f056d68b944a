//! Where a pull may go: the decisions behind every request, as pure functions.
//!
//! An Agent's author chooses the registry, and a registry chooses its redirects and its token
//! realm. Left alone, an HTTP client follows those anywhere: the operator would fetch any URL
//! (a port scan of the cluster, a read of internal services) for a namespace user. So every
//! hop — the first request, each redirect, the token realm — is checked here:
//!
//! - it stays on the registry's own host and port, or on a host the admin named as a registry
//!   delegate (a blob CDN, a token service);
//! - it is https, or http to a registry on the admin's insecure list;
//! - its addresses are public, unless the admin listed the host (insecure registries count as
//!   listed): loopback, private, link-local, shared (CGNAT) and other special addresses are
//!   refused. Names are checked after resolution (see `transport::Resolver`), so DNS cannot
//!   point a public name at an internal address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use reqwest::Url;

/// A host and port, as hops are compared: `ghcr.io` and `https://ghcr.io:443/` are one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Lowercase, IPv6 without brackets.
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// The endpoint of `url` (the scheme's default port when none is written).
    pub fn of(url: &Url) -> Option<Endpoint> {
        let host = url
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        Some(Endpoint {
            host,
            port: url.port_or_known_default()?,
        })
    }

    /// `host[:port]` as references and the admin write registries, the port defaulting to
    /// `scheme`'s; `None` for anything that is not an authority.
    pub fn parse(authority: &str, scheme: &str) -> Option<Endpoint> {
        let authority = authority.trim().trim_end_matches('/');
        let authority = authority
            .strip_prefix("http://")
            .or_else(|| authority.strip_prefix("https://"))
            .unwrap_or(authority);
        let url = Url::parse(&format!("{scheme}://{authority}/")).ok()?;
        (url.path() == "/" && url.username().is_empty())
            .then(|| Endpoint::of(&url))
            .flatten()
    }
}

/// The admin's network settings for registries (never an Agent's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// Registries spoken to over plain HTTP (and allowed at internal addresses).
    pub insecure: Vec<Endpoint>,
    /// Hosts a registry may redirect to or name as its token realm (https only): blob CDNs and
    /// token services of public registries.
    pub delegates: Vec<Endpoint>,
    /// Registries allowed at internal addresses over https (in-cluster registries with TLS).
    pub private_registries: Vec<Endpoint>,
    /// Whether internal addresses are refused for hosts not listed.
    pub refuse_internal: bool,
}

/// Why a hop was refused. Each has one fixed text: nothing of the response or the target goes
/// into an Agent's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The hop leaves the registry's host (or port) for one the admin did not name.
    OtherHost,
    /// Plain http to a registry not on the insecure list.
    PlainHttp,
    /// The host is or resolves to an internal address and is not listed.
    InternalAddress,
    /// A scheme other than http or https, or no host.
    BadUrl,
}

impl Refusal {
    pub fn text(self) -> &'static str {
        match self {
            Refusal::OtherHost => {
                "the registry sent the client to another host or port, which the operator's \
                 registry settings do not allow"
            }
            Refusal::PlainHttp => {
                "plain http to a registry that is not on the operator's insecure list"
            }
            Refusal::InternalAddress => {
                "the registry host is an internal address (loopback, private, link-local), \
                 which the operator's registry settings do not allow"
            }
            Refusal::BadUrl => "the registry sent the client to a URL that is not http(s)",
        }
    }
}

impl NetworkPolicy {
    /// The policy for the admin's lists (`host[:port]` each; entries that are no authority
    /// are dropped).
    pub fn new(
        insecure: &[String],
        delegates: &[String],
        private_registries: &[String],
        refuse_internal: bool,
    ) -> NetworkPolicy {
        let parse = |list: &[String], scheme| {
            list.iter()
                .filter_map(|a| Endpoint::parse(a, scheme))
                .collect()
        };
        NetworkPolicy {
            insecure: parse(insecure, "http"),
            delegates: parse(delegates, "https"),
            private_registries: parse(private_registries, "https"),
            refuse_internal,
        }
    }

    /// Where requests to `registry` (`host[:port]`, as references write it) start: http for
    /// insecure registries, https for every other.
    pub fn base_url(&self, registry: &str) -> Result<Url, Refusal> {
        let insecure =
            Endpoint::parse(registry, "http").is_some_and(|e| self.insecure.contains(&e));
        let scheme = if insecure { "http" } else { "https" };
        Url::parse(&format!("{scheme}://{registry}/")).map_err(|_| Refusal::BadUrl)
    }

    /// Whether `url` may be requested on behalf of the registry whose requests start at `base`
    /// (see [`Self::base_url`]). Literal addresses are judged here; names by the resolver.
    pub fn check_hop(&self, base: &Url, url: &Url) -> Result<(), Refusal> {
        let registry = Endpoint::of(base).ok_or(Refusal::BadUrl)?;
        let target = Endpoint::of(url).ok_or(Refusal::BadUrl)?;
        if target != registry && !self.delegates.contains(&target) {
            return Err(Refusal::OtherHost);
        }
        match url.scheme() {
            "https" => {}
            "http" if self.insecure.contains(&target) => {}
            "http" => return Err(Refusal::PlainHttp),
            _ => return Err(Refusal::BadUrl),
        }
        if !self.refuse_internal || self.listed().any(|e| *e == target) {
            return Ok(());
        }
        // A listed host on a port the admin did not list: another service of an internal host.
        if self.listed().any(|e| e.host == target.host) {
            return Err(Refusal::InternalAddress);
        }
        match target.host.parse::<IpAddr>() {
            Ok(ip) if is_internal(ip) => Err(Refusal::InternalAddress),
            _ => Ok(()),
        }
    }

    /// Whether `host` (a name, as the resolver sees it) may be reached at `ip`. Ports were
    /// judged by [`Self::check_hop`] before any name is resolved.
    pub fn address_allowed(&self, host: &str, ip: IpAddr) -> bool {
        !self.refuse_internal || !is_internal(ip) || self.listed().any(|e| e.host == host)
    }

    /// The registries the admin allowed at internal addresses: private and insecure ones.
    fn listed(&self) -> impl Iterator<Item = &Endpoint> {
        self.private_registries.iter().chain(&self.insecure)
    }
}

/// Addresses that are not on the public internet: where cluster services, node agents and
/// cloud metadata endpoints live.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal_v4(v4),
            None => is_internal_v6(v6),
        },
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        // Shared address space (RFC 6598): carrier NAT, and pod networks of some clusters.
        || (a == 100 && (64..128).contains(&b))
        // IETF protocol assignments (192.0.0.0/24) and benchmarking (198.18.0.0/15).
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        // Unique local fc00::/7 and link-local fe80::/10.
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        // Site-local fec0::/10 (deprecated, still routed internally somewhere).
        || (first & 0xffc0) == 0xfec0
        // NAT64 64:ff9b::/96 embeds an IPv4 address that may be internal.
        || (first == 0x64 && ip.segments()[1] == 0xff9b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> NetworkPolicy {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        NetworkPolicy::new(
            &list(&["127.0.0.1:5000", "registry.local"]),
            &list(&["auth.docker.io", "cdn.example"]),
            &list(&["10.0.0.7", "harbor.internal"]),
            true,
        )
    }

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    /// (registry as in the reference, target of the hop, verdict).
    type Case = (&'static str, &'static str, Result<(), Refusal>);

    fn judge(p: &NetworkPolicy, cases: &[Case]) {
        for (registry, target, want) in cases {
            let got = p
                .base_url(registry)
                .and_then(|base| p.check_hop(&base, &url(target)));
            assert_eq!(got, *want, "{registry} -> {target}");
        }
    }

    #[test]
    fn every_hop_is_judged_by_host_scheme_and_address() {
        use Refusal::*;
        judge(
            &policy(),
            &[
                // The registry itself, over https.
                ("ghcr.io", "https://ghcr.io/v2/a/manifests/v1", Ok(())),
                ("ghcr.io", "https://GHCR.io:443/token", Ok(())),
                // Another port of the same host is another service: a port scan.
                ("ghcr.io", "https://ghcr.io:8443/x", Err(OtherHost)),
                ("ghcr.io", "https://evil.example/x", Err(OtherHost)),
                ("ghcr.io", "https://169.254.169.254/latest", Err(OtherHost)),
                // Down to http (port 80, so another endpoint too).
                ("ghcr.io", "http://ghcr.io:443/v2/", Err(PlainHttp)),
                ("ghcr.io", "http://ghcr.io/v2/", Err(OtherHost)),
                // Insecure registries: http on their own endpoint only.
                ("127.0.0.1:5000", "http://127.0.0.1:5000/v2/", Ok(())),
                (
                    "127.0.0.1:5000",
                    "http://127.0.0.1:5001/v2/",
                    Err(OtherHost),
                ),
                (
                    "127.0.0.1:5000",
                    "http://localhost:5000/v2/",
                    Err(OtherHost),
                ),
                ("registry.local", "http://registry.local:80/v2/", Ok(())),
                ("registry.local:80", "http://registry.local/v2/", Ok(())),
                // Delegates the admin named: https only, any path.
                ("index.docker.io", "https://auth.docker.io/token", Ok(())),
                (
                    "index.docker.io",
                    "http://auth.docker.io:443/token",
                    Err(PlainHttp),
                ),
                ("index.docker.io", "https://cdn.example/blob", Ok(())),
                // Literal internal addresses, unless listed; a listed host on another port.
                ("10.0.0.8", "https://10.0.0.8/v2/", Err(InternalAddress)),
                ("10.0.0.7", "https://10.0.0.7/v2/", Ok(())),
                ("10.0.0.7:22", "https://10.0.0.7:22/", Err(InternalAddress)),
                (
                    "127.0.0.1:6000",
                    "https://127.0.0.1:6000/v2/",
                    Err(InternalAddress),
                ),
                (
                    "registry.local:22",
                    "https://registry.local:22/",
                    Err(InternalAddress),
                ),
                ("127.0.0.2", "https://127.0.0.2/v2/", Err(InternalAddress)),
                ("[::1]:5000", "https://[::1]:5000/v2/", Err(InternalAddress)),
                ("[fe80::1]", "https://[fe80::1]/v2/", Err(InternalAddress)),
                ("8.8.8.8", "https://8.8.8.8/v2/", Ok(())),
                // Not http(s).
                ("ghcr.io", "file:///etc/passwd", Err(BadUrl)),
                ("ghcr.io", "ftp://ghcr.io/x", Err(OtherHost)),
            ],
        );
    }

    #[test]
    fn internal_addresses_are_allowed_when_the_policy_is_off() {
        let p = NetworkPolicy {
            refuse_internal: false,
            ..policy()
        };
        judge(
            &p,
            &[
                ("10.0.0.8", "https://10.0.0.8/v2/", Ok(())),
                // The host and scheme rules still hold.
                (
                    "10.0.0.8",
                    "http://10.0.0.8:443/v2/",
                    Err(Refusal::PlainHttp),
                ),
                ("10.0.0.8", "https://10.0.0.9/v2/", Err(Refusal::OtherHost)),
            ],
        );
    }

    #[test]
    fn names_resolved_to_internal_addresses_need_a_listing() {
        let p = policy();
        let ip = |s: &str| s.parse::<IpAddr>().expect("test address");
        let cases = [
            ("ghcr.io", "140.82.112.33", true),
            ("ghcr.io", "10.96.0.1", false),
            ("ghcr.io", "169.254.169.254", false),
            ("harbor.internal", "10.96.0.1", true),
            ("registry.local", "192.168.1.4", true),
            ("localhost", "127.0.0.1", false),
        ];
        for (host, addr, want) in cases {
            assert_eq!(p.address_allowed(host, ip(addr)), want, "{host} at {addr}");
        }
    }

    #[test]
    fn internal_means_every_non_public_range() {
        let cases = [
            ("127.0.0.1", true),
            ("10.1.2.3", true),
            ("172.16.0.1", true),
            ("172.32.0.1", false),
            ("192.168.0.1", true),
            ("169.254.169.254", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("0.0.0.0", true),
            ("255.255.255.255", true),
            ("224.0.0.1", true),
            ("198.18.0.1", true),
            ("8.8.8.8", false),
            ("::1", true),
            ("::", true),
            ("fe80::1", true),
            ("fd00::1", true),
            ("fec0::1", true),
            ("::ffff:10.0.0.1", true),
            ("::ffff:8.8.8.8", false),
            ("64:ff9b::a00:1", true),
            ("2606:4700::1111", false),
        ];
        for (addr, want) in cases {
            let ip: IpAddr = addr.parse().expect("test address");
            assert_eq!(is_internal(ip), want, "{addr}");
        }
    }

    #[test]
    fn endpoints_are_compared_with_default_ports() {
        let e = |a: &str, scheme: &str| Endpoint::parse(a, scheme);
        assert_eq!(
            e("ghcr.io", "https"),
            Endpoint::of(&url("https://GHCR.io:443/x"))
        );
        assert_eq!(
            e("http://Registry.local:80/", "http"),
            e("registry.local", "http")
        );
        assert_eq!(
            e("[::1]:5000", "http"),
            Some(Endpoint {
                host: "::1".into(),
                port: 5000
            })
        );
        assert_eq!(e("a/b", "https"), None);
        assert_eq!(e("user@host", "https"), None);
    }
}
