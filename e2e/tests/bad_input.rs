//! Bad input (issue 7, item 3): a table of invalid or hostile manifests, applied with kubectl as
//! a user would. Each is either rejected by the API server's schema with a message naming the
//! field, or accepted and then marked — a condition with its reason and an Event on the Agent,
//! or a failed Task with its reason. At the end no operator or executor container has
//! restarted (no panic, no crash loop) and the operator still serves a good Agent and Task.
//! Run: `cargo build --bins && scripts/build-agents.sh && cargo test -p ari-e2e --test bad_input`.

use std::collections::BTreeMap;

use anyhow::{Context, Result, ensure};
use ari_crds::{Agent, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::stress;
use ari_e2e::{trials, wait};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};

fn main() -> std::process::ExitCode {
    trials::run(vec![(
        "bad_manifests_are_rejected_or_marked_never_crash",
        bad_input,
    )])
}

/// What must become of one manifest.
#[derive(Debug, Clone)]
enum Want {
    /// `kubectl apply` fails and its message contains every string.
    Rejected(&'static [&'static str]),
    /// The Agent gets condition `type`=False with `reason`, and an Event with that reason.
    AgentMarked {
        agent: &'static str,
        condition: &'static str,
        reason: &'static str,
    },
    /// The Task ends Failed with `reason` (condition `Succeeded`=False, same reason) and a
    /// message containing the string.
    TaskFailed {
        task: &'static str,
        reason: TaskReason,
        message: &'static str,
    },
}

struct Case {
    name: &'static str,
    yaml: String,
    want: Want,
}

