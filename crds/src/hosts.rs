//! Spin-style network origins: `scheme://host[:port]`, `*` allowed as the whole leftmost label.
//!
//! A port left out means the scheme's default port (443 for https, 80 for http), as in Spin.
//! `*.` as the leftmost label matches one or more labels (`*.svc` matches `a.svc` and `a.b.svc`,
//! never `svc`); a bare `*` and wildcard IP addresses are rejected. Hosts are normalised as URLs
//! are (lower case, IDNA to punycode, IPv4 forms to dotted decimal, IPv6 compressed in
//! brackets), and must not end in a dot or hold an empty label.
//!
//! The executor enforces the same grammar (`ari_runtime::capability::allowlist`); a test there
//! checks both accept and reject the same entries, so an Agent the operator marks `Valid` is
//! one its executors can run.

use std::fmt;

use url::{Host, Url};

/// A parsed origin pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    pub scheme: String,
    /// Normalised host; may start with `*.`.
    pub host: String,
    pub port: u16,
}

/// Why an origin could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPatternError {
    #[error("missing scheme (expected scheme://host[:port])")]
    MissingScheme,
    #[error("unsupported scheme {0} (expected http or https)")]
    UnsupportedScheme(String),
    #[error("empty host")]
    EmptyHost,
    #[error("a path, query, fragment or userinfo is not allowed in an origin")]
    NotAnOrigin,
    #[error("invalid port in {0}")]
    BadPort(String),
    #[error("`*` is allowed only as the whole leftmost label of a domain name")]
    BadWildcard,
    #[error("invalid host: {0}")]
    BadHost(String),
}

impl HostPattern {
    /// Parses `scheme://host[:port]` (a trailing `/` is tolerated).
    pub fn parse(s: &str) -> Result<Self, HostPatternError> {
        let (scheme, rest) = s.split_once("://").ok_or(HostPatternError::MissingScheme)?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "https" && scheme != "http" {
            return Err(HostPatternError::UnsupportedScheme(scheme));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Err(HostPatternError::EmptyHost);
        }
        if rest.contains(['/', '?', '#', '@', '\\']) {
            return Err(HostPatternError::NotAnOrigin);
        }
        let (wildcard, concrete) = match rest.strip_prefix("*.") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        if concrete.contains('*') {
            return Err(HostPatternError::BadWildcard);
        }
        let url = Url::parse(&format!("{scheme}://{concrete}")).map_err(|e| match e {
            url::ParseError::InvalidPort => HostPatternError::BadPort(s.to_owned()),
            url::ParseError::EmptyHost => HostPatternError::EmptyHost,
            e => HostPatternError::BadHost(e.to_string()),
        })?;
        let host = match url.host() {
            Some(Host::Domain(d)) => {
                if d.split('.').any(str::is_empty) {
                    return Err(HostPatternError::BadHost(
                        "empty label (trailing dot or `..`)".into(),
                    ));
                }
                d.to_owned()
            }
            Some(_) if wildcard => return Err(HostPatternError::BadWildcard),
            Some(ip) => ip.to_string(),
            None => return Err(HostPatternError::EmptyHost),
        };
        let port = url
            .port_or_known_default()
            .ok_or_else(|| HostPatternError::BadPort(s.to_owned()))?;
        let host = if wildcard { format!("*.{host}") } else { host };
        Ok(Self { scheme, host, port })
    }

    /// Whether a concrete `scheme`, `host`, `port` is allowed by this pattern.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.scheme.eq_ignore_ascii_case(scheme)
            && self.port == port
            && host_matches(&self.host, &host.to_ascii_lowercase())
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|head| head.strip_suffix('.'))
            .is_some_and(|head| !head.is_empty()),
        None => pattern == host,
    }
}

/// Whether every origin `wanted` may denote is allowed by `grant` (a wildcard is covered only
/// by an equal or wider wildcard).
pub fn pattern_covers(grant: &HostPattern, wanted: &HostPattern) -> bool {
    grant.scheme == wanted.scheme
        && grant.port == wanted.port
        && (grant.host == wanted.host || host_matches(&grant.host, &wanted.host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        match HostPattern::parse(s) {
            Ok(p) => p,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn parse_fills_default_ports_and_lowercases() {
        assert_eq!(
            p("https://API.example.com"),
            HostPattern {
                scheme: "https".into(),
                host: "api.example.com".into(),
                port: 443
            }
        );
        assert_eq!(p("http://*.svc:8080").port, 8080);
        assert_eq!(p("http://x.svc/").port, 80);
        assert_eq!(p("HTTPS://Bücher.example").host, "xn--bcher-kva.example");
        assert_eq!(p("http://[0::1]").host, "[::1]");
        assert_eq!(p("http://2130706433:8080").host, "127.0.0.1");
    }

    #[test]
    fn parse_rejects_non_origins() {
        assert_eq!(
            HostPattern::parse("api.example.com"),
            Err(HostPatternError::MissingScheme)
        );
        assert!(matches!(
            HostPattern::parse("ftp://x"),
            Err(HostPatternError::UnsupportedScheme(_))
        ));
        assert_eq!(
            HostPattern::parse("https://x/path"),
            Err(HostPatternError::NotAnOrigin)
        );
        assert_eq!(
            HostPattern::parse("https://a.*.com"),
            Err(HostPatternError::BadWildcard)
        );
        assert_eq!(
            HostPattern::parse("https://x*.com"),
            Err(HostPatternError::BadWildcard)
        );
        assert!(matches!(
            HostPattern::parse("https://x:99999"),
            Err(HostPatternError::BadPort(_))
        ));
        for bad in [
            "https://*",
            "https://*:443",
            "https://*.127.0.0.1",
            "https://x.",
            "https://a..b",
            "https://exa mple.com",
            "https://x\\y",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcard_matches_subdomains_not_the_bare_suffix() {
        let g = p("http://*.svc:8080");
        assert!(g.matches("http", "a.svc", 8080));
        assert!(g.matches("http", "a.b.svc", 8080));
        assert!(!g.matches("http", "svc", 8080));
        assert!(!g.matches("http", "a.svc", 80));
        assert!(!g.matches("https", "a.svc", 8080));
        assert!(!g.matches("http", "evilsvc", 8080));
    }

    #[test]
    fn covers_requires_equal_or_wider_pattern() {
        assert!(pattern_covers(
            &p("https://*.example.com"),
            &p("https://api.example.com")
        ));
        assert!(pattern_covers(
            &p("https://*.example.com"),
            &p("https://*.example.com")
        ));
        assert!(pattern_covers(
            &p("https://*.example.com"),
            &p("https://*.a.example.com")
        ));
        assert!(!pattern_covers(
            &p("https://api.example.com"),
            &p("https://*.example.com")
        ));
        assert!(!pattern_covers(
            &p("https://api.example.com:8443"),
            &p("https://api.example.com")
        ));
    }
}
