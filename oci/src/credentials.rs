//! Registry credentials, taken from a Kubernetes pull secret (`kubernetes.io/dockerconfigjson`).
//!
//! The secret is the one users already have for container images, so an Agent's module can come
//! from the same private registry with the same `imagePullSecrets`-style secret.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use oci_client::secrets::RegistryAuth;
use serde_json::{Map, Value};

use crate::Error;

/// How to authenticate to one registry. `Debug` never shows a password or token.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub enum Credentials {
    /// No credentials: public registries, or a secret with no entry for the registry.
    #[default]
    Anonymous,
    /// User name and password (or access token used as a password), the common case.
    Basic { username: String, password: String },
    /// A registry bearer token given directly (`registrytoken` in a docker config).
    Bearer(String),
}

impl Credentials {
    pub fn anonymous() -> Self {
        Credentials::Anonymous
    }

    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The credentials for `registry` (`host[:port]`, as in the image reference) in the bytes of a
    /// secret's `.dockerconfigjson` value (or a legacy `.dockercfg`). Keys may carry a scheme and
    /// path (`https://index.docker.io/v1/`); Docker Hub's names are aliases of one another. No
    /// entry for the registry means anonymous, as the kubelet does: the registry then decides.
    pub fn from_docker_config_json(json: &[u8], registry: &str) -> Result<Self, Error> {
        let config: Value = serde_json::from_slice(json)
            .map_err(|e| Error::Other(format!("pull secret is not a docker config JSON: {e}")))?;
        let auths = auths_of(&config).ok_or_else(|| {
            Error::Other("pull secret has no \"auths\" object (is it a .dockerconfigjson?)".into())
        })?;
        match entry_for(auths, registry) {
            Some((key, entry)) => credentials_of(key, entry),
            None => Ok(Credentials::Anonymous),
        }
    }

    pub(crate) fn to_registry_auth(&self) -> RegistryAuth {
        match self {
            Credentials::Anonymous => RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Credentials::Bearer(token) => RegistryAuth::Bearer(token.clone()),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .finish_non_exhaustive(),
            Credentials::Bearer(_) => f.write_str("Bearer(..)"),
        }
    }
}

/// `{"auths": {...}}`, or the legacy `.dockercfg` form where the map is the whole document.
fn auths_of(config: &Value) -> Option<&Map<String, Value>> {
    let top = config.as_object()?;
    match top.get("auths") {
        Some(auths) => auths.as_object(),
        None if top.values().all(Value::is_object) => Some(top),
        None => None,
    }
}

/// The entry whose key names `registry`. A key written exactly as the registry wins over an
/// alias (`index.docker.io` for `docker.io`), so an explicit entry is never shadowed.
fn entry_for<'a>(auths: &'a Map<String, Value>, registry: &str) -> Option<(&'a str, &'a Value)> {
    let wanted = host_of(registry);
    let canonical = canonical_host(&wanted);
    let mut alias = None;
    for (key, value) in auths {
        let host = host_of(key);
        if host == wanted {
            return Some((key, value));
        }
        if alias.is_none() && canonical_host(&host) == canonical {
            alias = Some((key.as_str(), value));
        }
    }
    alias
}

/// `https://Host:5000/v2/` → `host:5000`: the scheme and path a key may carry are not part of
/// the registry's name.
fn host_of(key: &str) -> String {
    let key = key.trim();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    host.to_ascii_lowercase()
}

/// Docker Hub answers to several names; all of them stand for `docker.io`.
fn canonical_host(host: &str) -> &str {
    match host {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io"
        }
        other => other,
    }
}

fn credentials_of(key: &str, entry: &Value) -> Result<Credentials, Error> {
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    if let Some(auth) = field("auth") {
        return decode_auth(auth).ok_or_else(|| {
            Error::Other(format!(
                "pull secret entry {key:?}: \"auth\" is not base64 of user:password"
            ))
        });
    }
    if let (Some(username), Some(password)) = (field("username"), field("password")) {
        return Ok(Credentials::basic(username, password));
    }
    if let Some(token) = field("registrytoken") {
        return Ok(Credentials::Bearer(token.to_string()));
    }
    Err(Error::Other(format!(
        "pull secret entry {key:?} has no \"auth\", \"username\"/\"password\" or \"registrytoken\""
    )))
}

