//! Spin-style network origins: `scheme://host[:port]`, `*` allowed as the leftmost host label.
//!
//! A port left out means the scheme's default port (443 for https, 80 for http), as in Spin.
//! `*` as the leftmost label matches one or more labels (`*.svc` matches `a.svc` and `a.b.svc`);
//! a host of just `*` matches any host.

use std::fmt;

/// A parsed origin pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    pub scheme: String,
    /// Lowercase host; may start with `*.` or be `*`.
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
    #[error("a path, query or userinfo is not allowed in an origin")]
    NotAnOrigin,
    #[error("invalid port {0}")]
    BadPort(String),
    #[error("`*` is allowed only as the whole leftmost label")]
    BadWildcard,
}

impl HostPattern {
    /// Parses `scheme://host[:port]` (a trailing `/` is tolerated).
    pub fn parse(s: &str) -> Result<Self, HostPatternError> {
        let (scheme, rest) = s.split_once("://").ok_or(HostPatternError::MissingScheme)?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            _ => return Err(HostPatternError::UnsupportedScheme(scheme)),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(HostPatternError::NotAnOrigin);
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .map_err(|_| HostPatternError::BadPort(p.to_owned()))?,
            ),
            None => (rest, default_port),
        };
        if host.is_empty() {
            return Err(HostPatternError::EmptyHost);
        }
        let host = host.to_ascii_lowercase();
        let labels: Vec<&str> = host.split('.').collect();
        if labels.iter().any(|l| l.is_empty()) {
            return Err(HostPatternError::EmptyHost);
        }
        if labels.iter().skip(1).any(|l| l.contains('*'))
            || (labels[0].contains('*') && labels[0] != "*")
        {
            return Err(HostPatternError::BadWildcard);
        }
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
    if pattern == "*" {
        return true;
    }
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
