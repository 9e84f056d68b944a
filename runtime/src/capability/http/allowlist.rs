//! The network allow-list: Spin-style `scheme://host[:port]` entries.
//!
//! A `*` may stand only for the whole leftmost label (`https://*.example.com`
//! matches `a.example.com` and `a.b.example.com`, never `example.com`). Ports
//! default by scheme and must match exactly; schemes must match exactly.
//! Entries are validated when parsed, so a typo fails the grant instead of
//! silently denying (or allowing) traffic later.

use std::fmt;

use url::{Host, Url};

use crate::capability::GrantError;

/// One validated allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: String,
    /// Lower-case host; for a wildcard, the suffix after `*.`.
    host: String,
    wildcard: bool,
    port: u16,
}

fn invalid(entry: &str, reason: &str) -> GrantError {
    GrantError::Invalid {
        grant: "network",
        reason: format!("`{entry}`: {reason}"),
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

impl HostPattern {
    pub fn parse(entry: &str) -> Result<Self, GrantError> {
        let (scheme, rest) = entry
            .split_once("://")
            .ok_or_else(|| invalid(entry, "expected scheme://host[:port]"))?;
        // Schemes are case-insensitive; requests are compared after URL normalisation.
        let scheme = scheme.to_ascii_lowercase();
        if default_port(&scheme).is_none() {
            return Err(invalid(entry, "scheme must be http or https"));
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return Err(invalid(entry, "missing host"));
        }
        if authority.contains(['/', '?', '#', '@', '\\']) {
            return Err(invalid(
                entry,
                "only scheme://host[:port] is allowed (no path, query or user info)",
            ));
        }
        let (wildcard, concrete) = match authority.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, authority),
        };
        if concrete.contains('*') {
            return Err(invalid(
                entry,
                "`*` may only be the whole leftmost label, as in https://*.example.com",
            ));
        }
        let url = Url::parse(&format!("{scheme}://{concrete}"))
            .map_err(|e| invalid(entry, &e.to_string()))?;
        match url.host() {
            Some(Host::Domain(d)) if d.split('.').any(str::is_empty) => {
                // `example.com.` is another DNS name than `example.com` (no search domains),
                // so a trailing dot would grant something the user did not mean.
                return Err(invalid(entry, "empty label in host (trailing dot or `..`)"));
            }
            Some(Host::Domain(_)) => {}
            Some(_) if wildcard => {
                return Err(invalid(entry, "a wildcard cannot prefix an IP address"));
            }
            Some(_) => {}
            None => return Err(invalid(entry, "missing host")),
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid(entry, "missing host"))?;
        let port = url
            .port_or_known_default()
            .ok_or_else(|| invalid(entry, "no port"))?;
        Ok(Self {
            scheme,
            host: host.to_owned(),
            wildcard,
            port,
        })
    }

    /// Whether `url` (already parsed) is covered by this entry.
    pub fn matches(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let Some(port) = url.port_or_known_default() else {
            return false;
        };
        if url.scheme() != self.scheme || port != self.port {
            return false;
        }
        if self.wildcard {
            host.strip_suffix(self.host.as_str())
                .and_then(|prefix| prefix.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty())
        } else {
            host == self.host
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let star = if self.wildcard { "*." } else { "" };
        write!(f, "{}://{star}{}:{}", self.scheme, self.host, self.port)
    }
}

/// The validated allow-list of one grant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    patterns: Vec<HostPattern>,
}

impl AllowList {
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, GrantError> {
        let patterns = entries
            .iter()
            // Not trimmed: entries come verbatim from the Agent, where the operator's parser
            // (ari_crds::hosts) refuses surrounding whitespace; `--grant` values are trimmed
            // by the CLI parser before they get here.
            .map(|e| HostPattern::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { patterns })
    }

    /// Parses `url` and checks it; `Err` carries the reason for the denial message.
    pub fn check(&self, url: &str) -> Result<Url, String> {
        let parsed = Url::parse(url).map_err(|e| format!("invalid URL `{url}`: {e}"))?;
        if self.patterns.iter().any(|p| p.matches(&parsed)) {
            Ok(parsed)
        } else {
            let origin = parsed.origin().ascii_serialization();
            Err(format!("host not allowed: {origin}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("https://*.example.com", "https://a.example.com/", true),
            ("https://*.example.com", "https://example.com/", false),
            ("https://*.example.com", "https://aexample.com/", false),
            ("http://example.com", "http://example.com:80/", true),
            ("http://example.com:80", "http://example.com/", true),
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000/p", true),
            ("http://127.0.0.1:9000", "http://127.0.0.1:9001/p", false),
            ("http://[::1]:9000", "http://[::1]:9000/", true),
            ("https://api.example.com", "ftp://api.example.com/", false),
            ("https://api.example.com", "not a url", false),
            ("HTTPS://API.example.com", "https://api.example.com/", true),
        ];
        for (entry, url, want) in table {
            let list = AllowList::parse(&[*entry]).unwrap_or_else(|e| panic!("{entry}: {e}"));
            assert_eq!(list.check(url).is_ok(), *want, "{entry} vs {url}");
        }
    }

    #[test]
    fn allowlist_rejects_malformed_entries() {
        for entry in [
            "api.example.com",
            "ftp://example.com",
            "https://",
            "https://example.com/path",
            "https://example.com?x=1",
            "https://user@example.com",
            "https://a.*.example.com",
            "https://*example.com",
            "https://ex*ample.com",
            "https://*",
            "https://*.*.example.com",
            "https://example.com:99999",
            "https://example.com:abc",
            "*://example.com",
            "https://*.[::1]",
            "https://*.127.0.0.1",
            "https://example.com.",
            "https://a..example.com",
            "https://example.com\\path",
            " https://example.com",
            "\rhttp://*.svc:",
        ] {
            assert!(
                AllowList::parse(&[entry]).is_err(),
                "{entry} should be rejected"
            );
        }
    }

    #[test]
    fn allowlist_empty_denies_everything() {
        let list = AllowList::parse::<&str>(&[]).unwrap();
        let err = list.check("https://example.com/").unwrap_err();
        assert!(
            err.contains("host not allowed: https://example.com"),
            "{err}"
        );
    }
}
