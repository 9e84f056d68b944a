//! The properties of the network allow-list grammar (`ari_model::hosts`), checked by the fuzz
//! target `host_pattern` and replayed by `model/tests/fuzz_regressions.rs`. Model only: no
//! runtime, no HTTP client (`checks::allowlist` adds those).
//!
//! A check panics when a property fails; an error for bad input is fine.

use ari_model::hosts::{AllowList, HostPattern};

/// Input: an allow-list entry, a newline, then URLs (or other entries) one a line.
///
/// 1. Parsing never panics, and an accepted entry is canonical: its display parses back to
///    the same pattern, and it covers itself.
/// 2. A one-entry list accepts exactly the entries the pattern parser accepts.
/// 3. A URL the list allows, once normalised, is allowed again and unchanged (what the client
///    receives is exactly what was checked).
/// 4. Matching and covering agree: a URL is allowed exactly when the pattern covers the URL's
///    own origin, so a Task admitted for a host (covering, in the operator) can reach it
///    (matching, in the executor), and nothing else.
/// 5. Covering is transitive over the lines that parse as patterns: what the entry covers,
///    anything covered by it, is covered too.
pub fn host_pattern(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (entry, rest) = text.split_once('\n').unwrap_or((text, ""));
    let parsed = HostPattern::parse(entry);
    let list = AllowList::parse(&[entry]);
    assert_eq!(
        parsed.is_ok(),
        list.is_ok(),
        "entry {entry:?}: pattern {parsed:?}, list {list:?}"
    );
    let (Ok(pattern), Ok(list)) = (parsed, list) else {
        return;
    };
    let again = HostPattern::parse(&pattern.to_string())
        .unwrap_or_else(|e| panic!("display {pattern} of {entry:?} does not parse: {e}"));
    assert_eq!(again, pattern, "entry {entry:?} is not canonical");
    assert!(pattern.covers(&pattern), "{pattern} does not cover itself");
    for line in rest.split('\n').take(8) {
        if let Ok(url) = url::Url::parse(line)
            && let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default())
            && let Ok(origin) = HostPattern::parse(&format!("{}://{host}:{port}", url.scheme()))
        {
            assert_eq!(
                pattern.matches_url(&url),
                pattern.covers(&origin),
                "entry {entry:?}, url {line:?}: matching and covering disagree"
            );
        }
        if let Ok(other) = HostPattern::parse(line)
            && pattern.covers(&other)
        {
            for inner in rest.split('\n').take(8) {
                if let Ok(inner) = HostPattern::parse(inner) {
                    assert!(
                        !other.covers(&inner) || pattern.covers(&inner),
                        "{pattern} covers {other} which covers {inner}, but not {inner}"
                    );
                }
            }
        }
        let Ok(allowed) = list.check(line) else {
            continue;
        };
        let again = list
            .check(allowed.as_str())
            .unwrap_or_else(|e| panic!("normalised {allowed} of {line:?} is denied: {e}"));
        assert_eq!(again, allowed, "normalising {line:?} is not idempotent");
    }
}