fn agent(name: &str, spec: &str) -> String {
    format!("apiVersion: ari.dev/v1alpha1\nkind: Agent\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

fn task(name: &str, spec: &str) -> String {
    format!("apiVersion: ari.dev/v1alpha1\nkind: Task\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// A valid module section: the echo component in ConfigMap `echo-module`.
const ECHO: &str = "  module:\n    configMap: {name: echo-module, key: module.wasm}\n";
const ZEROS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn rejected(name: &'static str, yaml: String, hints: &'static [&'static str]) -> Case {
    Case {
        name,
        yaml,
        want: Want::Rejected(hints),
    }
}

fn agent_marked(
    name: &'static str,
    spec: &str,
    condition: &'static str,
    reason: &'static str,
) -> Case {
    Case {
        name,
        yaml: agent(name, spec),
        want: Want::AgentMarked {
            agent: name,
            condition,
            reason,
        },
    }
}

fn task_failed(name: &'static str, spec: &str, reason: TaskReason, message: &'static str) -> Case {
    Case {
        name,
        yaml: task(name, spec),
        want: Want::TaskFailed {
            task: name,
            reason,
            message,
        },
    }
}

fn cases() -> Vec<Case> {
    use TaskReason::*;
    let with_limits = |l: &str| format!("{ECHO}  limits:\n{l}");
    let with_caps = |c: &str| format!("{ECHO}  capabilities:\n{c}");
    let with_executor = |e: &str| format!("{ECHO}  executor:\n{e}");
    let echo_task = |extra: &str| format!("  agentRef: {{name: echo}}\n  input: x\n{extra}");
    let hosts = |h: &str| with_caps(&format!("    network:\n      allowedHosts: [{h}]\n"));
    vec![
        // Agent: module source.
        rejected(
            "agent-no-module",
            agent("no-module", "  description: nothing\n"),
            // A module or a declaration (issue 31): neither is refused by the CRD's rule.
            &["exactly one of spec.module", "spec.declarative"],
        ),
        rejected(
            "agent-empty-module",
            agent("empty-module", "  module: {}\n"),
            &["exactly one of module.configMap, module.url or module.image"],
        ),
        rejected(
            "agent-two-sources",
            agent(
                "two-sources",
                &format!(
                    "  module:\n    configMap: {{name: m, key: k}}\n    url: https://example.invalid/a.wasm\n    sha256: \"{ZEROS}\"\n"
                ),
            ),
            &["exactly one of module.configMap, module.url or module.image"],
        ),
        rejected(
            "agent-url-without-digest",
            agent(
                "no-digest",
                "  module:\n    url: https://example.invalid/a.wasm\n",
            ),
            &["module.sha256 is required with module.url"],
        ),
        rejected(
            "agent-url-not-https",
            agent(
                "plain-http",
                &format!(
                    "  module:\n    url: http://example.invalid/a.wasm\n    sha256: \"{ZEROS}\"\n"
                ),
            ),
            &["module.url must be https"],
        ),
        rejected(
            "agent-url-file-scheme",
            agent(
                "file-url",
                &format!("  module:\n    url: file:///etc/passwd\n    sha256: \"{ZEROS}\"\n"),
            ),
            &["module.url must be https"],
        ),
        rejected(
            "agent-sha256-not-hex",
            agent(
                "bad-sha",
                "  module:\n    configMap: {name: echo-module, key: module.wasm}\n    sha256: not-a-digest\n",
            ),
            &["spec.module.sha256"],
        ),
        rejected(
            "agent-sha256-short",
            agent(
                "short-sha",
                "  module:\n    configMap: {name: echo-module, key: module.wasm}\n    sha256: \"abcd\"\n",
            ),
            &["spec.module.sha256"],
        ),
        rejected(
            "agent-configmap-name-empty",
            agent(
                "cm-empty",
                "  module:\n    configMap: {name: \"\", key: module.wasm}\n",
            ),
            &["spec.module.configMap.name"],
        ),
        rejected(
            "agent-configmap-not-object",
            agent("cm-string", "  module:\n    configMap: echo-module\n"),
            &["spec.module.configMap", "object"],
        ),
        // Agent: limits.
        rejected(
            "agent-fuel-string",
            agent("fuel-string", &with_limits("    fuel: lots\n")),
            &["spec.limits.fuel"],
        ),
        rejected(
            "agent-fuel-negative",
            agent("fuel-negative", &with_limits("    fuel: -5\n")),
            &["spec.limits.fuel"],
        ),
        rejected(
            "agent-fuel-zero",
            agent("fuel-zero", &with_limits("    fuel: 0\n")),
            &["spec.limits.fuel"],
        ),
        rejected(
            "agent-fuel-too-large",
            agent("fuel-huge", &with_limits("    fuel: 10000000000000\n")),
            &["spec.limits.fuel"],
        ),
        rejected(
            "agent-fuel-float",
            agent("fuel-float", &with_limits("    fuel: 1.5\n")),
            &["spec.limits.fuel"],
        ),
        rejected(
            "agent-memory-zero",
            agent("mem-zero", &with_limits("    memoryBytes: 0\n")),
            &["spec.limits.memoryBytes"],
        ),
        rejected(
            "agent-memory-negative",
            agent("mem-negative", &with_limits("    memoryBytes: -1\n")),
            &["spec.limits.memoryBytes"],
        ),
        rejected(
            "agent-timeout-zero",
            agent("timeout-zero", &with_limits("    timeoutSeconds: 0\n")),
            &["spec.limits.timeoutSeconds"],
        ),
        rejected(
            "agent-timeout-too-long",
            agent(
                "timeout-huge",
                &with_limits("    timeoutSeconds: 1000000\n"),
            ),
            &["spec.limits.timeoutSeconds"],
        ),
        rejected(
            "agent-max-output-negative",
            agent("out-negative", &with_limits("    maxOutputBytes: -1\n")),
            &["spec.limits.maxOutputBytes"],
        ),
        rejected(
            "agent-max-input-zero",
            agent("in-zero", &with_limits("    maxInputBytes: 0\n")),
            &["spec.limits.maxInputBytes"],
        ),
        rejected(
            "agent-limits-list",
            agent("limits-list", &format!("{ECHO}  limits: [1, 2]\n")),
            &["spec.limits", "object"],
        ),
        // Agent: executor pool.
        rejected(
            "agent-replicas-negative",
            agent("rep-negative", &with_executor("    replicas: -1\n")),
            &["spec.executor.replicas"],
        ),
        rejected(
            "agent-replicas-too-many",
            agent("rep-huge", &with_executor("    replicas: 1000\n")),
            &["spec.executor.replicas"],
        ),
        rejected(
            "agent-concurrency-zero",
            agent("conc-zero", &with_executor("    concurrency: 0\n")),
            &["spec.executor.concurrency"],
        ),
        rejected(
            // No Agent may choose the executor image (issue 13, item 2): not a field.
            "agent-image-not-a-field",
            agent("image-set", &with_executor("    image: busybox\n")),
            &["unknown field", "image"],
        ),
        rejected(
            "agent-tolerations-string",
            agent("tol-string", &with_executor("    tolerations: all\n")),
            &["spec.executor.tolerations"],
        ),
        // Agent: capabilities.
        rejected(
            "agent-unknown-capability",
            agent("teleport", &with_caps("    teleport: {}\n")),
            &["unknown field", "teleport"],
        ),
        rejected(
            "agent-storage-zero",
            agent("storage-zero", &with_caps("    storage: {maxBytes: 0}\n")),
            &["spec.capabilities.storage.maxBytes"],
        ),
        rejected(
            "agent-storage-no-quota",
            agent("storage-empty", &with_caps("    storage: {}\n")),
            &["spec.capabilities.storage.maxBytes", "Required value"],
        ),
        rejected(
            "agent-hosts-not-list",
            agent(
                "hosts-string",
                &with_caps("    network:\n      allowedHosts: https://api.example.com\n"),
            ),
            &["spec.capabilities.network.allowedHosts"],
        ),
        rejected(
            "agent-hosts-empty-entry",
            agent("hosts-empty", &hosts("\"\"")),
            &["spec.capabilities.network.allowedHosts"],
        ),
        rejected(
            "agent-signing-no-secret",
            agent("sign-nosecret", &with_caps("    signing: {keyId: k}\n")),
            &["spec.capabilities.signing.secretRef", "Required value"],
        ),
        rejected(
            "agent-mode-unknown",
            agent("mode-bogus", &format!("{ECHO}  mode: sideways\n")),
            &["spec.mode", "Unsupported value"],
        ),
        rejected(
            "agent-description-too-long",
            agent(
                "desc-long",
                &format!("{ECHO}  description: {}\n", "d".repeat(5000)),
            ),
            &["spec.description"],
        ),
        rejected(
            "agent-unknown-spec-field",
            agent("unknown-field", &format!("{ECHO}  priority: high\n")),
            &["unknown field", "spec.priority"],
        ),
        rejected(
            "agent-bad-name",
            agent("Bad_Name", ECHO),
            &["metadata.name", "RFC 1123"],
        ),
        // Agent: accepted by the schema, refused by the operator.
        agent_marked(
            "hosts-with-path",
            &hosts("\"https://api.example.com/v1\""),
            "Valid",
            "Invalid",
        ),
        agent_marked(
            "hosts-userinfo",
            &hosts("\"https://allowed.example@evil.example\""),
            "Valid",
            "Invalid",
        ),
        agent_marked(
            "hosts-ftp",
            &hosts("\"ftp://files.example.com\""),
            "Valid",
            "Invalid",
        ),
        agent_marked(
            "hosts-no-scheme",
            &hosts("\"api.example.com\""),
            "Valid",
            "Invalid",
        ),
        agent_marked(
            "hosts-mid-wildcard",
            &hosts("\"https://api.*.example.com\""),
            "Valid",
            "Invalid",
        ),
        agent_marked(
            "hosts-bad-port",
            &hosts("\"https://api.example.com:99999\""),
            "Valid",
            "Invalid",
        ),
        agent_marked(
            "hosts-empty-label",
            &hosts("\"https://api..example.com\""),
            "Valid",
            "Invalid",
        ),
        // Agent: module bytes.
        agent_marked(
            "cm-missing",
            "  module:\n    configMap: {name: no-such-configmap, key: module.wasm}\n",
            "ModuleResolved",
            "ConfigMapNotFound",
        ),
        agent_marked(
            "cm-key-missing",
            "  module:\n    configMap: {name: echo-module, key: other.wasm}\n",
            "ModuleResolved",
            "KeyMissing",
        ),
        agent_marked(
            "digest-mismatch",
            &format!(
                "  module:\n    configMap: {{name: echo-module, key: module.wasm}}\n    sha256: \"{ZEROS}\"\n"
            ),
            "ModuleResolved",
            "DigestMismatch",
        ),
        agent_marked(
            "garbage-bytes",
            "  module:\n    configMap: {name: garbage-module, key: module.wasm}\n",
            "ModuleResolved",
            "InvalidModule",
        ),
        agent_marked(
            "core-module",
            "  module:\n    configMap: {name: core-module, key: module.wasm}\n",
            "ModuleResolved",
            "InvalidModule",
        ),
        agent_marked(
            "empty-component",
            "  module:\n    configMap: {name: empty-component, key: module.wasm}\n",
            "ModuleResolved",
            "InvalidModule",
        ),
        agent_marked(
            "url-unreachable",
            &format!(
                "  module:\n    url: https://127.0.0.1:1/agent.wasm\n    sha256: \"{ZEROS}\"\n"
            ),
            "Ready",
            "NoExecutorAvailable",
        ),
        agent_marked(
            "text-in-data",
            "  module:\n    configMap: {name: text-module, key: module.wasm}\n",
            "ModuleResolved",
            "KeyMissing",
        ),
        // Task: schema.
        rejected(
            "task-no-agent-ref",
            task("no-ref", "  input: x\n"),
            &["spec.agentRef", "Required value"],
        ),
        rejected(
            "task-agent-ref-empty",
            task("ref-empty", "  agentRef: {name: \"\"}\n  input: x\n"),
            &["spec.agentRef.name"],
        ),
        rejected(
            "task-no-input",
            task("no-input", "  agentRef: {name: echo}\n"),
            &["exactly one of input, inputBase64, inputFrom"],
        ),
        rejected(
            "task-two-inputs",
            task(
                "two-inputs",
                "  agentRef: {name: echo}\n  input: a\n  inputBase64: YQ==\n",
            ),
            &["exactly one of input, inputBase64, inputFrom"],
        ),
        rejected(
            "task-input-not-string",
            task("input-int", "  agentRef: {name: echo}\n  input: 12345\n"),
            &["spec.input", "string"],
        ),
        rejected(
            "task-input-not-base64",
            task(
                "bad-b64",
                "  agentRef: {name: echo}\n  inputBase64: \"!!not base64!!\"\n",
            ),
            &["spec.inputBase64"],
        ),
        rejected(
            "task-input-too-large",
            task(
                "huge-input",
                &format!(
                    "  agentRef: {{name: echo}}\n  input: {}\n",
                    "x".repeat(1_048_577)
                ),
            ),
            &["spec.input", "Too long"],
        ),
        rejected(
            "task-input-from-both",
            task(
                "from-both",
                "  agentRef: {name: echo}\n  inputFrom:\n    configMapKeyRef: {name: a, key: b}\n    secretKeyRef: {name: a, key: b}\n",
            ),
            &["exactly one of inputFrom.configMapKeyRef or inputFrom.secretKeyRef"],
        ),
        rejected(
            "task-fuel-zero",
            task("fuel-zero", &echo_task("  fuel: 0\n")),
            &["spec.fuel"],
        ),
        rejected(
            "task-fuel-negative",
            task("fuel-negative", &echo_task("  fuel: -1\n")),
            &["spec.fuel"],
        ),
        rejected(
            "task-fuel-string",
            task("fuel-string", &echo_task("  fuel: plenty\n")),
            &["spec.fuel"],
        ),
        rejected(
            "task-deadline-zero",
            task("deadline-zero", &echo_task("  deadlineSeconds: 0\n")),
            &["spec.deadlineSeconds"],
        ),
        rejected(
            "task-retries-too-many",
            task("retries-huge", &echo_task("  retries: 11\n")),
            &["spec.retries"],
        ),
        rejected(
            "task-retries-negative",
            task("retries-negative", &echo_task("  retries: -1\n")),
            &["spec.retries"],
        ),
        rejected(
            "task-ttl-negative",
            task(
                "ttl-negative",
                &echo_task("  ttlSecondsAfterFinished: -1\n"),
            ),
            &["spec.ttlSecondsAfterFinished"],
        ),
        rejected(
            "task-seed-not-hex",
            task(
                "seed-nothex",
                &echo_task(&format!("  seed: \"{}\"\n", "zz".repeat(32))),
            ),
            &["spec.seed"],
        ),
        rejected(
            "task-seed-short",
            task("seed-short", &echo_task("  seed: \"abcd\"\n")),
            &["spec.seed"],
        ),
        rejected(
            "task-unknown-capability",
            task(
                "cap-unknown",
                &echo_task("  requirements:\n    capabilities: [teleport]\n"),
            ),
            &["spec.requirements.capabilities", "Unsupported value"],
        ),
        rejected(
            "task-storage-bytes-zero",
            task(
                "storage-zero",
                &echo_task("  requirements:\n    storageBytes: 0\n"),
            ),
            &["spec.requirements.storageBytes"],
        ),
        rejected(
            "task-unknown-field",
            task("unknown-field", &echo_task("  priority: high\n")),
            &["unknown field", "spec.priority"],
        ),
        rejected(
            "task-wrong-kind-field",
            task("status-in-spec", &echo_task("  phase: Succeeded\n")),
            &["unknown field", "spec.phase"],
        ),
        // Task: accepted, then failed with its reason.
        task_failed(
            "missing-agent",
            "  agentRef: {name: no-such-agent}\n  input: x\n",
            CapabilityDenied,
            "not found",
        ),
        task_failed(
            "fuel-above-limit",
            &echo_task("  fuel: 999999999999\n"),
            CapabilityDenied,
            "limits.fuel",
        ),
        task_failed(
            "needs-network",
            &echo_task("  requirements:\n    capabilities: [network]\n"),
            CapabilityDenied,
            "network",
        ),
        task_failed(
            "needs-host",
            &echo_task("  requirements:\n    hosts: [\"https://evil.example\"]\n"),
            CapabilityDenied,
            "network",
        ),
        task_failed(
            "needs-memory",
            &echo_task("  requirements:\n    memoryBytes: 68719476736\n"),
            CapabilityDenied,
            "memoryBytes",
        ),
        task_failed(
            "input-over-limit",
            "  agentRef: {name: small-input}\n  input: this input is longer than sixteen bytes\n",
            HostError,
            "input",
        ),
        task_failed(
            "input-cm-missing",
            "  agentRef: {name: echo}\n  inputFrom:\n    configMapKeyRef: {name: no-such-configmap, key: k}\n",
            HostError,
            "no-such-configmap",
        ),
        task_failed(
            "input-key-missing",
            "  agentRef: {name: echo}\n  inputFrom:\n    configMapKeyRef: {name: input-data, key: nope}\n",
            HostError,
            "nope",
        ),
        task_failed(
            "input-secret-missing",
            "  agentRef: {name: echo}\n  inputFrom:\n    secretKeyRef: {name: no-such-secret, key: k}\n",
            HostError,
            "no-such-secret",
        ),
    ]
}

fn bad_input(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("bad-input", |client, ns| async move {
        // What the cases refer to: a good echo Agent, modules good and bad, input data.
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        binary_configmap(&client, &ns, "garbage-module", garbage(64 * 1024)).await?;
        // A valid core module (no component): magic, version 1, no sections.
        binary_configmap(&client, &ns, "core-module", b"\0asm\x01\0\0\0".to_vec()).await?;
        // A valid, empty component: it exports nothing, certainly not the agent interface.
        binary_configmap(&client, &ns, "empty-component", b"\0asm\x0d\0\x01\0".to_vec()).await?;
        text_configmap(&client, &ns, "text-module", "module.wasm", "not binary").await?;
        text_configmap(&client, &ns, "input-data", "k", "v").await?;
        // Only ConfigMaps marked for Task input may be read (docs/capabilities.md).
        ctx.kubectl_ok(["label", "configmap", "input-data", "-n", &ns, "ari.dev/task-input=true"])?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        ctx.apply_ok(&ns, &agent_yaml("small-input", "echo-module", 1, "  limits:\n    maxInputBytes: 16\n"))?;
        agent_ready(&client, &ns, "echo").await?;
        agent_ready(&client, &ns, "small-input").await?;

        // A ConfigMap over the API server's 1 MiB object limit never exists...
        let huge = ConfigMap {
            metadata: ObjectMeta {
                name: Some("huge-module".into()),
                ..ObjectMeta::default()
            },
            binary_data: Some(BTreeMap::from([("module.wasm".to_string(), ByteString(garbage(1_100_000)))])),
            ..ConfigMap::default()
        };
        let err = Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &huge)
            .await
            .err()
            .context("a ConfigMap over 1 MiB was accepted")?;
        ensure!(err.to_string().contains("Too long"), "huge ConfigMap refused unclearly: {err}");
        // ...so an Agent naming it is marked ConfigMapNotFound.
        let mut table = cases();
        table.push(agent_marked(
            "huge-configmap",
            "  module:\n    configMap: {name: huge-module, key: module.wasm}\n",
            "ModuleResolved",
            "ConfigMapNotFound",
        ));

        let mut failures = Vec::new();
        let (mut rejected, mut marked) = (0, 0);
        for case in &table {
            let out = ctx.apply(&ns, &case.yaml)?;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            match &case.want {
                Want::Rejected(hints) => {
                    rejected += 1;
                    if out.status.success() {
                        failures.push(format!("{}: accepted, want rejected", case.name));
                    } else if let Some(h) = hints.iter().find(|h| !stderr.contains(**h)) {
                        failures.push(format!("{}: message lacks {h:?}: {}", case.name, stderr.trim()));
                    }
                }
                _ => {
                    marked += 1;
                    if !out.status.success() {
                        failures.push(format!("{}: rejected, want accepted and marked: {}", case.name, stderr.trim()));
                    }
                }
            }
        }
        for case in &table {
            let result = match &case.want {
                Want::Rejected(_) => Ok(()),
                Want::AgentMarked { agent, condition, reason } => {
                    agent_marked_check(&client, &ns, agent, condition, reason).await
                }
                Want::TaskFailed { task, reason, message } => {
                    task_failed_check(&client, &ns, task, *reason, message).await
                }
            };
            if let Err(e) = result {
                failures.push(format!("{}: {e:#}", case.name));
            }
        }
        eprintln!(
            "bad_input: {} manifests tried ({rejected} rejected by the schema, {marked} accepted and marked), {} wrong",
            table.len() + 1,
            failures.len()
        );
        ensure!(failures.is_empty(), "{} cases went wrong:\n{}", failures.len(), failures.join("\n"));

        // No panic, no crash loop: nothing restarted, and no pod waits in a back-off.
        no_restarts(&client, &ns).await?;
        no_restarts(&client, OPERATOR_NS).await?;

        // The operator still serves.
        ctx.module_configmap(&ns, "after-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("after", "after-module", 1, ""))?;
        agent_ready(&client, &ns, "after").await?;
        ctx.apply_ok(&ns, &task_yaml("after", "after", "still serving", ""))?;
        let t = task_finished(&client, &ns, "after", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        no_restarts(&client, &ns).await?;
        no_restarts(&client, OPERATOR_NS).await
    })
}

/// Deterministic non-Wasm bytes.
fn garbage(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn binary_configmap(client: &Client, ns: &str, name: &str, bytes: Vec<u8>) -> Result<()> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        binary_data: Some(BTreeMap::from([(
            "module.wasm".to_string(),
            ByteString(bytes),
        )])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

async fn text_configmap(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
    value: &str,
) -> Result<()> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

async fn agent_marked_check(
    client: &Client,
    ns: &str,
    name: &str,
    condition: &str,
    reason: &str,
) -> Result<()> {
    let agents: Api<Agent> = Api::namespaced(client.clone(), ns);
    wait::until(
        &format!("Agent {name} {condition}=False/{reason} with an Event"),
        wait::DEFAULT,
        || async {
            let a = agents.get(name).await.map_err(|e| e.to_string())?;
            let conds = a.status.clone().unwrap_or_default().conditions;
            let c = conds
                .iter()
                .find(|c| c.type_ == condition)
                .ok_or_else(|| format!("no {condition} condition: {conds:?}"))?;
            if c.status != "False" || c.reason != reason {
                return Err(format!(
                    "{condition}={} reason {} ({})",
                    c.status, c.reason, c.message
                ));
            }
            let events = events_for(client, ns, name)
                .await
                .map_err(|e| e.to_string())?;
            if events.iter().any(|e| e.reason.as_deref() == Some(reason)) {
                Ok(())
            } else {
                Err(format!(
                    "no Event with reason {reason}; events: {:?}",
                    events.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await?;
    Ok(())
}

async fn task_failed_check(
    client: &Client,
    ns: &str,
    name: &str,
    reason: TaskReason,
    message: &str,
) -> Result<()> {
    let t = task_finished(client, ns, name, wait::DEFAULT).await?;
    expect_reason(&t, TaskPhase::Failed, reason)?;
    let s = t.status.clone().unwrap_or_default();
    let cond = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Succeeded")
        .context("no Succeeded condition")?;
    ensure!(
        cond.status == "False" && cond.reason == reason.as_str(),
        "Succeeded condition {}/{}",
        cond.status,
        cond.reason
    );
    let m = s.message.unwrap_or_default();
    ensure!(m.contains(message), "message {m:?} lacks {message:?}");
    Ok(())
}

/// Fails if any container in `ns` restarted or waits in a back-off.
async fn no_restarts(client: &Client, ns: &str) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    let mut bad = Vec::new();
    for p in &pods.items {
        let restarts = stress::restart_count(p);
        let waiting: Vec<String> = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .filter(|r| r.contains("BackOff"))
            .collect();
        if restarts > 0 || !waiting.is_empty() {
            bad.push(format!("{}: {restarts} restarts {waiting:?}", p.name_any()));
        }
    }
    ensure!(bad.is_empty(), "containers restarted in {ns}: {bad:?}");
    Ok(())
}
