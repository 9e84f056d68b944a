//! The network allow-list cannot be bypassed: redirects, IP literal forms, userinfo, ports,
//! case, trailing dots, IDNA and percent-encoding — against real HTTP servers on loopback
//! addresses only (127.0.0.0/8 and ::1). For every URL the test knows which server, if any,
//! the request may reach, and checks that no other server saw a request.
use ari_testkit::runtime as common;

use ari_runtime::FailureKind;
use ari_runtime::model::hosts::AllowList;
use common::http::Server;
use common::*;

/// Whether a request should reach a server (which one) or be denied before any connection.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Reaches `servers[i]` (and only it), answering 200.
    Reach(usize),
    /// `CapabilityDenied`, and no server sees a request.
    Denied,
}

/// Runs `fetch` on each URL with `grant` and checks the ending and every server's hit count.
fn check(servers: &[&Server], grant: &[String], cases: &[(String, Want)]) {
    let grant: Vec<&str> = grant.iter().map(String::as_str).collect();
    for (url, want) in cases {
        let before: Vec<usize> = servers.iter().map(|s| s.hits()).collect();
        let o = run("fetch", url, grants(&grant));
        let after: Vec<usize> = servers.iter().map(|s| s.hits()).collect();
        let delta: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        match want {
            Want::Reach(i) => {
                assert_eq!(o.failure, None, "{url} under {grant:?} should be allowed");
                assert!(output(&o).starts_with("200\n"), "{url}: {}", output(&o));
                let mut expected = vec![0; servers.len()];
                expected[*i] = 1;
                assert_eq!(delta, expected, "{url}: which servers were contacted");
            }
            Want::Denied => {
                assert_eq!(
                    o.failure_kind(),
                    Some(FailureKind::CapabilityDenied),
                    "{url} under {grant:?} must be denied: {:?}",
                    o.failure
                );
                assert!(
                    delta.iter().all(|d| *d == 0),
                    "{url}: a denied request reached a server ({delta:?})"
                );
            }
        }
    }
    assert_echo_works();
}

fn net(entries: &[&str]) -> Vec<String> {
    entries.iter().map(|e| format!("network={e}")).collect()
}

#[test]
fn ip_literal_forms_reach_only_the_address_they_denote() {
    let allowed = Server::start();
    let other_port = Server::start();
    let other_ip = Server::start_on("127.0.0.2");
    let (pa, pb, pc) = (allowed.port, other_port.port, other_ip.port);
    let grant = net(&[&allowed.base]);
    use Want::*;
    let cases: Vec<(String, Want)> = vec![
        (format!("http://127.0.0.1:{pa}/"), Reach(0)),
        // Other ports and other loopback addresses.
        (format!("http://127.0.0.1:{pb}/"), Denied),
        (format!("http://127.0.0.2:{pc}/"), Denied),
        (format!("http://127.0.0.2:{pa}/"), Denied),
        // Decimal, hex, octal and short IPv4 forms are normalised to the address they denote
        // before the check, and the request goes to exactly that address.
        (format!("http://2130706433:{pa}/"), Reach(0)),
        (format!("http://0x7f000001:{pa}/"), Reach(0)),
        (format!("http://0177.0.0.1:{pa}/"), Reach(0)),
        (format!("http://127.1:{pa}/"), Reach(0)),
        (format!("http://0x7f.0.0.1:{pa}/"), Reach(0)),
        (format!("http://2130706434:{pc}/"), Denied),
        (format!("http://0x7f000002:{pc}/"), Denied),
        (format!("http://0177.0.0.2:{pc}/"), Denied),
        (format!("http://127.0.0.1.:{pa}/"), Reach(0)),
        // The name is not the address: `localhost` is not granted by `127.0.0.1`.
        (format!("http://localhost:{pa}/"), Denied),
        (format!("http://LOCALHOST:{pa}/"), Denied),
        // IPv6 loopback and IPv4-mapped IPv6 are other hosts.
        (format!("http://[::1]:{pa}/"), Denied),
        (format!("http://[::ffff:127.0.0.1]:{pa}/"), Denied),
        (format!("http://[::ffff:7f00:1]:{pa}/"), Denied),
        (format!("http://[0:0:0:0:0:ffff:7f00:1]:{pa}/"), Denied),
        (format!("http://[::127.0.0.1]:{pa}/"), Denied),
        // Scheme must match exactly.
        (format!("https://127.0.0.1:{pa}/"), Denied),
        (format!("ftp://127.0.0.1:{pa}/"), Denied),
        (format!("ws://127.0.0.1:{pa}/"), Denied),
        // Case of scheme and a leading-zero port are normalised.
        (format!("HTTP://127.0.0.1:{pa}/"), Reach(0)),
        (format!("http://127.0.0.1:0{pa}/"), Reach(0)),
        // Percent-encoding and full-width dots in the host are decoded before the check.
        (format!("http://%31%32%37.0.0.1:{pa}/"), Reach(0)),
        (format!("http://%31%32%37.0.0.2:{pc}/"), Denied),
        (
            format!("http://127\u{3002}0\u{3002}0\u{3002}2:{pc}/"),
            Denied,
        ),
        (
            format!("http://127\u{ff0e}0\u{ff0e}0\u{ff0e}1:{pa}/"),
            Reach(0),
        ),
    ];
    check(&[&allowed, &other_port, &other_ip], &grant, &cases);
}