fn decode_auth(auth: &str) -> Option<Credentials> {
    let auth = auth.trim();
    let bytes = STANDARD
        .decode(auth)
        .or_else(|_| STANDARD_NO_PAD.decode(auth))
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (username, password) = text.split_once(':')?;
    Some(Credentials::basic(username, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        STANDARD.encode(s)
    }

    fn creds(json: &str, registry: &str) -> Result<Credentials, Error> {
        Credentials::from_docker_config_json(json.as_bytes(), registry)
    }

    #[test]
    fn the_auth_field_is_base64_user_colon_password() {
        let json = format!(
            r#"{{"auths":{{"ghcr.io":{{"auth":"{}"}}}}}}"#,
            b64("bot:pa:ss")
        );
        assert_eq!(
            creds(&json, "ghcr.io").ok(),
            Some(Credentials::basic("bot", "pa:ss"))
        );
    }

    #[test]
    fn username_and_password_fields_are_used_when_there_is_no_auth() {
        let json = r#"{"auths":{"registry.example.com:5000":{"username":"u","password":"p"}}}"#;
        assert_eq!(
            creds(json, "registry.example.com:5000").ok(),
            Some(Credentials::basic("u", "p"))
        );
    }

    #[test]
    fn the_auth_field_wins_over_username_and_password() {
        let json = format!(
            r#"{{"auths":{{"ghcr.io":{{"auth":"{}","username":"other","password":"x"}}}}}}"#,
            b64("a:b")
        );
        assert_eq!(
            creds(&json, "ghcr.io").ok(),
            Some(Credentials::basic("a", "b"))
        );
    }

    #[test]
    fn keys_with_a_scheme_or_path_match_the_host() {
        let json = format!(
            r#"{{"auths":{{"https://Registry.Example.com/v2/":{{"auth":"{}"}}}}}}"#,
            b64("u:p")
        );
        assert_eq!(
            creds(&json, "registry.example.com").ok(),
            Some(Credentials::basic("u", "p"))
        );
        let http = r#"{"auths":{"http://127.0.0.1:5000":{"username":"u","password":"p"}}}"#;
        assert_eq!(
            creds(http, "127.0.0.1:5000").ok(),
            Some(Credentials::basic("u", "p"))
        );
    }

    #[test]
    fn docker_hub_names_are_aliases() {
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}}}}}}"#,
            b64("hub:pw")
        );
        for registry in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
            assert_eq!(
                creds(&json, registry).ok(),
                Some(Credentials::basic("hub", "pw")),
                "{registry}"
            );
        }
    }

    #[test]
    fn an_exact_key_wins_over_an_alias() {
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"docker.io":{{"auth":"{}"}}}}}}"#,
            b64("alias:1"),
            b64("exact:2")
        );
        assert_eq!(
            creds(&json, "docker.io").ok(),
            Some(Credentials::basic("exact", "2"))
        );
    }

    #[test]
    fn a_port_is_part_of_the_registry_name() {
        let json = r#"{"auths":{"registry.example.com:5000":{"username":"u","password":"p"}}}"#;
        assert_eq!(
            creds(json, "registry.example.com").ok(),
            Some(Credentials::Anonymous)
        );
    }

    #[test]
    fn no_entry_for_the_registry_is_anonymous() {
        let json = format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{}"}}}}}}"#, b64("u:p"));
        assert_eq!(creds(&json, "quay.io").ok(), Some(Credentials::Anonymous));
        assert_eq!(
            creds(r#"{"auths":{}}"#, "quay.io").ok(),
            Some(Credentials::Anonymous)
        );
    }

    #[test]
    fn the_legacy_dockercfg_form_is_read() {
        let json = format!(r#"{{"ghcr.io":{{"auth":"{}","email":"x@y"}}}}"#, b64("u:p"));
        assert_eq!(
            creds(&json, "ghcr.io").ok(),
            Some(Credentials::basic("u", "p"))
        );
    }

    #[test]
    fn a_registry_token_is_a_bearer_token() {
        let json = r#"{"auths":{"ghcr.io":{"registrytoken":"tok"}}}"#;
        assert_eq!(
            creds(json, "ghcr.io").ok(),
            Some(Credentials::Bearer("tok".into()))
        );
    }

    #[test]
    fn malformed_secrets_are_errors_not_anonymous() {
        let not_base64 = r#"{"auths":{"ghcr.io":{"auth":"%%%"}}}"#;
        let no_colon = format!(
            r#"{{"auths":{{"ghcr.io":{{"auth":"{}"}}}}}}"#,
            b64("nocolon")
        );
        let empty_entry = r#"{"auths":{"ghcr.io":{}}}"#;
        for json in [
            "not json",
            "[]",
            r#"{"auths":[]}"#,
            not_base64,
            &no_colon,
            empty_entry,
        ] {
            let err = creds(json, "ghcr.io").expect_err(json);
            assert_eq!(err.reason(), "PullFailed", "{json}: {err}");
        }
    }

    #[test]
    fn debug_output_hides_secrets() {
        let shown = format!("{:?}", Credentials::basic("bot", "hunter2"));
        assert!(
            shown.contains("bot") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(!format!("{:?}", Credentials::Bearer("tok123".into())).contains("tok123"));
    }
}
