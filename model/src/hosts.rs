//! The network allow-list grammar: Spin-style origins `scheme://host[:port]`, `*` allowed as
//! the whole leftmost label. One implementation for the operator (validating an Agent's
//! `network.allowedHosts`, admitting a Task's `requirements.hosts`) and the executor (enforcing
//! every request and redirect hop), so an Agent the operator marks `Valid` is exactly one its
//! executors can run, and a host a Task was admitted for is one its requests may reach.
//!
//! A port left out means the scheme's default port (443 for https, 80 for http), as in Spin.
//! `*.` as the leftmost label matches one or more labels (`*.svc` matches `a.svc` and `a.b.svc`,
//! never `svc`); a bare `*` and wildcard IP addresses are rejected. Hosts are normalised as URLs
//! are (lower case, IDNA to punycode, IPv4 forms to dotted decimal, IPv6 compressed in
//! brackets), and must not end in a dot or hold an empty label: `example.com.` is another DNS
//! name than `example.com` (no search domains), so it would grant what the user did not mean.
//! Entries are not trimmed: surrounding whitespace is an error, not a silent fix.

use std::borrow::Cow;
use std::fmt;

use url::{Host, Url};

/// A parsed origin pattern; only constructible by [`HostPattern::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: String,
    /// Normalised host; a wildcard keeps its `*.` prefix.
    host: String,
    port: u16,
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

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The normalised host (`*.suffix` for a wildcard).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, the scheme's default when the entry left it out.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether a concrete `scheme`, `host`, `port` is allowed by this pattern.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        self.scheme.eq_ignore_ascii_case(scheme)
            && self.port == port
            && host_matches(&self.host, &host)
    }

    /// Whether an already parsed `url` is allowed by this pattern.
    pub fn matches_url(&self, url: &Url) -> bool {
        match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => self.matches(url.scheme(), host, port),
            _ => false,
        }
    }

    /// Whether every origin `wanted` may denote is allowed by this pattern (a wildcard is
    /// covered only by an equal or wider wildcard).
    pub fn covers(&self, wanted: &HostPattern) -> bool {
        self.scheme == wanted.scheme
            && self.port == wanted.port
            && (self.host == wanted.host || host_matches(&self.host, &wanted.host))
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

/// Whether every origin `wanted` may denote is allowed by `grant` (see [`HostPattern::covers`]).
pub fn pattern_covers(grant: &HostPattern, wanted: &HostPattern) -> bool {
    grant.covers(wanted)
}

/// An allow-list entry that does not parse, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{entry}`: {error}")]
pub struct BadEntry {
    pub entry: String,
    pub error: HostPatternError,
}

/// Why a URL is refused by an [`AllowList`] (the text is the guest's denial message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("host not allowed: {origin}")]
    NotAllowed { origin: String },
}

/// A validated allow-list: every entry of a network grant, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    patterns: Vec<HostPattern>,
}

