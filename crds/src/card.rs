//! The A2A agent card of an exposed Agent. One builder for the two sides that must agree to
//! the byte: the operator signs the card (it holds the namespace's attestation key) and
//! publishes the signature in `status.a2aCard`; the gateway (which never reads keys) builds
//! the same card from the same Agent and serves it with that signature when the digests match
//! ([`served`]).

use ari_model::card::{SignedCard, attach};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::{A2aSpec, Agent, AgentStatus};

/// The protocol version the card announces and the gateway speaks.
pub const PROTOCOL_VERSION: &str = "1.0";
/// The pre-1.0 version whose method names and JSON shapes are also served.
pub const LEGACY_PROTOCOL_VERSION: &str = "0.3";
/// The JSON-RPC binding's name on the card.
pub const JSONRPC_BINDING: &str = "JSONRPC";

/// The modes a card lists when the Agent names none.
const DEFAULT_MODE: &str = "text/plain";

/// What the card of an exposed Agent is built from and nothing else (not its config, module
/// source, annotations or the rest of its status), so a few hundred large Agents cost the
/// gateway their cards, not their whole objects.
#[derive(Clone, Debug, PartialEq)]
pub struct Exposed {
    pub namespace: String,
    pub name: String,
    pub description: Option<String>,
    pub a2a: A2aSpec,
    pub module_digest: Option<String>,
    pub generation: i64,
    /// The operator's signature, for the card it built (`status.a2aCard`).
    pub signed: Option<SignedCard>,
}

impl Exposed {
    /// The Agent's card data when it is exposed, else `None` (it is served as not found).
    pub fn of(agent: &Agent) -> Option<Self> {
        Self::with_status(agent, agent.status.as_ref())
    }

    /// As [`Exposed::of`], with `status` in place of the Agent's: the operator signs the card
    /// of the status it is about to write.
    pub fn with_status(agent: &Agent, status: Option<&AgentStatus>) -> Option<Self> {
        let a2a = agent.spec.a2a.as_ref().filter(|a| a.exposed)?;
        Some(Self {
            namespace: agent.namespace().unwrap_or_default(),
            name: agent.name_any(),
            description: agent.spec.description.clone(),
            a2a: a2a.clone(),
            module_digest: status.and_then(|s| s.module_digest.clone()),
            generation: agent.metadata.generation.unwrap_or(0),
            signed: status.and_then(|s| s.a2a_card.clone()),
        })
    }
}

/// The card, whose JSON-RPC interface is at `base_url/a2a/{namespace}/{agent}`. With no
/// base URL configured the URL is relative (`/a2a/{namespace}/{agent}`, resolved against the
/// card's own URL): never taken from the request, whose `Host` the caller chooses.
pub fn card(agent: &Exposed, base_url: &str) -> Value {
    let (ns, name, a2a) = (&agent.namespace, &agent.name, &agent.a2a);
    let base_url = base_url.trim_end_matches('/');
    let modes = |m: &[crate::MediaType]| -> Vec<String> {
        if m.is_empty() {
            vec![DEFAULT_MODE.to_owned()]
        } else {
            m.iter().map(|t| t.0.clone()).collect()
        }
    };
    let skills: Vec<Value> = a2a
        .skills
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "name": s.name,
                "description": s.description,
                "tags": s.tags.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
                "examples": s.examples.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    // The version changes whenever the module does: the digest names what answers.
    let version = agent
        .module_digest
        .as_deref()
        .and_then(|d| d.strip_prefix("sha256:"))
        .map(|hex| format!("0.0.0+sha256.{}", &hex[..hex.len().min(12)]))
        .unwrap_or_else(|| format!("0.0.0+generation.{}", agent.generation));
    let url = format!("{base_url}/a2a/{ns}/{name}");
    let mut card = json!({
        "name": name,
        "description": agent.description.clone().unwrap_or_else(|| format!("ari Agent {ns}/{name}")),
        "version": version,
        // The same endpoint answers pre-1.0 clients (by their method names) in their shape.
        "supportedInterfaces": [{
            "url": url,
            "protocolBinding": JSONRPC_BINDING,
            "protocolVersion": PROTOCOL_VERSION,
        }, {
            "url": url,
            "protocolBinding": JSONRPC_BINDING,
            "protocolVersion": LEGACY_PROTOCOL_VERSION,
        }],
        "capabilities": {"streaming": true, "pushNotifications": false, "extendedAgentCard": false},
        "securitySchemes": {
            "kubernetes": {"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "bearerFormat": "Kubernetes service account or user token",
                "description": "A token the cluster's TokenReview accepts for the gateway's audience; its user needs RBAC on ari.dev tasks in the namespace.",
            }}
        },
        "securityRequirements": [{"schemes": {"kubernetes": {"list": []}}}],
        "defaultInputModes": modes(&a2a.input_modes),
        "defaultOutputModes": modes(&a2a.output_modes),
        "skills": skills,
    });
    if !base_url.is_empty() {
        card["provider"] = json!({"organization": "ari", "url": base_url});
    }
    card
}

