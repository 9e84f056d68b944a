//! The executor Deployment of an Agent or of an `ExecutorPool` (pure builders, applied by the
//! controllers).

use std::collections::BTreeMap;

use ari_crds::Agent;
use ari_crds::capability::CapabilityName;
use ari_crds::mcp_server::{ExecutorToolServer, TOOL_SERVERS_ENV};
use ari_crds::model_config::{ExecutorModel, MODELS_ENV};
use ari_crds::names;
use ari_crds::pool::{
    GUEST_PRIORITIES_ENV, GuestPriorities, PULL_SECRETS_ENV, PoolSecretKey, SIGNING_KEYS_ENV,
};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, ObjectFieldSelector, PodDNSConfig, PodDNSConfigOption, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, SeccompProfile, SecretKeySelector, SecurityContext, Toleration,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use super::image::ResolvedImage;
use crate::config::Settings;

/// Where the executor keeps the embedded agent store (an emptyDir).
const STATE_DIR: &str = "/var/lib/ari";
/// Where the executor caches compiled modules (an emptyDir).
const CACHE_DIR: &str = "/var/cache/ari";

/// Port of the executor's `/metrics` and `/readyz`.
pub const EXECUTOR_HTTP_PORT: i32 = 8080;
/// Non-root user the executor runs as (distroless `nonroot`).
pub const EXECUTOR_UID: i64 = 65532;

/// Labels selecting an Agent's executor pods.
pub fn selector_labels(agent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "ari-executor".to_owned(),
        ),
        (names::LABEL_AGENT.to_owned(), agent.to_owned()),
    ])
}

/// First 16 hex digits of SHA-256 over the spec JSON as the operator caches it
/// ([`crate::cache::trim_agent`]: the config by its digest), without the description and the
/// A2A card, which the executors do not use: a change of what the executors use rolls the pods.
pub fn spec_hash(agent: &Agent) -> String {
    let spec = ari_crds::AgentSpec {
        description: None,
        a2a: None,
        ..agent.spec.clone()
    };
    let bytes = serde_json::to_vec(&spec).unwrap_or_default();
    hex::encode(&Sha256::digest(bytes)[..8])
}

/// Replicas after the embedded-store rule: storage without Redis means one writer.
pub fn effective_replicas(agent: &Agent, settings: &Settings) -> i32 {
    let wanted = agent.spec.replicas().max(0);
    let storage = agent.spec.grant_names().contains(&CapabilityName::Storage);
    if storage && settings.redis_url.is_none() {
        wanted.min(1)
    } else {
        wanted
    }
}

/// Requests of an executor whose Agent sets no resources (no limits: the Agent's
/// `limits.memoryBytes` bounds each instance).
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("100m".to_owned())),
            ("memory".to_owned(), Quantity("128Mi".to_owned())),
        ])),
        ..Default::default()
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A declarative Agent's executors get the declaration's digest (`ARI_DECLARATION_DIGEST`),
/// as they get the module's: they build the declaration's bytes themselves and refuse to run
/// one that hashes otherwise (a ConfigMap prompt edited since), and a new digest rolls them.
pub fn with_declaration(mut dep: Deployment, digest: Option<&str>) -> Deployment {
    let Some(digest) = digest else {
        return dep;
    };
    let containers = dep
        .spec
        .iter_mut()
        .filter_map(|s| s.template.spec.as_mut())
        .flat_map(|p| p.containers.iter_mut());
    for c in containers {
        c.env
            .get_or_insert_with(Vec::new)
            .push(env("ARI_DECLARATION_DIGEST", digest));
    }
    dep
}