#[test]
fn userinfo_fragments_and_backslashes_cannot_smuggle_a_host() {
    let allowed = Server::start();
    let evil = Server::start_on("127.0.0.2");
    let (pa, pc) = (allowed.port, evil.port);
    let grant = net(&[&allowed.base]);
    use Want::*;
    let a = format!("127.0.0.1:{pa}");
    let e = format!("127.0.0.2:{pc}");
    let cases: Vec<(String, Want)> = vec![
        // The allowed origin in the userinfo: the real host is evil.
        (format!("http://{a}@{e}/"), Denied),
        (format!("http://user:{a}@{e}/"), Denied),
        (format!("http://{a}%40{e}/"), Denied),
        (format!("http://{a}:x@{e}/x@{a}/"), Denied),
        // Evil first, the allowed host hidden in a fragment, query or path.
        (format!("http://{e}#@{a}/"), Denied),
        (format!("http://{e}?@{a}/"), Denied),
        (format!("http://{e}/@{a}/"), Denied),
        (format!("http://{e}\\@{a}/"), Denied),
        // The allowed host first: the rest is path or fragment, and only allowed is contacted.
        (format!("http://{a}#@{e}/"), Reach(0)),
        (format!("http://{a}\\@{e}/"), Reach(0)),
        (format!("http://{a}/@{e}/"), Reach(0)),
        // Credentials for the allowed host itself are fine.
        (format!("http://user:pw@{a}/"), Reach(0)),
        // Whitespace and control characters around the host.
        (format!(" http://{e}/"), Denied),
        (format!("http://{e}\t/"), Denied),
        (format!("http://\n{e}/"), Denied),
    ];
    check(&[&allowed, &evil], &grant, &cases);
}

#[test]
fn names_compare_after_case_idna_and_percent_decoding_never_by_resolution() {
    let allowed = Server::start();
    let other = Server::start();
    let (pa, pb) = (allowed.port, other.port);
    let grant = net(&[&format!("http://localhost:{pa}")]);
    use Want::*;
    let cases: Vec<(String, Want)> = vec![
        (format!("http://localhost:{pa}/"), Reach(0)),
        (format!("http://LocalHost:{pa}/"), Reach(0)),
        (
            format!("http://%6c%6f%63%61%6c%68%6f%73%74:{pa}/"),
            Reach(0),
        ),
        // Full-width letters map (IDNA/NFKC) to plain `localhost`.
        (
            format!(
                "http://\u{ff4c}\u{ff4f}\u{ff43}\u{ff41}\u{ff4c}\u{ff48}\u{ff4f}\u{ff53}\u{ff54}:{pa}/"
            ),
            Reach(0),
        ),
        (format!("http://localhost:{pb}/"), Denied),
        // An address of the same machine is not the granted name.
        (format!("http://127.0.0.1:{pa}/"), Denied),
        (format!("http://[::1]:{pa}/"), Denied),
        // A trailing dot is another DNS name (no search domains): denied unless granted as such.
        (format!("http://localhost.:{pa}/"), Denied),
        (format!("http://localhost..:{pa}/"), Denied),
        // Homoglyphs (Cyrillic o, Greek omicron) become other punycode names.
        (format!("http://l\u{043e}calhost:{pa}/"), Denied),
        (format!("http://l\u{03bf}calhost:{pa}/"), Denied),
        (format!("http://xn--lcalhost-9of:{pa}/"), Denied),
        // Suffix and prefix tricks.
        (format!("http://localhost.evil:{pa}/"), Denied),
        (format!("http://evil.localhost:{pa}/"), Denied),
        (format!("http://localhostx:{pa}/"), Denied),
        (format!("http://localhost%2e:{pa}/"), Denied),
        (format!("http://localhost%00:{pa}/"), Denied),
        (format!("http://local%20host:{pa}/"), Denied),
        (format!("https://localhost:{pa}/"), Denied),
    ];
    check(&[&allowed, &other], &grant, &cases);
}

