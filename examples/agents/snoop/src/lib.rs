//! Hostile: tries to reach another Agent's storage through its own `storage` capability —
//! the other Agent's keys under every prefix, path and separator trick a naive backend might
//! share — then deletes and overwrites the same keys.
//!
//! Input: first line the other Agent's scope (`NAMESPACE/NAME`, default `default/victim`), then
//! one key per line that the other Agent holds (default `secret`). Output (always `ok`):
//! `{"probes":P,"found":[{"key":K,"value":V},...],"absent":A,"errors":E,"writes":W}` where
//! `found` lists every probe that read a value *before* the agent wrote anything — it must be
//! empty, since this agent's own namespace starts empty.

use ari_sdk::host::storage;
use ari_sdk::{Agent, Output, Task};

struct Snoop;

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Every key a guest might try in order to land in `scope`'s namespace for `key`.
fn probes(scope: &str, key: &str) -> Vec<String> {
    let (ns, name) = scope.rsplit_once('/').unwrap_or(("default", scope));
    vec![
        key.to_owned(),
        format!("{scope}/{key}"),
        format!("{name}/{key}"),
        format!("{name}:{key}"),
        format!("../{name}/{key}"),
        format!("../../{scope}/{key}"),
        format!("..\\{name}\\{key}"),
        format!("%2e%2e%2f{name}%2f{key}"),
        format!("/{key}"),
        format!("./{key}"),
        format!("{scope}\0{key}"),
        format!("{name}\0{key}"),
        format!("\0{key}"),
        format!("{key}\0"),
        format!("{{{scope}}}{key}"),
        format!("ari:{{{scope}}}:kv"),
        format!("ari:{{{scope}}}:kv\0{key}"),
        format!("ari:{{{scope}}}:used"),
        format!("{ns}/{name}/../{name}/{key}"),
        key.to_uppercase(),
        format!("{key} "),
        format!("*"),
        String::new(),
        "x".repeat(1025),
        format!("{}{key}", "../".repeat(340)),
    ]
}

impl Agent for Snoop {
    fn execute(task: Task) -> Result<Output, String> {
        let input = task.input_str()?;
        let mut lines = input.lines().map(str::trim_end);
        let scope = lines
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("default/victim")
            .to_owned();
        let mut keys: Vec<&str> = lines.filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            keys.push("secret");
        }
        let all: Vec<String> = keys.iter().flat_map(|k| probes(&scope, k)).collect();

        let (mut found, mut absent, mut errors, mut writes) = (Vec::new(), 0u64, 0u64, 0u64);
        for key in &all {
            match storage::get(key) {
                Ok(Some(v)) => found.push(format!(
                    r#"{{"key":{},"value":{}}}"#,
                    json_string(key),
                    json_string(&String::from_utf8_lossy(&v))
                )),
                Ok(None) => absent += 1,
                Err(_) => errors += 1,
            }
        }
        // If any of these reached the other namespace, the other Agent would lose its data.
        for key in &all {
            if storage::delete(key).is_ok() && storage::set(key, b"snooped").is_ok() {
                writes += 1;
            }
        }
        Ok(Output::from(format!(
            r#"{{"probes":{},"found":[{}],"absent":{absent},"errors":{errors},"writes":{writes}}}"#,
            all.len(),
            found.join(",")
        )))
    }
}

ari_sdk::export_agent!(Snoop);

#[cfg(test)]
mod tests {
    #[test]
    fn probes_cover_prefixes_and_bad_keys() {
        let p = super::probes("ns/victim", "secret");
        assert!(p.contains(&"ns/victim/secret".to_string()));
        assert!(p.contains(&"../victim/secret".to_string()));
        assert!(p.iter().any(String::is_empty));
        assert!(p.iter().any(|k| k.len() > 1024));
    }
}
