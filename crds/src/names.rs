//! Names, labels and keys shared by the operator and the executor.

/// Field manager of every server-side apply by the operator.
pub const OPERATOR_FIELD_MANAGER: &str = "ari-operator";
/// Field manager executors use for their status writes.
pub const EXECUTOR_FIELD_MANAGER: &str = "ari-executor";
/// ServiceAccount (and Role/RoleBinding) of the executors, one per namespace.
pub const EXECUTOR_SERVICE_ACCOUNT: &str = "ari-executor";
/// ServiceAccount of pool executors: the rights of `ari-executor`, its child Task writes bound
/// by the `executor-writes` policy to its pool (`spec.parent.pool`) instead of one Agent.
pub const POOL_SERVICE_ACCOUNT: &str = "ari-pool-executor";
/// Secret holding the namespace's attestation signing key.
pub const ATTESTATION_SECRET: &str = "ari-attestation-key";
/// Key in [`ATTESTATION_SECRET`]: the 32-byte Ed25519 secret key (seed) as 64 hex digits.
pub const ATTESTATION_PRIVATE_KEY: &str = "private-key";
/// Key in [`ATTESTATION_SECRET`]: the Ed25519 public key as 64 hex digits.
pub const ATTESTATION_PUBLIC_KEY: &str = "public-key";
/// Label a Secret must carry (value `"true"`) before an Agent may name it in
/// `capabilities.signing.secretRef`: a Secret is never a signing key by accident.
pub const LABEL_SIGNING_KEY: &str = "ari.dev/signing-key";
/// Label a Secret must carry (value `"true"`) before an Agent may name it in
/// `module.imagePullSecrets`: the executor gets the Secret through the kubelet, which does not
/// ask whether the Agent's author may read it.
pub const LABEL_PULL_SECRET: &str = "ari.dev/pull-secret";
/// Key of a `kubernetes.io/dockerconfigjson` Secret holding the docker config.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// Type a pull secret must have.
pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// Label on the operator-namespace source of a namespace's attestation key: that namespace.
pub const LABEL_ATTESTATION_FOR: &str = "ari.dev/attestation-key-for";

/// Name, in the operator's namespace, of the source of truth of `namespace`'s attestation
/// key; the tenant's [`ATTESTATION_SECRET`] is only a copy for the executor pods.
pub fn attestation_source_name(namespace: &str) -> String {
    format!("{ATTESTATION_SECRET}.{namespace}")
}

/// Label on executor pods and on task-output ConfigMaps: the Agent name.
pub const LABEL_AGENT: &str = "ari.dev/agent";
/// Label on a pool's executor pods: the `ExecutorPool`'s name.
pub const LABEL_POOL: &str = "ari.dev/pool";
/// Label on task-output ConfigMaps: the Task name.
pub const LABEL_TASK: &str = "ari.dev/task";
/// Label on a child Task: its parent Task's name (or uid when the name is too long for a label).
pub const LABEL_PARENT: &str = "ari.dev/parent";
/// Label on a Task created through the A2A gateway: the A2A `contextId` it belongs to.
pub const LABEL_A2A_CONTEXT: &str = "ari.dev/a2a-context";
/// Label on every turn of a conversation but the first (and on the first once the operator
/// saw a reply): the name of its first Task. `kubectl get tasks -l ari.dev/conversation=NAME`.
pub const LABEL_CONVERSATION: &str = "ari.dev/conversation";
/// Label on a turn that continues a conversation: its number (2 for the first reply).
pub const LABEL_TURN: &str = "ari.dev/turn";
/// Annotation on a Task created through the A2A gateway: who sent the message.
pub const ANNOTATION_A2A_CALLER: &str = "ari.dev/a2a-caller";
/// Annotation asking the executor to keep `status.liveLog` current while the Task runs: a
/// lease, the RFC 3339 time until which a gateway stream follows the Task. Only the gateway
/// sets it (the chart's admission policy refuses it from anyone else) and renews it while a
/// stream lasts, so live-log writes stop soon after the last follower leaves.
pub const ANNOTATION_LIVE_LOG: &str = "ari.dev/live-log";
/// How far ahead the gateway sets the [`ANNOTATION_LIVE_LOG`] lease; it renews it every third
/// of that while a stream follows the Task.
pub const LIVE_LOG_LEASE: std::time::Duration = std::time::Duration::from_secs(30);
/// Pod-template annotation: module digest (a change rolls the executors).
pub const ANNOTATION_MODULE_DIGEST: &str = "ari.dev/module-digest";
/// Pod-template annotation: hash of the Agent spec (a change rolls the executors).
pub const ANNOTATION_SPEC_HASH: &str = "ari.dev/spec-hash";
/// Pod-template annotation of a pool: a hash of its signing Secrets' versions. A pod reads its
/// keys only when it starts, so a key put right or rotated in its Secret rolls the pool.
pub const ANNOTATION_SIGNING_SECRETS: &str = "ari.dev/signing-secrets";
/// Pod-template annotation of a pool: a hash of its pull secrets' versions, as for its signing
/// Secrets (a pod reads its pull secrets only when it starts).
pub const ANNOTATION_PULL_SECRETS: &str = "ari.dev/pull-secrets";

/// Name of an Agent's executor Deployment.
pub fn executor_deployment_name(agent: &str) -> String {
    format!("{agent}-executor")
}

/// Name of an `ExecutorPool`'s Deployment. Never an Agent's: those end in `-executor`.
pub fn pool_deployment_name(pool: &str) -> String {
    format!("{pool}-pool")
}

/// Name of the ConfigMap holding a Task's large output.
pub fn output_configmap_name(task: &str) -> String {
    format!("{task}-output")
}

/// Key of a kept trace in its ConfigMap: the trace's JSON, gzip-compressed.
pub const TRACE_KEY: &str = "trace.json.gz";

/// Name of a Task's `index`th child: `<parent>-<index>`, or `task-<uid>-<index>` when the
/// parent's name leaves no room. The same on every attempt of the parent, so a parent that
/// runs again after losing its executor finds its child instead of starting a second one.
pub fn child_task_name(parent: &str, parent_uid: &str, index: u32) -> String {
    let plain = format!("{parent}-{index}");
    // Room for the child's own children and its output ConfigMap's suffix.
    if plain.len() + 16 <= 253 {
        plain
    } else {
        format!("task-{parent_uid}-{index}")
    }
}

/// Key of the output in that ConfigMap's `binaryData`.
pub const OUTPUT_KEY: &str = "output";

/// Whether `name` can name an object (a DNS-1123 subdomain); shared with the runtime, which
/// checks a guest's Agent name with it.
pub use ari_model::names::is_object_name;