#[test]
fn ipv6_loopback_grants_only_ipv6_loopback() {
    let Ok(v6) = std::panic::catch_unwind(|| Server::start_on("[::1]")) else {
        eprintln!("NOTICE: no IPv6 loopback here; skipping the [::1] containment test");
        return;
    };
    let v4 = Server::start();
    let p = v6.port;
    let grant = net(&[&format!("http://[::1]:{p}")]);
    use Want::*;
    let cases: Vec<(String, Want)> = vec![
        (format!("http://[::1]:{p}/"), Reach(0)),
        (format!("http://[0:0:0:0:0:0:0:1]:{p}/"), Reach(0)),
        (format!("http://[0000::0001]:{p}/"), Reach(0)),
        (format!("http://127.0.0.1:{p}/"), Denied),
        (format!("http://localhost:{p}/"), Denied),
        (format!("http://[::1]:{}/", v4.port), Denied),
        (format!("http://127.0.0.1:{}/", v4.port), Denied),
        (format!("http://[::ffff:127.0.0.1]:{p}/"), Denied),
        (format!("http://[::1%25lo]:{p}/"), Denied),
    ];
    check(&[&v6, &v4], &grant, &cases);
}

#[test]
fn redirects_are_checked_at_every_hop() {
    let allowed = Server::start();
    let allowed2 = Server::start();
    let other_port = Server::start();
    let other_ip = Server::start_on("127.0.0.2");
    let (a, a2) = (&allowed.base, &allowed2.base);
    let (pa, pb, pc) = (allowed.port, other_port.port, other_ip.port);
    let grant = net(&[a, a2]);
    let to = |from: &str, target: &str| format!("{from}/redirect?to={target}");
    let servers = [&allowed, &allowed2, &other_port, &other_ip];

    // Each denied chain: the allowed hops are contacted, the first non-allowed one never is.
    let denied_chains: Vec<(String, [usize; 4])> = vec![
        (to(a, &format!("http://127.0.0.1:{pb}/x")), [1, 0, 0, 0]),
        (to(a, &format!("http://127.0.0.2:{pc}/x")), [1, 0, 0, 0]),
        (to(a, &format!("//127.0.0.2:{pc}/x")), [1, 0, 0, 0]),
        (to(a, &format!("https://127.0.0.1:{pa}/x")), [1, 0, 0, 0]),
        (to(a, &format!("http://2130706434:{pc}/x")), [1, 0, 0, 0]),
        (to(a, &format!("http://localhost:{pa}/x")), [1, 0, 0, 0]),
        (
            to(a, &format!("http://[::ffff:127.0.0.1]:{pa}/x")),
            [1, 0, 0, 0],
        ),
        (
            to(a, &format!("http://127.0.0.1:{pa}@127.0.0.2:{pc}/x")),
            [1, 0, 0, 0],
        ),
        (
            to(a, &format!("http://127.0.0.2:{pc}#@127.0.0.1:{pa}/")),
            [1, 0, 0, 0],
        ),
        // Chains: allowed → allowed → evil, and allowed → allowed2 → other port.
        (
            to(a, &to(a, &format!("http://127.0.0.2:{pc}/x"))),
            [2, 0, 0, 0],
        ),
        (
            to(a, &to(a2, &format!("http://127.0.0.1:{pb}/x"))),
            [1, 1, 0, 0],
        ),
    ];
    for (url, expected) in denied_chains {
        let before: Vec<usize> = servers.iter().map(|s| s.hits()).collect();
        let o = run(
            "fetch",
            &url,
            grants(&grant.iter().map(String::as_str).collect::<Vec<_>>()),
        );
        let delta: Vec<usize> = servers
            .iter()
            .zip(&before)
            .map(|(s, b)| s.hits() - b)
            .collect();
        assert_eq!(
            o.failure_kind(),
            Some(FailureKind::CapabilityDenied),
            "{url}: {:?}",
            o.failure
        );
        let message = &o.failure.as_ref().expect("failed").message;
        assert!(message.contains("redirect hop"), "{url}: {message}");
        assert_eq!(delta, expected, "{url}: which servers were contacted");
    }

    // Allowed chains: relative, to the other granted origin, and back.
    let grant_refs: Vec<&str> = grant.iter().map(String::as_str).collect();
    for (url, expected) in [
        (to(a, "/hello"), [2, 0, 0, 0]),
        (to(a, &format!("{a2}/hello")), [1, 1, 0, 0]),
        (to(a, &to(a2, &format!("{a}/hello"))), [2, 1, 0, 0]),
    ] {
        let before: Vec<usize> = servers.iter().map(|s| s.hits()).collect();
        let o = run("fetch", &url, grants(&grant_refs));
        let delta: Vec<usize> = servers
            .iter()
            .zip(&before)
            .map(|(s, b)| s.hits() - b)
            .collect();
        assert_eq!(o.failure, None, "{url}");
        assert_eq!(output(&o), "200\nhello from the test server");
        assert_eq!(delta, expected, "{url}");
    }

    // A redirect loop on an allowed host stops after 5 redirects (6 requests).
    let before = allowed.hits();
    let mut url = format!("{a}/hello");
    for _ in 0..7 {
        url = to(a, &url);
    }
    let o = run("fetch", &url, grants(&grant_refs));
    assert_eq!(
        o.failure_kind(),
        Some(FailureKind::HostError),
        "{:?}",
        o.failure
    );
    assert!(
        o.failure
            .as_ref()
            .is_some_and(|f| f.message.contains("too many redirects"))
    );
    assert_eq!(allowed.hits() - before, 6);
    assert_eq!(other_port.hits() + other_ip.hits(), 0);
    assert_echo_works();
}