/// The card as the gateway serves it: [`card`], with the operator's signature when it was
/// made for this very card. While a change is not signed yet (the operator has not reconciled
/// it), the card goes out unsigned rather than with a signature that fails.
pub fn served(agent: &Exposed, base_url: &str) -> Value {
    let mut c = card(agent, base_url);
    if let Some(signed) = &agent.signed {
        attach(&mut c, signed);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{A2aSkill, AgentSpec, ShortText};

    fn agent(a2a: Option<A2aSpec>) -> Agent {
        let mut spec: AgentSpec = serde_json::from_value(json!({
            "module": {"configMap": {"name": "m", "key": "agent.wasm"}},
            "description": "Counts words",
        }))
        .expect("a spec");
        spec.a2a = a2a;
        let mut a = Agent::new("wordcount", spec);
        a.metadata.namespace = Some("team".into());
        a
    }

    #[test]
    fn only_exposed_agents_have_a_card() {
        assert!(Exposed::of(&agent(None)).is_none());
        assert!(Exposed::of(&agent(Some(A2aSpec::default()))).is_none());
        let on = A2aSpec {
            exposed: true,
            ..A2aSpec::default()
        };
        assert!(Exposed::of(&agent(Some(on))).is_some());
    }

    #[test]
    fn without_a_public_url_the_card_url_is_relative_and_names_no_host() {
        let a2a = A2aSpec {
            exposed: true,
            ..A2aSpec::default()
        };
        let a = Exposed::of(&agent(Some(a2a))).expect("exposed");
        let c = card(&a, "");
        assert_eq!(c["supportedInterfaces"][0]["url"], "/a2a/team/wordcount");
        assert!(c.get("provider").is_none());
    }

    #[test]
    fn the_card_names_its_json_rpc_url_skills_and_modes() {
        let a2a = A2aSpec {
            exposed: true,
            skills: vec![A2aSkill {
                id: "count".into(),
                name: "Count words".into(),
                description: "Counts the words of a text".into(),
                tags: vec![ShortText("text".into())],
                examples: vec![],
            }],
            ..A2aSpec::default()
        };
        let a = Exposed::of(&agent(Some(a2a))).expect("exposed");
        let c = card(&a, "http://gw.example:8080/");
        assert_eq!(
            c["supportedInterfaces"][0]["url"],
            "http://gw.example:8080/a2a/team/wordcount"
        );
        assert_eq!(c["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        assert_eq!(c["supportedInterfaces"][0]["protocolVersion"], "1.0");
        assert_eq!(c["capabilities"]["streaming"], true);
        assert_eq!(c["defaultInputModes"], json!(["text/plain"]));
        assert_eq!(c["skills"][0]["id"], "count");
        assert_eq!(c["description"], "Counts words");
    }

    #[test]
    fn the_signature_is_served_only_on_the_card_it_was_made_for() {
        use ari_model::card::{CardError, SIGNATURES, sign, verify};
        let key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
        let url = "https://agents.example.com";
        let mut a = agent(Some(A2aSpec {
            exposed: true,
            ..A2aSpec::default()
        }));
        a.metadata.generation = Some(3);
        // The operator signs the card of the status it is about to write.
        let mut status = AgentStatus {
            module_digest: Some(format!("sha256:{}", "ab".repeat(32))),
            ..AgentStatus::default()
        };
        let exposed = Exposed::with_status(&a, Some(&status)).expect("exposed");
        status.a2a_card = Some(sign(&card(&exposed, url), &key).expect("signed"));
        a.status = Some(status);
        // The gateway builds the same card from the Agent as written, signature attached.
        let shown = served(&Exposed::of(&a).expect("exposed"), url);
        assert_eq!(shown[SIGNATURES].as_array().map(Vec::len), Some(1));
        assert_eq!(verify(&shown, &key.verifying_key()), Ok(()));
        // A gateway with another public URL builds another card: it goes out unsigned.
        let elsewhere = served(&Exposed::of(&a).expect("exposed"), "https://other.example");
        assert!(elsewhere.get(SIGNATURES).is_none());
        // The spec changed and the operator has not signed again yet: unsigned, not failing.
        if let Some(a2a) = a.spec.a2a.as_mut() {
            a2a.skills.push(A2aSkill {
                id: "new".into(),
                name: "New".into(),
                ..A2aSkill::default()
            });
        }
        let changed = served(&Exposed::of(&a).expect("exposed"), url);
        assert!(changed.get(SIGNATURES).is_none());
        assert_eq!(
            verify(&changed, &key.verifying_key()),
            Err(CardError::Unsigned)
        );
    }
}
