//! Flag helpers shared by `--model` and `--mcp`: `NAME=VALUE` lists and credentials read from a
//! file or a variable, never from argv.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use ari_mcp::Secret;

/// `NAME=VALUE` flags as a map; a name given twice is an error.
pub fn pairs(flag: &str, values: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for value in values {
        let Some((name, rest)) = value.split_once('=') else {
            bail!("{flag} expects NAME=VALUE, got {value:?}");
        };
        let name = name.trim();
        if name.is_empty()
            || out
                .insert(name.to_owned(), rest.trim().to_owned())
                .is_some()
        {
            bail!("{flag}: {name:?} is empty or given twice");
        }
    }
    Ok(out)
}

/// Whose credential a flag pair gives: `owner` (`model`), what it is called (`key`) and the
/// flags' stem (`--model-key`, for `--model-key-file` and `--model-key-env`).
pub struct CredentialFlags<'a> {
    pub owner: &'a str,
    pub noun: &'a str,
    pub flag: &'a str,
}

/// `name`'s credential from its file or its variable (not both), or none.
pub fn credential(
    flags: &CredentialFlags<'_>,
    name: &str,
    file: Option<&String>,
    env: Option<&String>,
) -> anyhow::Result<Option<Secret>> {
    let CredentialFlags { owner, noun, flag } = flags;
    match (file, env) {
        (Some(_), Some(_)) => {
            bail!("{owner} {name:?}: give its {noun} by file or by variable, not both")
        }
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{flag}-file {name}: cannot read {path}"))?;
            Ok(Some(Secret::new(text)))
        }
        (None, Some(var)) => {
            let text = std::env::var(var)
                .with_context(|| format!("{flag}-env {name}: ${var} is not set"))?;
            Ok(Some(Secret::new(text)))
        }
        (None, None) => Ok(None),
    }
}