#[test]
fn exfil_cannot_reach_a_host_outside_the_list_by_any_form() {
    let allowed = Server::start();
    let sink = Server::start_on("127.0.0.2");
    let grant = net(&[&allowed.base]);
    let grant: Vec<&str> = grant.iter().map(String::as_str).collect();
    let p = sink.port;
    for url in [
        format!("http://127.0.0.2:{p}/steal"),
        format!("http://2130706434:{p}/steal"),
        format!("http://{}@127.0.0.2:{p}/steal", &allowed.base[7..]),
        format!("{}/redirect?to=http://127.0.0.2:{p}/steal", allowed.base),
    ] {
        let o = run("exfil", &url, grants(&grant));
        assert_eq!(
            o.failure_kind(),
            Some(FailureKind::CapabilityDenied),
            "{url}"
        );
    }
    assert_eq!(
        sink.hits(),
        0,
        "the secret reached a host that was not granted"
    );
}

/// Allow-list entries: what parses, and what a parsed entry means.
#[test]
fn allow_list_entries_are_validated_and_normalised() {
    let mut wrong = Vec::new();
    for bad in [
        "http://127.0.0.1:80/path",
        "http://user@127.0.0.1",
        "http://127.0.0.1#x",
        "http://*",
        "http://*:8080",
        "http://*.0.0.1",
        "http://*.127.0.0.1",
        "http://*.[::1]",
        "http://localhost.",
        "http://*.svc.",
        "http://a..b",
        "http://",
        "http:// localhost",
        "http://local host",
        "http://localhost:0x50",
        "http://localhost:-1",
        "http://localhost:65536",
        "file:///etc/passwd",
        "HTTP//localhost",
    ] {
        if AllowList::parse(&[bad]).is_ok() {
            wrong.push(bad);
        }
    }
    assert!(wrong.is_empty(), "accepted: {wrong:?}");
    // (entry, url, allowed): entries normalise like URLs do.
    for (entry, url, want) in [
        ("http://LOCALHOST:8080", "http://localhost:8080/", true),
        ("http://2130706433:8080", "http://127.0.0.1:8080/", true),
        ("http://[0::1]:8080", "http://[::1]:8080/", true),
        ("http://127.0.0.1:80", "http://127.0.0.1/", true),
        (
            "http://xn--bcher-kva.example",
            "http://bücher.example/",
            true,
        ),
        (
            "http://bücher.example",
            "http://xn--bcher-kva.example/",
            true,
        ),
        ("http://bücher.example", "http://bucher.example/", false),
        ("http://*.svc:8080", "http://a.svc.:8080/", false),
        ("http://*.svc:8080", "http://%61.svc:8080/", true),
    ] {
        let list = AllowList::parse(&[entry]).unwrap_or_else(|e| panic!("{entry}: {e}"));
        assert_eq!(list.check(url).is_ok(), want, "{entry} vs {url}");
    }
}