impl AllowList {
    /// Parses every entry; the first bad one fails the whole list (a typo fails the grant
    /// instead of silently denying, or allowing, traffic later).
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, BadEntry> {
        let patterns = entries
            .iter()
            .map(|e| {
                HostPattern::parse(e.as_ref()).map_err(|error| BadEntry {
                    entry: e.as_ref().to_owned(),
                    error,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// The parsed entries, in order.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.patterns
    }

    /// Parses `url` and checks it; the parsed URL is what the client must use, so the
    /// connection goes where the check looked.
    pub fn check(&self, url: &str) -> Result<Url, Refused> {
        let parsed = Url::parse(url).map_err(|e| Refused::InvalidUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        if self.patterns.iter().any(|p| p.matches_url(&parsed)) {
            Ok(parsed)
        } else {
            Err(Refused::NotAllowed {
                origin: parsed.origin().ascii_serialization(),
            })
        }
    }

    /// Whether every origin `wanted` may denote is allowed by some entry.
    pub fn covers(&self, wanted: &HostPattern) -> bool {
        self.patterns.iter().any(|g| g.covers(wanted))
    }
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
        let api = p("https://API.example.com");
        assert_eq!(
            (api.scheme(), api.host(), api.port()),
            ("https", "api.example.com", 443)
        );
        assert_eq!(p("HTTPS://api.example.com").scheme(), "https");
        assert_eq!(p("http://*.svc:8080").port(), 8080);
        assert_eq!(p("http://*.svc:8080").host(), "*.svc");
        assert_eq!(p("http://x.svc/").port(), 80);
        assert_eq!(p("HTTPS://Bücher.example").host(), "xn--bcher-kva.example");
        assert_eq!(p("http://[0::1]").host(), "[::1]");
        assert_eq!(p("http://2130706433:8080").host(), "127.0.0.1");
        assert_eq!(p("http://*.svc:8080").to_string(), "http://*.svc:8080");
    }

    #[test]
    fn parse_rejects_non_origins() {
        let table: &[(&str, HostPatternError)] = &[
            ("api.example.com", HostPatternError::MissingScheme),
            ("HTTP//localhost", HostPatternError::MissingScheme),
            ("ftp://x", HostPatternError::UnsupportedScheme("ftp".into())),
            (
                "*://example.com",
                HostPatternError::UnsupportedScheme("*".into()),
            ),
            ("https://", HostPatternError::EmptyHost),
            ("https://x/path", HostPatternError::NotAnOrigin),
            ("https://example.com?x=1", HostPatternError::NotAnOrigin),
            ("https://example.com#frag", HostPatternError::NotAnOrigin),
            ("https://user@example.com", HostPatternError::NotAnOrigin),
            ("https://x\\y", HostPatternError::NotAnOrigin),
            ("https://a.*.com", HostPatternError::BadWildcard),
            ("https://x*.com", HostPatternError::BadWildcard),
            ("https://*example.com", HostPatternError::BadWildcard),
            ("https://*.*.example.com", HostPatternError::BadWildcard),
            ("https://*.127.0.0.1", HostPatternError::BadWildcard),
            ("https://*.[::1]", HostPatternError::BadWildcard),
            (
                "https://x:99999",
                HostPatternError::BadPort("https://x:99999".into()),
            ),
        ];
        for (entry, want) in table {
            assert_eq!(HostPattern::parse(entry).as_ref(), Err(want), "{entry}");
        }
        for bad in [
            "https://*",
            "https://*:443",
            "https://x.",
            "https://a..b",
            "https://exa mple.com",
            "https://example.com:abc",
            "http://localhost:0x50",
            "http://localhost:-1",
            "file:///etc/passwd",
            " https://example.com",
            "\rhttp://*.svc:",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allowlist_matching_table() {
        // (entry, url, allowed)
        let table: &[(&str, &str, bool)] = &[
            (
                "https://api.example.com",
                "https://api.example.com/v1?q=1",
                true,
            ),
            ("https://api.example.com", "https://API.Example.com/", true),
            (
                "https://api.example.com",
                "https://api.example.com:443/",
                true,
            ),
            (
                "https://api.example.com",
                "https://api.example.com:8443/",
                false,
            ),
            ("https://api.example.com", "http://api.example.com/", false),
            ("https://api.example.com", "https://example.com/", false),
            (
                "https://api.example.com",
                "https://api.example.com.evil.net/",
                false,
            ),
            (
                "https://api.example.com",
                "https://api.example.com@evil.net/",
                false,
            ),
            ("https://api.example.com/", "https://api.example.com/", true),
            ("http://*.svc:8080", "http://db.svc:8080/x", true),
            ("http://*.svc:8080", "http://db.ns.svc:8080/x", true),
            ("http://*.svc:8080", "http://svc:8080/x", false),
            ("http://*.svc:8080", "http://db.svc/x", false),
            ("http://*.svc:8080", "http://db.svcx:8080/x", false),
            ("http://*.svc:8080", "http://a.svc.:8080/", false),
            ("http://*.svc:8080", "http://%61.svc:8080/", true),
            ("https://*.example.com", "https://a.example.com/", true),
            ("https://*.example.com", "https://example.com/", false),
            ("https://*.example.com", "https://aexample.com/", false),
            ("http://example.com", "http://example.com:80/", true),
            ("http://example.com:80", "http://example.com/", true),
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000/p", true),
            ("http://127.0.0.1:9000", "http://127.0.0.1:9001/p", false),
            ("http://2130706433:8080", "http://127.0.0.1:8080/", true),
            ("http://[::1]:9000", "http://[::1]:9000/", true),
            ("http://[0::1]:8080", "http://[::1]:8080/", true),
            (
                "http://bücher.example",
                "http://xn--bcher-kva.example/",
                true,
            ),
            (
                "http://xn--bcher-kva.example",
                "http://bücher.example/",
                true,
            ),
            ("http://bücher.example", "http://bucher.example/", false),
            ("https://api.example.com", "ftp://api.example.com/", false),
            ("https://api.example.com", "not a url", false),
            ("HTTPS://API.example.com", "https://api.example.com/", true),
        ];
        for (entry, url, want) in table {
            let list = AllowList::parse(&[*entry]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(list.check(url).is_ok(), *want, "{entry} vs {url}");
        }
    }

    #[test]
    fn wildcard_matches_subdomains_not_the_bare_suffix() {
        let g = p("http://*.svc:8080");
        assert!(g.matches("http", "a.svc", 8080));
        assert!(g.matches("HTTP", "A.b.SVC", 8080));
        assert!(!g.matches("http", "svc", 8080));
        assert!(!g.matches("http", "a.svc", 80));
        assert!(!g.matches("https", "a.svc", 8080));
        assert!(!g.matches("http", "evilsvc", 8080));
    }

    #[test]
    fn covers_requires_equal_or_wider_pattern() {
        // (grant, wanted, covered)
        let table = [
            ("https://*.example.com", "https://api.example.com", true),
            ("https://*.example.com", "https://*.example.com", true),
            ("https://*.example.com", "https://*.a.example.com", true),
            ("https://*.example.com", "https://example.com", false),
            ("https://api.example.com", "https://*.example.com", false),
            (
                "https://api.example.com:8443",
                "https://api.example.com",
                false,
            ),
            ("https://api.example.com", "http://api.example.com", false),
        ];
        for (grant, wanted, want) in table {
            assert_eq!(p(grant).covers(&p(wanted)), want, "{grant} covers {wanted}");
        }
    }

    #[test]
    fn a_bad_entry_fails_the_list_and_names_itself() {
        let err = AllowList::parse(&["https://ok.example", "https://a.*.b"]).unwrap_err();
        assert_eq!(err.entry, "https://a.*.b");
        assert_eq!(err.error, HostPatternError::BadWildcard);
        assert!(err.to_string().starts_with("`https://a.*.b`: "), "{err}");
    }

    #[test]
    fn an_empty_list_denies_everything() {
        let list = AllowList::parse::<&str>(&[]).expect("empty list");
        assert_eq!(
            list.check("https://example.com/x"),
            Err(Refused::NotAllowed {
                origin: "https://example.com".into()
            })
        );
        assert_eq!(
            list.check("https://example.com/x")
                .map_err(|e| e.to_string()),
            Err("host not allowed: https://example.com".into())
        );
        assert!(matches!(
            list.check("not a url"),
            Err(Refused::InvalidUrl { .. })
        ));
    }
}