/// The Deployment for `agent`, owned by it, with the module digest in the pod template.
///
/// `attestation_public_key` is the namespace key's public half from the operator's source of
/// truth; the executor refuses to sign with a key that does not match it. `module_image` is what
/// `module.image` resolved to: executors pull only that pinned reference. `models` are the
/// granted models whose credentials passed the marked-Secret rule ([`super::models`]), `tools`
/// the granted MCP servers that did ([`super::tools`]).
pub fn build(
    agent: &Agent,
    module_digest: &str,
    module_image: Option<&ResolvedImage>,
    settings: &Settings,
    attestation_public_key: &str,
    models: &[ExecutorModel],
    tools: &[ExecutorToolServer],
) -> Deployment {
    let name = agent.name_any();
    let mut env_vars = vec![
        env("ARI_AGENT_NAME", &name),
        env("ARI_CONCURRENCY", agent.spec.concurrency().to_string()),
        env("ARI_MODULE_DIGEST", module_digest),
    ];
    env_vars.extend(common_env(settings, attestation_public_key));
    // The signing grant's key reaches the executor the way the attestation key does: the
    // kubelet resolves the Secret, so the executor's ServiceAccount needs no Secret access.
    if let Some(signing) = &agent.spec.capabilities.signing {
        env_vars.push(EnvVar {
            name: "ARI_SIGNING_KEY".to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: signing.secret_ref.name.clone(),
                    key: signing.secret_ref.key.clone(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if let Some(resolved) = module_image {
        env_vars.extend(image_env(resolved, settings));
    }
    env_vars.extend(model_env(models));
    env_vars.extend(tool_env(tools));
    let replicas = effective_replicas(agent, settings);
    assemble(
        ExecutorPods {
            name: names::executor_deployment_name(&name),
            namespace: agent.namespace(),
            labels: selector_labels(&name),
            owner: agent.controller_owner_ref(&()),
            replicas,
            // One writer at a time for the embedded store: never surge a second pod.
            single_writer: replicas <= 1,
            env: env_vars,
            annotations: BTreeMap::from([
                (
                    names::ANNOTATION_MODULE_DIGEST.to_owned(),
                    module_digest.to_owned(),
                ),
                (names::ANNOTATION_SPEC_HASH.to_owned(), spec_hash(agent)),
            ]),
            resources: agent.spec.executor.resources.clone(),
            node_selector: agent.spec.executor.node_selector.clone(),
            tolerations: agent.spec.executor.tolerations.clone(),
            service_account: names::EXECUTOR_SERVICE_ACCOUNT,
        },
        settings,
    )
}

/// What every executor pod gets, dedicated or pooled: its own name and address, the
/// heartbeat, where state and the compiled-module cache live, Redis, and the namespace's
/// attestation key (by reference) with the public half the operator published.
fn common_env(settings: &Settings, attestation_public_key: &str) -> Vec<EnvVar> {
    let mut vars = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
        env(
            "ARI_METRICS_ADDR",
            format!("$(POD_IP):{EXECUTOR_HTTP_PORT}"),
        ),
        // Three beats per timeout, so one late beat never looks like a lost executor.
        env(
            "ARI_HEARTBEAT_SECONDS",
            (settings.heartbeat_timeout.as_secs() / 3)
                .max(1)
                .to_string(),
        ),
        // The root filesystem is read-only: state and the compiled-module cache live in
        // emptyDirs.
        env("ARI_STATE_DIR", STATE_DIR),
        env("ARI_CACHE_DIR", CACHE_DIR),
    ];
    if let Some(url) = &settings.redis_url {
        vars.push(env("ARI_REDIS_URL", url));
    }
    // Only when not the default, so pods built before the setting existed do not roll.
    if settings.guest_priorities != GuestPriorities::default() {
        vars.push(env(
            GUEST_PRIORITIES_ENV,
            settings.guest_priorities.as_str(),
        ));
    }
    vars.push(env("ARI_ATTESTATION_PUBLIC_KEY", attestation_public_key));
    vars.push(EnvVar {
        name: "ARI_ATTESTATION_KEY".to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: names::ATTESTATION_SECRET.to_owned(),
                key: names::ATTESTATION_PRIVATE_KEY.to_owned(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    vars
}

/// The variable parts of an executor Deployment; [`assemble`] adds the rest.
pub struct ExecutorPods {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub owner: Option<OwnerReference>,
    pub replicas: i32,
    /// Never two pods at once during a rollout (a single-writer store).
    pub single_writer: bool,
    pub env: Vec<EnvVar>,
    pub annotations: BTreeMap<String, String>,
    pub resources: Option<ResourceRequirements>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Toleration>>,
    pub service_account: &'static str,
}

/// An executor Deployment: always the operator's executor image (executor images are
/// trusted, Agent authors are not), non-root with a read-only root, no capabilities, seccomp
/// RuntimeDefault, emptyDirs for state and cache, and `/readyz` as readiness.
pub fn assemble(p: ExecutorPods, settings: &Settings) -> Deployment {
    let container = Container {
        name: "executor".to_owned(),
        image: Some(settings.executor_image.clone()),
        args: Some(vec!["worker".to_owned()]),
        env: Some(p.env),
        ports: Some(vec![ContainerPort {
            name: Some("http".to_owned()),
            container_port: EXECUTOR_HTTP_PORT,
            ..Default::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/readyz".to_owned()),
                port: IntOrString::Int(EXECUTOR_HTTP_PORT),
                ..Default::default()
            }),
            period_seconds: Some(2),
            ..Default::default()
        }),
        // Requests by default, so executors are not the first pods evicted (BestEffort).
        resources: Some(p.resources.unwrap_or_else(default_resources)),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "state".to_owned(),
                mount_path: STATE_DIR.to_owned(),
                ..Default::default()
            },
            VolumeMount {
                name: "cache".to_owned(),
                mount_path: CACHE_DIR.to_owned(),
                ..Default::default()
            },
        ]),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(EXECUTOR_UID),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                ..Default::default()
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Deployment {
        metadata: ObjectMeta {
            name: Some(p.name),
            namespace: p.namespace,
            labels: Some(p.labels.clone()),
            owner_references: p.owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(p.replicas),
            selector: LabelSelector {
                match_labels: Some(p.labels.clone()),
                ..Default::default()
            },
            strategy: p.single_writer.then(|| DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(0)),
                    max_unavailable: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(p.labels),
                    annotations: Some(p.annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(p.service_account.to_owned()),
                    automount_service_account_token: Some(true),
                    containers: vec![container],
                    volumes: Some(
                        ["state", "cache"]
                            .into_iter()
                            .map(|name| Volume {
                                name: name.to_owned(),
                                empty_dir: Some(EmptyDirVolumeSource::default()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    node_selector: p.node_selector,
                    tolerations: p.tolerations,
                    termination_grace_period_seconds: Some(60),
                    // ndots:5 would send every outbound name (1–4 dots) through all the
                    // cluster search domains first.
                    dns_config: Some(PodDNSConfig {
                        options: Some(vec![PodDNSConfigOption {
                            name: Some("ndots".to_owned()),
                            value: Some("2".to_owned()),
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// Labels selecting a pool's executor pods.
pub fn pool_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_owned(),
            "ari-executor".to_owned(),
        ),
        (names::LABEL_POOL.to_owned(), pool.to_owned()),
    ])
}

/// The Deployment of an `ExecutorPool`, owned by it: pods that serve every Agent naming the
/// pool, under the pool ServiceAccount (which may not create Tasks: pooled Agents do not
/// delegate in this version, and reads no Secret). `models`, `tools`, `signing` and `pulls`
/// are those granted to or named by any Agent of the pool that passed the marked-Secret rule
/// ([`crate::pool::grants`], [`crate::pool::secrets`]), by name: their keys reach the pod by
/// reference, as a dedicated executor's do. Their revisions roll the pods when a signing
/// Secret or a pull secret changes.
pub fn build_pool(
    pool: &ari_crds::ExecutorPool,
    settings: &Settings,
    attestation_public_key: &str,
    models: &[ExecutorModel],
    tools: &[ExecutorToolServer],
    signing: &crate::pool::secrets::Resolved,
    pulls: &crate::pool::secrets::Resolved,
) -> Deployment {
    let name = pool.name_any();
    let mut env_vars = vec![
        env("ARI_POOL_NAME", &name),
        env("ARI_CONCURRENCY", pool.spec.concurrency().to_string()),
        env("ARI_HOT_MODULES", pool.spec.hot_modules().to_string()),
    ];
    env_vars.extend(common_env(settings, attestation_public_key));
    // Pooled Agents may name `module.image`: pulls follow the operator admin's registry rules.
    for (var, value) in settings.registry.network_env() {
        env_vars.push(env(var, value));
    }
    env_vars.extend(model_env(models));
    env_vars.extend(tool_env(tools));
    env_vars.extend(pool_secret_env(SIGNING_KEYS_ENV, &signing.usable));
    env_vars.extend(pool_secret_env(PULL_SECRETS_ENV, &pulls.usable));
    let mut annotations = BTreeMap::new();
    for (annotation, revision) in [
        (names::ANNOTATION_SIGNING_SECRETS, &signing.revision),
        (names::ANNOTATION_PULL_SECRETS, &pulls.revision),
    ] {
        if !revision.is_empty() {
            annotations.insert(annotation.to_owned(), revision.clone());
        }
    }
    assemble(
        ExecutorPods {
            name: names::pool_deployment_name(&name),
            namespace: pool.namespace(),
            labels: pool_labels(&name),
            owner: pool.controller_owner_ref(&()),
            replicas: pool.spec.replicas().max(0),
            single_writer: false,
            env: env_vars,
            annotations,
            resources: pool.spec.resources.clone(),
            node_selector: pool.spec.node_selector.clone(),
            tolerations: pool.spec.tolerations.clone(),
            service_account: names::POOL_SERVICE_ACCOUNT,
        },
        settings,
    )
}

/// The granted models for the executor: their specs in `ARI_MODELS` (no key in them) and each
/// key by reference, resolved by the kubelet like the signing key. `optional`: a key missing
/// from its Secret makes that model's calls fail, not the executor pod fail to start.
fn model_env(models: &[ExecutorModel]) -> Vec<EnvVar> {
    if models.is_empty() {
        return Vec::new();
    }
    // Serialising plain data cannot fail; an empty list would leave the models unavailable.
    let list = serde_json::to_string(models).unwrap_or_else(|_| "[]".to_owned());
    let mut vars = vec![env(MODELS_ENV, list)];
    for m in models {
        if let (Some(var), Some(secret)) = (&m.key_env, &m.spec.credentials) {
            vars.push(secret_env(var, secret));
        }
    }
    vars
}

/// A pool's signing keys or pull secrets: the pairs in `list_env` (`ARI_SIGNING_KEYS`,
/// `ARI_PULL_SECRETS`; no key in them) and each key by reference, optional: a key missing from
/// its Secret fails its Agents' Tasks, not the pod that serves their neighbours too (a
/// dedicated pod's is required).
fn pool_secret_env(list_env: &str, keys: &[PoolSecretKey]) -> Vec<EnvVar> {
    if keys.is_empty() {
        return Vec::new();
    }
    // Serialising plain data cannot fail; an empty list would leave the keys unused.
    let list = serde_json::to_string(keys).unwrap_or_else(|_| "[]".to_owned());
    let mut vars = vec![env(list_env, list)];
    vars.extend(keys.iter().map(|k| secret_env(&k.key_env, &k.secret_ref)));
    vars
}

/// Variable `var` filled by the kubelet from `secret`, optional (a missing key is the
/// capability's `unavailable`, not a pod that cannot start).
fn secret_env(var: &str, secret: &ari_crds::SecretKeyRef) -> EnvVar {
    EnvVar {
        name: var.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret.key.clone(),
                optional: Some(true),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The granted MCP servers for the executor: their specs in `ARI_TOOL_SERVERS` (no credential
/// in them) and each token and header value by reference, resolved by the kubelet. `optional`:
/// a key missing from its Secret makes that server's calls fail, not the pod fail to start.
fn tool_env(servers: &[ExecutorToolServer]) -> Vec<EnvVar> {
    if servers.is_empty() {
        return Vec::new();
    }
    // Serialising plain data cannot fail; an empty list would leave the servers unavailable.
    let list = serde_json::to_string(servers).unwrap_or_else(|_| "[]".to_owned());
    let mut vars = vec![env(TOOL_SERVERS_ENV, list)];
    for s in servers {
        let token = s.token_env.iter().zip(&s.spec.token);
        let headers = s
            .header_envs
            .iter()
            .zip(s.spec.headers.iter().map(|h| &h.value_from));
        for (var, secret) in token.chain(headers) {
            vars.push(secret_env(var, secret));
        }
    }
    vars
}

/// What an executor needs to pull `module.image`: the pinned reference, the registries the
/// operator's admin allows plain HTTP to, and the pull secret, which the kubelet resolves (as
/// for the signing key) so the executor's ServiceAccount needs no Secret access.
fn image_env(image: &ResolvedImage, settings: &Settings) -> Vec<EnvVar> {
    let mut vars = vec![env("ARI_MODULE_IMAGE", &image.pinned)];
    // The admin's network rules for registries: executors pull under the same ones.
    for (name, value) in settings.registry.network_env() {
        vars.push(env(name, value));
    }
    if let Some(secret) = &image.pull_secret {
        vars.push(EnvVar {
            name: "ARI_MODULE_PULL_SECRET".to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.clone(),
                    key: names::DOCKER_CONFIG_JSON_KEY.to_owned(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(executor: serde_json::Value) -> Agent {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "a", "namespace": "n", "uid": "u"},
            "spec": {"module": {"configMap": {"name": "m", "key": "k"}}, "executor": executor}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn container(d: &Deployment) -> Container {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|p| p.containers[0].clone())
            .unwrap_or_else(|| panic!("no pod spec"))
    }

    #[test]
    fn an_agent_cannot_choose_the_executor_image() {
        let settings = Settings::default();
        let d = build(
            &agent(serde_json::json!({"image": "busybox"})),
            "sha256:x",
            None,
            &settings,
            "pk",
            &[],
            &[],
        );
        assert_eq!(container(&d).image, Some(settings.executor_image));
    }

    #[test]
    fn executors_are_told_guest_priorities_only_when_the_operator_is_set_to_flat() {
        let priorities = |settings: &Settings| {
            let d = build(
                &agent(serde_json::json!({})),
                "sha256:x",
                None,
                settings,
                "pk",
                &[],
                &[],
            );
            container(&d)
                .env
                .unwrap_or_default()
                .into_iter()
                .find(|e| e.name == GUEST_PRIORITIES_ENV)
                .and_then(|e| e.value)
        };
        assert_eq!(priorities(&Settings::default()), None);
        let flat = Settings {
            guest_priorities: GuestPriorities::Flat,
            ..Settings::default()
        };
        assert_eq!(priorities(&flat).as_deref(), Some("flat"));
    }

    #[test]
    fn executors_get_requests_the_published_key_and_a_short_ndots() {
        let d = build(
            &agent(serde_json::json!({})),
            "sha256:x",
            None,
            &Settings::default(),
            "pk",
            &[],
            &[],
        );
        let c = container(&d);
        let requests = c.resources.and_then(|r| r.requests).unwrap_or_default();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        let env = c.env.unwrap_or_default();
        let pk = env.iter().find(|e| e.name == "ARI_ATTESTATION_PUBLIC_KEY");
        assert_eq!(pk.and_then(|e| e.value.as_deref()), Some("pk"));
        let dns = d
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.dns_config)
            .and_then(|c| c.options)
            .unwrap_or_default();
        assert!(dns.iter().any(|o| o.name.as_deref() == Some("ndots")));
    }

    #[test]
    fn an_image_agent_gets_the_pinned_reference_and_its_pull_secret_by_reference() {
        let settings = Settings {
            registry: ari_oci::ClientOptions {
                insecure_registries: vec!["127.0.0.1:5000".into()],
                delegate_hosts: vec!["auth.docker.io".into()],
                ..Default::default()
            },
            ..Settings::default()
        };
        let pinned = format!("127.0.0.1:5000/echo@sha256:{}", "a".repeat(64));
        let image = ResolvedImage {
            pinned: pinned.clone(),
            module_digest: format!("sha256:{}", "b".repeat(64)),
            pull_secret: Some("reg".into()),
        };
        let d = build(
            &agent(serde_json::json!({})),
            &image.module_digest,
            Some(&image),
            &settings,
            "pk",
            &[],
            &[],
        );
        let env = container(&d).env.unwrap_or_default();
        let by = |n: &str| env.iter().find(|e| e.name == n).cloned();
        assert_eq!(by("ARI_MODULE_IMAGE").and_then(|e| e.value), Some(pinned));
        assert_eq!(
            by("ARI_INSECURE_REGISTRIES")
                .and_then(|e| e.value)
                .as_deref(),
            Some("127.0.0.1:5000")
        );
        assert_eq!(
            by("ARI_REGISTRY_DELEGATE_HOSTS").and_then(|e| e.value),
            Some("auth.docker.io".to_owned())
        );
        // Internal addresses stay refused in the executor too (nothing says otherwise).
        assert_eq!(by("ARI_REGISTRY_ALLOW_INTERNAL_ADDRESSES"), None);
        let secret = by("ARI_MODULE_PULL_SECRET")
            .and_then(|e| e.value_from)
            .and_then(|v| v.secret_key_ref);
        assert_eq!(
            secret.map(|s| (s.name, s.key)),
            Some(("reg".to_owned(), ".dockerconfigjson".to_owned()))
        );
        let plain = build(
            &agent(serde_json::json!({})),
            "sha256:x",
            None,
            &settings,
            "pk",
            &[],
            &[],
        );
        let plain_env = container(&plain).env.unwrap_or_default();
        assert!(
            !plain_env
                .iter()
                .any(|e| e.name.starts_with("ARI_MODULE_IMAGE")
                    || e.name == "ARI_MODULE_PULL_SECRET")
        );
    }

    #[test]
    fn model_keys_reach_the_executor_by_reference_and_the_spec_list_holds_none() {
        let spec: ari_crds::ModelConfigSpec = serde_json::from_value(serde_json::json!({
            "provider": "OpenAI", "endpoint": "http://m:8000/v1", "model": "tiny",
            "credentials": {"name": "openai", "key": "apiKey"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let models = [ExecutorModel {
            name: "small".into(),
            spec,
            key_env: Some(ExecutorModel::key_env_name(0)),
        }];
        let d = build(
            &agent(serde_json::json!({})),
            "sha256:x",
            None,
            &Settings::default(),
            "pk",
            &models,
            &[],
        );
        let env = container(&d).env.unwrap_or_default();
        let by = |n: &str| env.iter().find(|e| e.name == n).cloned();
        let list = by(MODELS_ENV).and_then(|e| e.value).unwrap_or_default();
        let back: Vec<ExecutorModel> =
            serde_json::from_str(&list).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, models);
        let key = by("ARI_MODEL_KEY_0").unwrap_or_else(|| panic!("no key variable"));
        assert_eq!(key.value, None);
        let r = key.value_from.and_then(|v| v.secret_key_ref);
        assert_eq!(
            r.map(|s| (s.name, s.key, s.optional)),
            Some(("openai".to_owned(), "apiKey".to_owned(), Some(true)))
        );
        let plain = build(
            &agent(serde_json::json!({})),
            "sha256:x",
            None,
            &Settings::default(),
            "pk",
            &[],
            &[],
        );
        let plain_env = container(&plain).env.unwrap_or_default();
        assert!(!plain_env.iter().any(|e| e.name.starts_with("ARI_MODEL")));
    }

    #[test]
    fn tool_credentials_reach_the_executor_by_reference_and_the_spec_list_holds_none() {
        let spec: ari_crds::MCPServerSpec = serde_json::from_value(serde_json::json!({
            "url": "http://tools:8000/mcp",
            "token": {"name": "docs-token", "key": "token"},
            "headers": [{"name": "X-Tenant", "valueFrom": {"name": "docs-token", "key": "tenant"}}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let servers = [ExecutorToolServer {
            name: "docs".into(),
            spec,
            token_env: Some(ExecutorToolServer::token_env_name(0)),
            header_envs: vec![ExecutorToolServer::header_env_name(0, 0)],
        }];
        let d = build(
            &agent(serde_json::json!({})),
            "sha256:x",
            None,
            &Settings::default(),
            "pk",
            &[],
            &servers,
        );
        let env = container(&d).env.unwrap_or_default();
        let by = |n: &str| env.iter().find(|e| e.name == n).cloned();
        let list = by(TOOL_SERVERS_ENV)
            .and_then(|e| e.value)
            .unwrap_or_default();
        let back: Vec<ExecutorToolServer> =
            serde_json::from_str(&list).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, servers);
        for (var, key) in [
            ("ARI_TOOL_TOKEN_0", "token"),
            ("ARI_TOOL_HEADER_0_0", "tenant"),
        ] {
            let v = by(var).unwrap_or_else(|| panic!("no {var}"));
            assert_eq!(v.value, None);
            let r = v.value_from.and_then(|v| v.secret_key_ref);
            assert_eq!(
                r.map(|s| (s.name, s.key)),
                Some(("docs-token".to_owned(), key.to_owned()))
            );
        }
    }
}
