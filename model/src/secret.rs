//! A credential the host holds for a guest (a model provider's API key, an MCP server's token
//! or header value): one redacting type for every capability that sends one.

use std::fmt;

/// What a [`Secret`] prints as.
pub const REDACTED: &str = "[redacted]";

/// A credential. It is sent only where its capability puts it (an authentication header):
/// `Debug` and `Display` print [`REDACTED`], it is not `Serialize`, and text built from what a
/// server sends back has it cut out ([`Secret::redact`]), since servers echo what they were sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret, trimmed of surrounding whitespace (a Secret's value often ends in a newline).
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into().trim().to_string())
    }

    /// The secret itself, for the header that carries it and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.0, REDACTED)
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({REDACTED})")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_and_is_cut_from_text() {
        let secret = Secret::new("tok-0123456789\n");
        assert_eq!(secret.expose(), "tok-0123456789", "trimmed");
        for shown in [format!("{secret:?}"), format!("{secret}")] {
            assert!(!shown.contains("tok-0123456789"), "{shown}");
        }
        assert_eq!(
            secret.redact("bad token tok-0123456789."),
            "bad token [redacted]."
        );
        assert_eq!(Secret::new("").redact("text"), "text");
    }
}
