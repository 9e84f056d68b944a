//! Object names, as Kubernetes spells them: checked wherever a name someone else wrote (a user,
//! a guest) is about to go into a request path.

/// Whether `name` can name an object (a DNS-1123 subdomain: lowercase letters, digits, `-` and
/// `.`, at most 253, starting and ending with a letter or digit). The API client puts names
/// into request paths as they are, so a name a user wrote (`other-ns/secret`,
/// `../../x`) is checked with this before it is looked up.
pub fn is_object_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| edge(b) || *b == b'-' || *b == b'.')
}

#[cfg(test)]
mod tests {
    use super::is_object_name;

    #[test]
    fn only_dns_subdomains_name_objects() {
        for ok in ["registry", "a", "my-secret.v2", "0abc"] {
            assert!(is_object_name(ok), "{ok}");
        }
        let long = "a".repeat(254);
        for bad in [
            "",
            "victim/registry",
            "../../victim/secrets/x",
            "Upper",
            "-x",
            "x-",
            "a b",
            "a%2Fb",
            long.as_str(),
        ] {
            assert!(!is_object_name(bad), "{bad}");
        }
    }
}
