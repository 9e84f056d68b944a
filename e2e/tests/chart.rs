//! The Helm chart on a real control plane: `helm install` (CRDs from the chart, the operator
//! and A2A gateway pods run by the node agent under their own ServiceAccount tokens), the
//! example manifests, RBAC proven from the executor's, the operator's and the gateway's own
//! tokens, `helm upgrade` rolling the operator, and `helm uninstall` leaving no operator or
//! gateway objects (CRDs stay). Also: strict lint, the values schema, and
//! `deploy/operator.yaml` as the chart rendered (no drift).
//! One cluster per binary; trials run in three phases (install-time, upgrade, uninstall).
//! Run: `cargo build --bins && cargo test -p ari-e2e --test chart`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use ari_crds::{Agent, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{namespace_user, trials, wait};
use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{
    TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client, Resource, ResourceExt};

/// Release name; objects are `<release>-operator`, as in deploy/operator.yaml.
const RELEASE: &str = "ari";
const OPERATOR: &str = "ari-operator";
const EXECUTOR_SA: &str = "ari-executor";
/// The A2A gateway's Deployment, Service, ServiceAccount and ClusterRole.
const GATEWAY: &str = "ari-gateway";
/// Its ClusterRole for TokenReviews and SubjectAccessReviews (cluster-scoped).
const GATEWAY_REVIEWS: &str = "ari-gateway-reviews";

fn main() -> std::process::ExitCode {
    // Phases run one after the other; trials within a phase run in parallel.
    trials::run_phases(
        start,
        vec![
            vec![
                ("helm_lint_strict_and_values_schema", lint_and_schema),
                ("deploy_manifest_is_the_rendered_chart", deploy_manifest),
                ("example_manifests_succeed_under_the_chart", examples),
                (
                    "executor_token_does_its_job_and_nothing_more",
                    executor_rbac,
                ),
                (
                    "an_executor_creates_and_cancels_only_children_of_its_own_agent",
                    executor_writes,
                ),
                (
                    "operator_token_holds_only_what_the_chart_grants",
                    operator_rbac,
                ),
                (
                    "gateway_is_ready_and_its_token_holds_only_what_the_chart_grants",
                    gateway_rbac,
                ),
            ],
            vec![("helm_upgrade_with_new_values_rolls_the_operator", upgrade)],
            vec![(
                "helm_uninstall_leaves_no_operator_objects_and_keeps_crds",
                uninstall,
            )],
            // After the cluster-wide release is gone, so no other operator touches the namespaces.
            vec![(
                "watch_namespace_release_manages_only_its_namespace",
                scoped_release,
            )],
        ],
    )
}

/// A cluster and node agent (no CRDs: the chart installs them) with the chart installed.
fn start() -> Result<Ctx> {
    let ctx = Ctx::bare()?;
    install(&ctx)?;
    Ok(ctx)
}

fn chart() -> PathBuf {
    repo().join("charts/ari")
}

/// The built `helm`, with its config/cache/data kept in the test's work directory.
fn helm(ctx: &Ctx, args: &[&str]) -> Result<std::process::Output> {
    let home = ctx.work.path().join("helm");
    Command::new(ctx.cluster.bin_dir().join("helm"))
        .args(args)
        .arg("--kubeconfig")
        .arg(ctx.cluster.kubeconfig_path())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .context("running helm")
}

fn helm_ok(ctx: &Ctx, args: &[&str]) -> Result<String> {
    let out = helm(ctx, args)?;
    ensure!(
        out.status.success(),
        "helm {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `helm install` with default values, as docs/install.md says; then the operator is Ready.
fn install(ctx: &Ctx) -> Result<()> {
    // The operator pod must pass the `restricted` Pod Security Standard, enforced here.
    ctx.kubectl_ok(["create", "namespace", OPERATOR_NS])?;
    restrict(ctx, OPERATOR_NS)?;
    let chart = chart().display().to_string();
    let notes = helm_ok(
        ctx,
        &[
            "install",
            RELEASE,
            &chart,
            "--namespace",
            OPERATOR_NS,
            "--create-namespace",
        ],
    )?;
    ensure!(
        notes.contains("kubectl apply") && notes.contains("make-agent-configmap.sh"),
        "NOTES do not tell the user what to apply next:\n{notes}"
    );
    ensure!(
        notes.contains("port-forward svc/ari-gateway 8080:80")
            && notes.contains("/.well-known/agent-card.json"),
        "NOTES do not tell the user how to reach the A2A gateway:\n{notes}"
    );
    ctx.kubectl_ok([
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/agents.ari.dev",
        "crd/tasks.ari.dev",
    ])?;
    ctx.wait_operator_ready()
}

/// Enforces the `restricted` Pod Security Standard on `ns`, and shows it is enforced: a
/// privileged pod is refused.
fn restrict(ctx: &Ctx, ns: &str) -> Result<()> {
    ctx.kubectl_ok([
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ])?;
    let out = ctx.kubectl(&[
        "run",
        "privileged-probe",
        "-n",
        ns,
        "--image=ari-executor:0.1.0",
        "--privileged",
        "--dry-run=server",
    ])?;
    ensure!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("restricted"),
        "Pod Security admission did not refuse a privileged pod in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `helm template` of the chart with `--set` values.
fn template(ctx: &Ctx, sets: &[&str]) -> Result<String> {
    let chart = chart().display().to_string();
    let mut args = vec!["template", RELEASE, &chart, "--namespace", OPERATOR_NS];
    for s in sets {
        args.extend(["--set", s]);
    }
    helm_ok(ctx, &args)
}

/// The documents of a rendered manifest stream.
fn documents(yaml: &str) -> Result<Vec<serde_yaml::Value>> {
    let mut docs = Vec::new();
    for d in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_yaml::Value = serde::Deserialize::deserialize(d)?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn kinds(yaml: &str) -> Result<BTreeSet<String>> {
    Ok(documents(yaml)?
        .iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_owned))
        .collect())
}

/// The rendered object of `kind` named `name`.
fn object<'a>(
    docs: &'a [serde_yaml::Value],
    kind: &str,
    name: &str,
) -> Option<&'a serde_yaml::Value> {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
}

/// The rendered object of `kind` named `name`, typed.
fn typed<K: serde::de::DeserializeOwned>(
    docs: &[serde_yaml::Value],
    kind: &str,
    name: &str,
) -> Result<K> {
    let doc = object(docs, kind, name).with_context(|| format!("no {kind} {name} rendered"))?;
    Ok(serde_yaml::from_value(doc.clone())?)
}

/// Everything the gateway's ServiceAccount may do, (group, resource, verb): authenticate and
/// authorise callers, read Agents, and read, create and cancel (patch) Tasks. Nothing else.
fn gateway_rules() -> BTreeSet<(String, String, String)> {
    [
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("ari.dev", "agents", "get"),
        ("ari.dev", "agents", "list"),
        ("ari.dev", "agents", "watch"),
        ("ari.dev", "tasks", "get"),
        ("ari.dev", "tasks", "list"),
        ("ari.dev", "tasks", "watch"),
        ("ari.dev", "tasks", "create"),
        ("ari.dev", "tasks", "patch"),
    ]
    .map(|(g, r, v)| (g.to_owned(), r.to_owned(), v.to_owned()))
    .into()
}

/// The rules of the gateway's two ClusterRoles as triples, refusing any rule that triples
/// would not show (non-resource URLs) or that would narrow by name.
fn gateway_role_rules<'a>(
    roles: impl IntoIterator<Item = &'a ClusterRole>,
) -> Result<BTreeSet<(String, String, String)>> {
    let mut out = BTreeSet::new();
    for role in roles {
        let rules = role.rules.as_deref().unwrap_or_default();
        for r in rules {
            ensure!(
                r.non_resource_urls.is_none() && r.resource_names.is_none(),
                "gateway ClusterRole {} has a rule beyond resources: {r:?}",
                role.name_any()
            );
        }
        ensure!(
            role.aggregation_rule.is_none(),
            "gateway ClusterRole {} aggregates other roles",
            role.name_any()
        );
        out.extend(triples(rules));
    }
    Ok(out)
}

fn lint_and_schema(ctx: &Ctx) -> Result<()> {
    let chart = chart().display().to_string();
    let lint = helm_ok(ctx, &["lint", "--strict", &chart])?;
    ensure!(lint.contains("0 chart(s) failed"), "helm lint: {lint}");
    let defaults = template(ctx, &[])?;
    let want: BTreeSet<String> = [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        // Only executors may write a Task's spec.parent.
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    .map(str::to_owned)
    .into();
    ensure!(
        kinds(&defaults)? == want,
        "default render: {:?}",
        kinds(&defaults)?
    );
    // The A2A gateway is on by default: its pod, Service, account and exactly its rules.
    let docs = documents(&defaults)?;
    for (kind, name) in [
        ("Deployment", GATEWAY),
        ("Service", GATEWAY),
        ("ServiceAccount", GATEWAY),
        ("PodDisruptionBudget", GATEWAY),
        ("ClusterRoleBinding", GATEWAY),
        ("ClusterRoleBinding", GATEWAY_REVIEWS),
    ] {
        ensure!(
            object(&docs, kind, name).is_some(),
            "default render has no {kind} {name}"
        );
    }
    let roles: Vec<ClusterRole> = [GATEWAY, GATEWAY_REVIEWS]
        .iter()
        .map(|n| typed(&docs, "ClusterRole", n))
        .collect::<Result<_>>()?;
    let rules = gateway_role_rules(&roles)?;
    ensure!(
        rules == gateway_rules(),
        "gateway rules rendered {rules:?}, want exactly {:?}",
        gateway_rules()
    );
    gateway_pod_and_service(&docs)?;
    // Turned off: no gateway object at all, the operator's install unchanged.
    let off = template(ctx, &["gateway.enabled=false"])?;
    ensure!(
        !off.contains(GATEWAY) && kinds(&off)? == want,
        "gateway.enabled=false still renders gateway objects: {:?}",
        kinds(&off)?
    );
    // One namespace: the ClusterRole is bound there only, and a ServiceMonitor on request.
    let scoped = template(
        ctx,
        &[
            "watchNamespace=team-a",
            "metrics.serviceMonitor.enabled=true",
            "redis.url=redis://redis:6379",
            "image.tag=test",
            "gateway.image.tag=test",
            "gateway.publicUrl=https://a2a.example.com",
        ],
    )?;
    let k = kinds(&scoped)?;
    ensure!(k.contains("ServiceMonitor"), "watchNamespace render: {k:?}");
    // Only the gateway's reviews are bound cluster-wide (TokenReview and SubjectAccessReview
    // are cluster-scoped, and answer questions only); everything else in team-a.
    let scoped_docs = documents(&scoped)?;
    let cluster_bindings: Vec<&str> = scoped_docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("ClusterRoleBinding"))
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    ensure!(
        cluster_bindings == [GATEWAY_REVIEWS],
        "watchNamespace render binds cluster-wide: {cluster_bindings:?}"
    );
    let reviews: ClusterRole = typed(&scoped_docs, "ClusterRole", GATEWAY_REVIEWS)?;
    let review_rules = gateway_role_rules([&reviews])?;
    ensure!(
        review_rules
            .iter()
            .all(|(g, _, v)| g.ends_with(".k8s.io") && v == "create")
            && review_rules.len() == 2,
        "the cluster-wide gateway role holds {review_rules:?}"
    );
    let binding: RoleBinding = typed(&scoped_docs, "RoleBinding", GATEWAY)?;
    ensure!(
        binding.metadata.namespace.as_deref() == Some("team-a") && binding.role_ref.name == GATEWAY,
        "gateway RoleBinding: {binding:?}"
    );
    ensure!(
        object(&scoped_docs, "PodMonitor", GATEWAY).is_some(),
        "no gateway PodMonitor (its Service has no metrics port)"
    );
    let gw: Deployment = typed(&scoped_docs, "Deployment", GATEWAY)?;
    let env_of = |dep: &Deployment, name: &str| {
        dep.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.env.as_ref())
            .and_then(|env| env.iter().find(|e| e.name == name))
            .and_then(|e| e.value.clone())
    };
    let gw_env = |name: &str| env_of(&gw, name);
    ensure!(
        gw_env("ARI_WATCH_NAMESPACE").as_deref() == Some("team-a")
            && gw_env("ARI_GATEWAY_PUBLIC_URL").as_deref() == Some("https://a2a.example.com"),
        "gateway env in the watchNamespace render: {:?}",
        gw.spec.as_ref().map(|s| &s.template)
    );
    // The operator signs the cards the gateway serves, which name the gateway's URL: both get
    // the same one.
    let op: Deployment = typed(&scoped_docs, "Deployment", OPERATOR)?;
    ensure!(
        env_of(&op, "ARI_GATEWAY_PUBLIC_URL").as_deref() == Some("https://a2a.example.com"),
        "operator env in the watchNamespace render: {:?}",
        op.spec.as_ref().map(|s| &s.template)
    );
    for want in [
        "namespace: team-a",
        "value: \"team-a\"",
        "value: \"redis://redis:6379\"",
        "image: \"ari-operator:test\"",
        "image: \"ari-gateway:test\"",
    ] {
        ensure!(scoped.contains(want), "render lacks {want:?}:\n{scoped}");
    }
    // The schema refuses typos and out-of-range values before anything reaches the cluster.
    for bad in [
        "log.format=xml",
        "replicas=0",
        "operator.image=x",
        "redis.url=http://not-redis",
        "executor.image.pullPolicy=Always",
        "gateway.enabled=maybe",
        "gateway.maxStreams=0",
        "gateway.maxBodyBytes=10",
        "gateway.publicUrl=ftp://a2a.example.com",
        "gateway.image.digest=latest",
        "gateway.service.type=LoadBalancer",
        // The A2A port and the probe port must differ.
        "gateway.port=8081",
    ] {
        let out = helm(ctx, &["template", RELEASE, &chart, "--set", bad])?;
        ensure!(!out.status.success(), "values schema accepted --set {bad}");
    }
    Ok(())
}

const DEPLOY_HEADER: &str = "\
# Plain-manifest install of the ari operator: the chart rendered with its default values
# (`helm template ari charts/ari --namespace ari-system`) plus the Namespace. Generated: the
# e2e test `deploy_manifest_is_the_rendered_chart` fails when it drifts, and
# `ARI_BLESS=1 cargo test -p ari-e2e --test chart -- deploy_manifest` rewrites it.
# CRDs first: kubectl apply -f crds/ ; then: kubectl apply -f deploy/operator.yaml
apiVersion: v1
kind: Namespace
metadata:
  name: ari-system
";

/// deploy/operator.yaml is the chart rendered with default values, so the two installs grant
/// the same RBAC and run the same pod.
fn deploy_manifest(ctx: &Ctx) -> Result<()> {
    let want = format!("{DEPLOY_HEADER}{}", template(ctx, &[])?);
    let path = repo().join("deploy/operator.yaml");
    if std::env::var_os("ARI_BLESS").is_some() {
        std::fs::write(&path, &want)?;
    }
    let have = std::fs::read_to_string(&path)?;
    ensure!(
        have == want,
        "deploy/operator.yaml differs from the rendered chart: run \
         `ARI_BLESS=1 cargo test -p ari-e2e --test chart -- deploy_manifest`"
    );
    Ok(())
}

/// The example manifests, modules put in place by the script users run.
fn examples(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("chart-examples", |client, ns| async move {
        let path = format!(
            "{}:{}",
            ctx.cluster.bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // Executor pods, created by the operator, pass the `restricted` standard too.
        restrict(ctx, &ns)?;
        let dir = repo().join("examples/manifests");
        let mut agents = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let file = entry?.path();
            if file.extension().is_some_and(|e| e == "yaml") {
                agents.push(
                    file.file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
        ensure!(
            !agents.is_empty(),
            "no example manifests in {}",
            dir.display()
        );
        for agent in &agents {
            let out = Command::new("/bin/bash")
                .arg(repo().join("scripts/make-agent-configmap.sh"))
                .args([agent.as_str(), &ns])
                .env("PATH", &path)
                .env("KUBECONFIG", ctx.cluster.kubeconfig_path())
                .output()?;
            ensure!(
                out.status.success(),
                "make-agent-configmap.sh {agent}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        ctx.kubectl_ok(["apply", "-n", &ns, "-f", &dir.display().to_string()])?;
        let tasks: Vec<String> = Api::<Task>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|t| t.name_any())
            .collect();
        ensure!(tasks.len() >= agents.len(), "tasks applied: {tasks:?}");
        for name in &tasks {
            let t = task_finished(&client, &ns, name, wait::DEFAULT).await?;
            // The one example that asks for more than its Agent grants.
            if name == "dice-wants-network" {
                expect_reason(&t, TaskPhase::Failed, TaskReason::CapabilityDenied)?;
            } else {
                expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
            }
        }
        for agent in &agents {
            agent_ready(&client, &ns, agent).await?;
        }
        Ok(())
    })
}

/// A bearer token for `sa` (TokenRequest, 10 minutes), as a pod of that account would hold.
async fn token_for(client: &Client, ns: &str, sa: &str) -> Result<String> {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    let resp = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &req)
        .await
        .with_context(|| format!("TokenRequest for {ns}/{sa}"))?;
    Ok(resp.status.context("empty TokenRequest")?.token)
}

/// A client that authenticates with `token` only (no client certificate).
fn client_with_token(ctx: &Ctx, token: &str) -> Result<Client> {
    let mut cfg = ctx.cluster.config().clone();
    cfg.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    Ok(Client::try_from(cfg)?)
}

/// One access question: (verb, group, resource incl. `/subresource`, namespace or "").
type Access<'a> = (&'a str, &'a str, &'a str, &'a str);

async fn can(client: &Client, (verb, group, resource, ns): Access<'_>) -> Result<bool> {
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SelfSubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource: sub,
                namespace: (!ns.is_empty()).then(|| ns.to_owned()),
                ..Default::default()
            }),
            non_resource_attributes: None,
        },
        status: None,
    };
    let r = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(r.status.is_some_and(|s| s.allowed))
}

/// Every access in `allowed` is allowed and every one in `denied` is denied.
async fn expect_access(
    client: &Client,
    who: &str,
    allowed: &[Access<'_>],
    denied: &[Access<'_>],
) -> Result<()> {
    let mut wrong = Vec::new();
    for a in allowed {
        if !can(client, *a).await? {
            wrong.push(format!("{who} cannot {a:?}"));
        }
    }
    for a in denied {
        if can(client, *a).await? {
            wrong.push(format!("{who} can {a:?}"));
        }
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}

/// Expands rules to (group, resource, verb) triples.
fn triples(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

/// The executor's own token (minted for the ServiceAccount the operator created) can read its
/// Agent and Tasks, write Task status and create ConfigMaps in its namespace — and nothing
/// else: no Secrets, no other namespace, no Task create/delete/spec writes, no Deployments.
fn executor_rbac(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("chart-rbac", |admin, ns| async move {
        let other = ctx.cluster.new_namespace("chart-rbac-other").await?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        agent_ready(&admin, &ns, "echo").await?;
        ctx.apply_ok(&ns, &task_yaml("mine", "echo", "hi", ""))?;
        task_finished(&admin, &ns, "mine", wait::DEFAULT).await?;
        ctx.apply_ok(&other, &task_yaml("theirs", "echo", "hi", ""))?;
        ctx.kubectl_ok([
            "create",
            "secret",
            "generic",
            "theirs",
            "-n",
            &other,
            "--from-literal=k=v",
        ])?;

        // The executor Role holds nothing the operator's ClusterRole lacks (no escalation).
        let role = Api::<Role>::namespaced(admin.clone(), &ns)
            .get(EXECUTOR_SA)
            .await?;
        let op = Api::<ClusterRole>::all(admin.clone()).get(OPERATOR).await?;
        let missing: Vec<_> = triples(role.rules.as_deref().unwrap_or_default())
            .difference(&triples(op.rules.as_deref().unwrap_or_default()))
            .cloned()
            .collect();
        ensure!(
            missing.is_empty(),
            "executor Role grants what the operator lacks: {missing:?}"
        );

        let token = token_for(&admin, &ns, EXECUTOR_SA).await?;
        let exec = client_with_token(ctx, &token)?;
        let (n, o) = (ns.as_str(), other.as_str());
        expect_access(
            &exec,
            "executor",
            &[
                ("get", "ari.dev", "agents", n),
                ("get", "ari.dev", "tasks", n),
                ("list", "ari.dev", "tasks", n),
                ("watch", "ari.dev", "tasks", n),
                ("update", "ari.dev", "tasks/status", n),
                ("patch", "ari.dev", "tasks/status", n),
                ("create", "", "configmaps", n),
                ("get", "", "configmaps", n),
                // A delegating guest's children, created and cancelled in its own namespace.
                ("create", "ari.dev", "tasks", n),
                ("patch", "ari.dev", "tasks", n),
            ],
            &[
                ("get", "", "secrets", n),
                ("list", "", "secrets", n),
                ("get", "", "secrets", o),
                ("get", "ari.dev", "tasks", o),
                ("list", "ari.dev", "tasks", o),
                ("list", "ari.dev", "tasks", ""),
                ("update", "ari.dev", "tasks/status", o),
                ("create", "ari.dev", "tasks", o),
                ("patch", "ari.dev", "tasks", o),
                ("delete", "ari.dev", "tasks", n),
                ("update", "ari.dev", "tasks", n),
                ("update", "ari.dev", "agents", n),
                ("patch", "ari.dev", "agents/status", n),
                ("update", "apps", "deployments", n),
                ("patch", "apps", "deployments", n),
                ("create", "", "pods", n),
                ("delete", "", "pods", n),
                ("list", "", "configmaps", n),
                ("update", "", "configmaps", n),
                ("delete", "", "configmaps", n),
                ("create", "", "configmaps", o),
                ("create", "rbac.authorization.k8s.io", "roles", n),
                ("create", "", "serviceaccounts/token", n),
            ],
        )
        .await?;

        // Real requests: what the worker does succeeds...
        let tasks = Api::<Task>::namespaced(exec.clone(), &ns);
        let selector = "spec.agentRef.name=echo";
        let listed = tasks.list(&ListParams::default().fields(selector)).await?;
        ensure!(
            listed.items.iter().any(|t| t.name_any() == "mine"),
            "list saw no Task"
        );
        let mut watch = Box::pin(
            tasks
                .watch(&WatchParams::default().fields(selector).timeout(5), "0")
                .await?,
        );
        match watch.try_next().await? {
            Some(WatchEvent::Added(t)) if t.name_any() == "mine" => {}
            other => bail!("watch with the executor token: {other:?}"),
        }
        let _: Agent = Api::namespaced(exec.clone(), &ns).get("echo").await?;
        let mut mine = tasks.get("mine").await?;
        if let Some(s) = mine.status.as_mut() {
            s.message = Some("written with the executor's token".into());
        }
        tasks
            .replace_status("mine", &PostParams::default(), &mine)
            .await?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("probe-output".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let cms = Api::<ConfigMap>::namespaced(exec.clone(), &ns);
        cms.create(&PostParams::default(), &cm).await?;

        // ...and everything else is refused by the API server.
        let secrets = Api::<Secret>::namespaced(exec.clone(), &ns);
        forbidden(
            "get the attestation key Secret",
            secrets.get("ari-attestation-key").await,
        )?;
        forbidden("list Secrets", secrets.list(&ListParams::default()).await)?;
        forbidden(
            "get a Secret of another namespace",
            Api::<Secret>::namespaced(exec.clone(), &other)
                .get("theirs")
                .await,
        )?;
        let theirs = Api::<Task>::namespaced(exec.clone(), &other);
        forbidden(
            "get a Task of another namespace",
            theirs.get("theirs").await,
        )?;
        forbidden(
            "list Tasks of another namespace",
            theirs.list(&ListParams::default()).await,
        )?;
        forbidden(
            "list Tasks of all namespaces",
            Api::<Task>::all(exec.clone())
                .list(&ListParams::default())
                .await,
        )?;
        // It creates Tasks in its own namespace (a delegating guest's children), nowhere else.
        let mut new_task: Task = serde_yaml::from_str(&task_yaml("forged", "echo", "x", ""))?;
        new_task.metadata.namespace = Some(other.clone());
        forbidden(
            "create a Task in another namespace",
            theirs.create(&PostParams::default(), &new_task).await,
        )?;
        forbidden(
            "delete a Task",
            tasks.delete("mine", &DeleteParams::default()).await,
        )?;
        // It may patch Tasks (to cancel a child), but a spec stays immutable but for that.
        let spec_patch = serde_json::json!({"spec": {"input": "changed"}});
        match tasks
            .patch("mine", &PatchParams::default(), &Patch::Merge(&spec_patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 422 => {}
            other => bail!("patch a Task's input: want 422 Invalid, got {other:?}"),
        }
        let scale = serde_json::json!({"spec": {"replicas": 5}});
        forbidden(
            "patch its Deployment",
            Api::<Deployment>::namespaced(exec.clone(), &ns)
                .patch(
                    "echo-executor",
                    &PatchParams::default(),
                    &Patch::Merge(&scale),
                )
                .await,
        )?;
        forbidden("list ConfigMaps", cms.list(&ListParams::default()).await)?;
        forbidden(
            "delete a ConfigMap",
            cms.delete("probe-output", &DeleteParams::default()).await,
        )?;
        let status_patch = serde_json::json!({"status": {"readyReplicas": 9}});
        forbidden(
            "patch its Agent's status",
            Api::<Agent>::namespaced(exec.clone(), &ns)
                .patch_status(
                    "echo",
                    &PatchParams::default(),
                    &Patch::Merge(&status_patch),
                )
                .await,
        )?;
        Ok(())
    })
}

/// The ready executor pod of `agent`.
async fn executor_pod(admin: &Client, ns: &str, agent: &str) -> Result<Pod> {
    let selector = format!("ari.dev/agent={agent}");
    let pods = wait::until("a ready executor", wait::DEFAULT, || {
        ready_pods(admin, ns, &selector, 1)
    })
    .await?;
    pods.into_iter().next().context("no executor pod")
}

/// Issue 26, item 17: RBAC grants executors `create` and `patch` on every Task of their
/// namespace; the chart's policy `ari-operator-executor-writes` narrows that, checked here with
/// tokens bound to the executor pods as the kubelet mints them: a root Task, a child of another
/// Agent's parent or without its owner reference, a child created with a token bound to no pod,
/// a label change, and a cancel of a root Task or of another Agent's child are refused; the
/// writes delegation needs go through.
fn executor_writes(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("chart-exec-writes", |admin, ns| async move {
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        ctx.apply_ok(&ns, &agent_yaml("echo", "echo-module", 1, ""))?;
        ctx.apply_ok(&ns, &agent_yaml("other", "echo-module", 1, ""))?;
        agent_ready(&admin, &ns, "echo").await?;
        agent_ready(&admin, &ns, "other").await?;
        ctx.apply_ok(&ns, &task_yaml("root", "echo", "hi", ""))?;
        let root = task_finished(&admin, &ns, "root", wait::DEFAULT).await?;
        let echo_pod = executor_pod(&admin, &ns, "echo").await?;
        let other_pod = executor_pod(&admin, &ns, "other").await?;
        let echo = namespace_user::pod_client(ctx, &admin, &ns, EXECUTOR_SA, &echo_pod).await?;
        let other = namespace_user::pod_client(ctx, &admin, &ns, EXECUTOR_SA, &other_pod).await?;
        let unbound = client_with_token(ctx, &token_for(&admin, &ns, EXECUTOR_SA).await?)?;
        let (echo_tasks, other_tasks, unbound_tasks) = (
            Api::<Task>::namespaced(echo, &ns),
            Api::<Task>::namespaced(other, &ns),
            Api::<Task>::namespaced(unbound, &ns),
        );
        let pp = PostParams::default();

        let plain: Task = serde_yaml::from_str(&task_yaml("plain", "echo", "x", ""))?;
        forbidden(
            "an executor creates a root Task",
            echo_tasks.create(&pp, &plain).await,
        )?;
        forbidden(
            "an executor creates a child for another Agent's parent",
            echo_tasks
                .create(
                    &pp,
                    &child_task("c-theirs", "echo", &root, "other", None, true)?,
                )
                .await,
        )?;
        forbidden(
            "an executor creates a child its parent does not own",
            echo_tasks
                .create(
                    &pp,
                    &child_task("c-unowned", "echo", &root, "echo", None, false)?,
                )
                .await,
        )?;
        forbidden(
            "a token bound to no pod creates a child",
            unbound_tasks
                .create(
                    &pp,
                    &child_task("c-unbound", "echo", &root, "echo", None, true)?,
                )
                .await,
        )?;
        // What delegation needs: a child of its own Agent's parent, then its cancel.
        echo_tasks
            .create(
                &pp,
                &child_task("c-mine", "echo", &root, "echo", None, true)?,
            )
            .await
            .context("an executor creates a child of its Agent's parent")?;
        let cancel = Patch::Merge(serde_json::json!({"spec": {"cancelled": true}}));
        let label =
            Patch::Merge(serde_json::json!({"metadata": {"labels": {"ari.dev/plan-step": "x"}}}));
        let params = PatchParams::default();
        forbidden(
            "another Agent's executor cancels the child",
            other_tasks.patch("c-mine", &params, &cancel).await,
        )?;
        forbidden(
            "an executor labels its child",
            echo_tasks.patch("c-mine", &params, &label).await,
        )?;
        forbidden(
            "an executor cancels a root Task",
            echo_tasks.patch("root", &params, &cancel).await,
        )?;
        echo_tasks
            .patch("c-mine", &params, &cancel)
            .await
            .context("an executor cancels its child")?;
        only_tasks(&admin, &ns, &["root", "c-mine"]).await?;
        Ok(())
    })
}

/// The gateway's pod and Service as rendered: its own account with a token, uid 65532 on a
/// read-only root with no capabilities, probes on the `metrics` port, ports `a2a` 8080 and
/// `metrics` 8081, the default resources; the Service maps port 80 to `a2a` and exposes
/// nothing else (no /metrics for whoever reaches the Service).
fn gateway_pod_and_service(docs: &[serde_yaml::Value]) -> Result<()> {
    let dep: Deployment = typed(docs, "Deployment", GATEWAY)?;
    let spec = dep.spec.context("gateway Deployment has no spec")?;
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    ensure!(
        labels
            .and_then(|l| l.get("app.kubernetes.io/name"))
            .map(String::as_str)
            == Some(GATEWAY),
        "gateway pod labels: {labels:?}"
    );
    let pod = spec.template.spec.context("gateway pod has no spec")?;
    ensure!(
        pod.service_account_name.as_deref() == Some(GATEWAY)
            && pod.automount_service_account_token == Some(true),
        "gateway pod account: {:?} (token {:?})",
        pod.service_account_name,
        pod.automount_service_account_token
    );
    let psc = pod.security_context.clone().unwrap_or_default();
    ensure!(
        psc.run_as_non_root == Some(true)
            && psc.run_as_user == Some(65532)
            && psc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) == Some("RuntimeDefault"),
        "gateway pod securityContext: {psc:?}"
    );
    let c = pod
        .containers
        .first()
        .context("gateway pod has no container")?;
    let csc = c.security_context.clone().unwrap_or_default();
    ensure!(
        csc.read_only_root_filesystem == Some(true)
            && csc.allow_privilege_escalation == Some(false)
            && csc.capabilities.as_ref().and_then(|c| c.drop.clone())
                == Some(vec!["ALL".to_owned()]),
        "gateway container securityContext: {csc:?}"
    );
    let ports: Vec<(String, i32)> = c
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
        .collect();
    ensure!(
        ports == [("a2a".to_owned(), 8080), ("metrics".to_owned(), 8081)],
        "gateway ports: {ports:?}"
    );
    for (which, probe, path) in [
        ("readiness", &c.readiness_probe, "/readyz"),
        ("liveness", &c.liveness_probe, "/healthz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .with_context(|| format!("gateway has no {which} httpGet probe"))?;
        ensure!(
            get.path.as_deref() == Some(path) && get.port == IntOrString::String("metrics".into()),
            "gateway {which} probe: {get:?}"
        );
    }
    let res = c.resources.clone().unwrap_or_default();
    let q = |m: &Option<std::collections::BTreeMap<String, Quantity>>, k: &str| {
        m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone())
    };
    ensure!(
        q(&res.requests, "cpu").as_deref() == Some("50m")
            && q(&res.requests, "memory").as_deref() == Some("64Mi")
            && q(&res.limits, "memory").as_deref() == Some("256Mi"),
        "gateway resources: {res:?}"
    );
    let svc: Service = typed(docs, "Service", GATEWAY)?;
    let svc_spec = svc.spec.context("gateway Service has no spec")?;
    let svc_ports: Vec<(String, i32, Option<IntOrString>)> = svc_spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port,
                p.target_port.clone(),
            )
        })
        .collect();
    ensure!(
        svc_spec.type_.as_deref() == Some("ClusterIP")
            && svc_ports
                == [(
                    "a2a".to_owned(),
                    80,
                    Some(IntOrString::String("a2a".into()))
                )],
        "gateway Service: {:?} {svc_ports:?}",
        svc_spec.type_
    );
    Ok(())
}

/// One plain HTTP/1.1 request to `addr` (`ip:port`): the status code and the raw body.
async fn http_request(addr: &str, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut buf),
    )
    .await
    .with_context(|| format!("{method} {path}: no answer in 10 s"))??;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{method} {path}: no status line in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// The gateway `helm install` started: its pod becomes Ready (the readiness probe answered on
/// the `metrics` port of the pod IP), serves `/metrics` there and refuses an A2A call without a
/// token (401) on the `a2a` port. Its ClusterRoles hold exactly [`gateway_rules`], bound to its
/// ServiceAccount only and nothing else is bound to that account; and its own token can do
/// those things and nothing else.
fn gateway_rbac(ctx: &Ctx) -> Result<()> {
    ensure!(
        ari_e2e::ari_images().contains_key(ari_e2e::GATEWAY_IMAGE),
        "target/debug/ari-gateway is missing: run `cargo build --bins` first"
    );
    ctx.rt.block_on(async {
        let admin = ctx.cluster.client();
        let pods = wait::until("gateway pod Ready", wait::DEFAULT, || {
            ready_pods(&admin, OPERATOR_NS, "app.kubernetes.io/name=ari-gateway", 1)
        })
        .await?;
        let ip = pods[0]
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .context("gateway pod has no IP")?;
        let (code, body) = http_request(&format!("{ip}:8081"), "GET", "/metrics", "").await?;
        ensure!(
            code == 200 && !body.trim().is_empty(),
            "GET /metrics on the gateway: {code} {body:?}"
        );
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#;
        let (code, body) =
            http_request(&format!("{ip}:8080"), "POST", "/a2a/default/echo", call).await?;
        ensure!(
            code == 401,
            "an A2A call without a token: want 401, got {code} {body:?}"
        );

        // The installed roles, and every binding that names the gateway's account.
        let mut roles = Vec::new();
        for name in [GATEWAY, GATEWAY_REVIEWS] {
            roles.push(Api::<ClusterRole>::all(admin.clone()).get(name).await?);
        }
        let rules = gateway_role_rules(&roles)?;
        ensure!(
            rules == gateway_rules(),
            "installed gateway rules {rules:?}, want exactly {:?}",
            gateway_rules()
        );
        let is_gateway = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
            subjects.iter().flatten().any(|s| {
                s.kind == "ServiceAccount"
                    && s.name == GATEWAY
                    && s.namespace.as_deref() == Some(OPERATOR_NS)
            })
        };
        let mut bound: BTreeSet<String> = BTreeSet::new();
        for b in Api::<ClusterRoleBinding>::all(admin.clone())
            .list(&ListParams::default())
            .await?
        {
            if is_gateway(&b.subjects) {
                ensure!(
                    b.subjects.as_ref().is_some_and(|s| s.len() == 1),
                    "ClusterRoleBinding {} binds the gateway with others: {:?}",
                    b.name_any(),
                    b.subjects
                );
                bound.insert(format!("{}/{}", b.role_ref.kind, b.role_ref.name));
            }
        }
        for b in Api::<RoleBinding>::all(admin.clone())
            .list(&ListParams::default())
            .await?
        {
            if is_gateway(&b.subjects) {
                bound.insert(format!("RoleBinding {}", b.name_any()));
            }
        }
        let want: BTreeSet<String> = [
            format!("ClusterRole/{GATEWAY}"),
            format!("ClusterRole/{GATEWAY_REVIEWS}"),
        ]
        .into();
        ensure!(bound == want, "roles bound to the gateway: {bound:?}");

        let token = token_for(&admin, OPERATOR_NS, GATEWAY).await?;
        let gw = client_with_token(ctx, &token)?;
        let any = "team-x";
        let (authn, authz, rbac) = (
            "authentication.k8s.io",
            "authorization.k8s.io",
            "rbac.authorization.k8s.io",
        );
        expect_access(
            &gw,
            "gateway",
            &[
                ("create", authn, "tokenreviews", ""),
                ("create", authz, "subjectaccessreviews", ""),
                ("get", "ari.dev", "agents", any),
                ("list", "ari.dev", "agents", ""),
                ("watch", "ari.dev", "agents", ""),
                ("get", "ari.dev", "tasks", any),
                ("list", "ari.dev", "tasks", ""),
                ("watch", "ari.dev", "tasks", ""),
                ("create", "ari.dev", "tasks", any),
                ("patch", "ari.dev", "tasks", any),
            ],
            &[
                ("update", "ari.dev", "tasks", any),
                ("delete", "ari.dev", "tasks", any),
                ("update", "ari.dev", "tasks/status", any),
                ("patch", "ari.dev", "tasks/status", any),
                ("create", "ari.dev", "agents", any),
                ("patch", "ari.dev", "agents", any),
                ("delete", "ari.dev", "agents", any),
                ("patch", "ari.dev", "agents/status", any),
                ("get", "ari.dev", "plans", any),
                ("create", "ari.dev", "plans", any),
                ("get", "", "secrets", any),
                ("list", "", "secrets", ""),
                ("get", "", "configmaps", any),
                ("create", "", "configmaps", any),
                ("list", "", "pods", ""),
                ("create", "", "pods", any),
                ("create", "", "serviceaccounts/token", any),
                ("create", "", "events", any),
                ("create", authz, "localsubjectaccessreviews", any),
                ("impersonate", "", "users", ""),
                ("impersonate", "", "serviceaccounts", any),
                ("create", rbac, "rolebindings", any),
                ("escalate", rbac, "roles", any),
                ("bind", rbac, "clusterroles", ""),
                ("update", "coordination.k8s.io", "leases", OPERATOR_NS),
            ],
        )
        .await?;

        // Real requests: it reviews a caller's token and asks what that caller may do...
        let caller = token_for(&admin, OPERATOR_NS, OPERATOR).await?;
        let review = Api::<TokenReview>::all(gw.clone())
            .create(
                &PostParams::default(),
                &TokenReview {
                    spec: TokenReviewSpec {
                        token: Some(caller),
                        audiences: None,
                    },
                    ..TokenReview::default()
                },
            )
            .await?;
        let user = review
            .status
            .as_ref()
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user.as_ref())
            .and_then(|u| u.username.clone())
            .with_context(|| format!("TokenReview by the gateway: {:?}", review.status))?;
        ensure!(
            user == format!("system:serviceaccount:{OPERATOR_NS}:{OPERATOR}"),
            "TokenReview names {user}"
        );
        for (verb, resource, want) in [("create", "tasks", true), ("delete", "agents", false)] {
            let sar = SubjectAccessReview {
                metadata: ObjectMeta::default(),
                spec: SubjectAccessReviewSpec {
                    user: Some(user.clone()),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(verb.into()),
                        group: Some("ari.dev".into()),
                        resource: Some(resource.into()),
                        namespace: Some(any.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                status: None,
            };
            let r = Api::<SubjectAccessReview>::all(gw.clone())
                .create(&PostParams::default(), &sar)
                .await?;
            let allowed = r.status.is_some_and(|s| s.allowed);
            ensure!(
                allowed == want,
                "SubjectAccessReview by the gateway: may {user} {verb} {resource}? {allowed}"
            );
        }
        // ...may change of a Task only spec.cancelled and its live-log annotation (the
        // admission policy: RBAC's `patch tasks` alone would let it relabel, re-own or
        // re-annotate any Task)...
        gateway_task_writes(&gw).await?;
        // ...and reads nothing it was not granted.
        forbidden(
            "list Secrets with the gateway token",
            Api::<Secret>::all(gw.clone())
                .list(&ListParams::default())
                .await,
        )?;
        forbidden(
            "list ConfigMaps with the gateway token",
            Api::<ConfigMap>::namespaced(gw.clone(), OPERATOR_NS)
                .list(&ListParams::default())
                .await,
        )?;
        Ok(())
    })
}

/// The gateway's own token on a Task it created: a label, another annotation, a finalizer or
/// an owner is refused by the admission policy; `spec.cancelled` and `ari.dev/live-log` are not.
async fn gateway_task_writes(gw: &Client) -> Result<()> {
    let tasks: Api<Task> = Api::namespaced(gw.clone(), OPERATOR_NS);
    let task: Task = serde_json::from_value(serde_json::json!({
        "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
        "metadata": {"generateName": "gw-policy-",
                     "labels": {"ari.dev/a2a-context": "c"},
                     "annotations": {"ari.dev/a2a-caller": "someone"}},
        "spec": {"agentRef": {"name": "nobody"}, "input": "x"},
    }))?;
    let name = tasks
        .create(&PostParams::default(), &task)
        .await?
        .name_any();
    let patch = |p: serde_json::Value| {
        let (tasks, name) = (tasks.clone(), name.clone());
        async move {
            tasks
                .patch(&name, &PatchParams::default(), &Patch::Merge(&p))
                .await
        }
    };
    for (what, p) in [
        (
            "relabel a Task",
            serde_json::json!({"metadata": {"labels": {"ari.dev/a2a-context": "other"}}}),
        ),
        (
            "add a label",
            serde_json::json!({"metadata": {"labels": {"ari.dev/plan": "p"}}}),
        ),
        (
            "rewrite the caller annotation",
            serde_json::json!({"metadata": {"annotations": {"ari.dev/a2a-caller": "me"}}}),
        ),
        (
            "add a finalizer",
            serde_json::json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        ),
        (
            "give the Task an owner",
            serde_json::json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "x",
                "uid": "00000000-0000-0000-0000-000000000001"}]}}),
        ),
    ] {
        forbidden(
            &format!("the gateway's token may not {what}"),
            patch(p).await,
        )?;
    }
    patch(serde_json::json!({"metadata": {"annotations": {"ari.dev/live-log": "true"}}}))
        .await
        .context("the gateway's token sets ari.dev/live-log")?;
    let cancelled = patch(serde_json::json!({"spec": {"cancelled": true}}))
        .await
        .context("the gateway's token cancels a Task")?;
    ensure!(
        cancelled.spec.cancelled == Some(true),
        "cancelled: {:?}",
        cancelled.spec.cancelled
    );
    Ok(())
}

/// The operator's token: what the controllers do is allowed, the rest (deleting pods,
/// listing Secrets, writing Task specs, escalating RBAC, Leases elsewhere) is not.
fn operator_rbac(ctx: &Ctx) -> Result<()> {
    ctx.rt.block_on(async {
        let admin = ctx.cluster.client();
        let token = token_for(&admin, OPERATOR_NS, OPERATOR).await?;
        let op = client_with_token(ctx, &token)?;
        let (sys, any) = (OPERATOR_NS, "team-x");
        let rbac = "rbac.authorization.k8s.io";
        let lease = "coordination.k8s.io";
        expect_access(
            &op,
            "operator",
            &[
                ("list", "ari.dev", "agents", ""),
                ("watch", "ari.dev", "tasks", ""),
                ("patch", "ari.dev", "agents/status", any),
                ("update", "ari.dev", "tasks/status", any),
                ("delete", "ari.dev", "tasks", any),
                // Plans: step Tasks created and cancelled by the operator.
                ("create", "ari.dev", "tasks", any),
                ("patch", "ari.dev", "tasks", any),
                ("watch", "ari.dev", "plans", ""),
                ("update", "ari.dev", "plans/status", any),
                // ModelConfigs: watched, and only their status written.
                ("watch", "ari.dev", "modelconfigs", ""),
                ("patch", "ari.dev", "modelconfigs/status", any),
                // MCPServers likewise.
                ("watch", "ari.dev", "mcpservers", ""),
                ("patch", "ari.dev", "mcpservers/status", any),
                // ExecutorPools: read (a pooled Agent's reconcile gets its pool), status written.
                ("get", "ari.dev", "executorpools", any),
                ("watch", "ari.dev", "executorpools", ""),
                ("patch", "ari.dev", "executorpools/status", any),
                ("create", "apps", "deployments", any),
                ("patch", "apps", "deployments", any),
                // The executors of an Agent that became invalid (issue 13, item 1).
                ("delete", "apps", "deployments", any),
                ("get", "", "pods", any),
                ("get", "", "secrets", any),
                ("create", "", "secrets", any),
                ("patch", "", "serviceaccounts", any),
                ("create", rbac, "roles", any),
                ("patch", rbac, "rolebindings", any),
                ("create", "events.k8s.io", "events", any),
                ("update", lease, "leases", sys),
                ("create", lease, "leases", sys),
                // Each namespace's attestation key source lives in the release namespace.
                ("create", "", "secrets", sys),
            ],
            &[
                ("update", "apps", "deployments", any),
                ("list", "", "secrets", any),
                ("update", "", "secrets", any),
                ("delete", "", "secrets", any),
                ("create", "", "pods", any),
                ("delete", "", "pods", any),
                ("update", "ari.dev", "tasks", any),
                ("create", "ari.dev", "plans", any),
                ("update", "ari.dev", "plans", any),
                ("get", "ari.dev", "modelconfigs", any),
                ("patch", "ari.dev", "modelconfigs", any),
                ("create", "ari.dev", "modelconfigs", any),
                ("get", "ari.dev", "mcpservers", any),
                ("patch", "ari.dev", "mcpservers", any),
                ("patch", "ari.dev", "executorpools", any),
                ("create", "ari.dev", "executorpools", any),
                ("patch", "ari.dev", "agents", any),
                ("delete", "ari.dev", "agents", any),
                ("escalate", rbac, "roles", any),
                ("bind", rbac, "roles", any),
                ("create", rbac, "clusterroles", ""),
                ("create", rbac, "clusterrolebindings", ""),
                ("update", lease, "leases", "kube-system"),
                ("create", "", "namespaces", ""),
                ("get", "", "nodes", ""),
                ("create", "", "serviceaccounts/token", any),
            ],
        )
        .await?;
        forbidden(
            "list Secrets with the operator token",
            Api::<Secret>::all(op.clone())
                .list(&ListParams::default())
                .await,
        )?;
        forbidden(
            "a Lease in kube-system",
            Api::<Lease>::namespaced(op.clone(), "kube-system")
                .get("ari-operator")
                .await,
        )?;
        Ok(())
    })
}

/// Operator pods that are not being deleted.
async fn operator_pods(client: &Client) -> Result<Vec<Pod>> {
    Ok(Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=ari-operator"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

/// `helm upgrade` with new log values rolls a new operator pod that carries them, takes the
/// Lease over, and logs in the new format.
fn upgrade(ctx: &Ctx) -> Result<()> {
    let client = ctx.rt.block_on(async { ctx.cluster.client() });
    let before: BTreeSet<String> = ctx
        .rt
        .block_on(operator_pods(&client))?
        .iter()
        .map(|p| p.name_any())
        .collect();
    ensure!(
        before.len() == 1,
        "operator pods before upgrade: {before:?}"
    );
    let chart = chart().display().to_string();
    helm_ok(
        ctx,
        &[
            "upgrade",
            RELEASE,
            &chart,
            "--namespace",
            OPERATOR_NS,
            "--reuse-values",
            "--set",
            "log.format=text",
            "--set",
            "log.level=debug\\,kube=info",
        ],
    )?;
    let new = ctx.rt.block_on(wait::until(
        "the operator rolled",
        wait::DEFAULT,
        || async {
            let pods = operator_pods(&client).await.map_err(|e| e.to_string())?;
            let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            match &pods[..] {
                [p] if !before.contains(&p.name_any()) => Ok(p.clone()),
                _ => Err(format!("operator pods {names:?}, old {before:?}")),
            }
        },
    ))?;
    ensure!(
        env_of(&new, "ARI_LOG_FORMAT").as_deref() == Some("text")
            && env_of(&new, "ARI_LOG_LEVEL").as_deref() == Some("debug,kube=info"),
        "new operator pod env: {:?}",
        new.spec.as_ref().map(|s| &s.containers[0].env)
    );
    ctx.wait_operator_ready()?;
    let name = new.name_any();
    ctx.rt.block_on(wait::until(
        "the new pod holds the Lease",
        wait::DEFAULT,
        || async {
            let lease = Api::<Lease>::namespaced(client.clone(), OPERATOR_NS)
                .get(OPERATOR)
                .await
                .map_err(|e| e.to_string())?;
            let holder = lease.spec.and_then(|s| s.holder_identity);
            if holder.as_deref() == Some(name.as_str()) {
                Ok(())
            } else {
                Err(format!("holder {holder:?}"))
            }
        },
    ))?;
    let log = ctx.rt.block_on(wait::until(
        "the new pod logs it leads",
        wait::DEFAULT,
        || async {
            let log = ctx.node.logs(OPERATOR_NS, &name, "operator");
            if log.contains("leading") {
                Ok(log)
            } else {
                Err(tail(&log, 5))
            }
        },
    ))?;
    let line = log
        .lines()
        .find(|l| l.contains("leading"))
        .context("no leading line")?;
    ensure!(
        !line.trim_start().starts_with('{') && line.contains("INFO"),
        "log.format=text still writes JSON: {line}"
    );
    ensure!(
        log.lines().any(|l| l.contains("DEBUG")),
        "log.level=debug shows no DEBUG line:\n{}",
        tail(&log, 20)
    );
    Ok(())
}

/// `helm uninstall` removes every object of the release; CRDs (and the Agents and Tasks in
/// them) stay, as Helm does with `crds/`.
fn uninstall(ctx: &Ctx) -> Result<()> {
    helm_ok(
        ctx,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            OPERATOR_NS,
            "--wait",
            "--timeout",
            "90s",
        ],
    )?;
    ctx.rt.block_on(async {
        let c = ctx.cluster.client();
        let le = "ari-operator-leader-election";
        wait::until("release objects gone", wait::DEFAULT, || async {
            let mut left = Vec::new();
            let ns = OPERATOR_NS;
            if exists(Api::<Deployment>::namespaced(c.clone(), ns), OPERATOR).await? {
                left.push("Deployment");
            }
            if exists(Api::<ServiceAccount>::namespaced(c.clone(), ns), OPERATOR).await? {
                left.push("ServiceAccount");
            }
            if exists(
                Api::<Service>::namespaced(c.clone(), ns),
                "ari-operator-metrics",
            )
            .await?
            {
                left.push("Service");
            }
            if exists(
                Api::<PodDisruptionBudget>::namespaced(c.clone(), ns),
                OPERATOR,
            )
            .await?
            {
                left.push("PodDisruptionBudget");
            }
            if exists(Api::<Role>::namespaced(c.clone(), ns), le).await? {
                left.push("Role");
            }
            if exists(Api::<RoleBinding>::namespaced(c.clone(), ns), le).await? {
                left.push("RoleBinding");
            }
            if exists(Api::<ClusterRole>::all(c.clone()), OPERATOR).await? {
                left.push("ClusterRole");
            }
            if exists(Api::<ClusterRoleBinding>::all(c.clone()), OPERATOR).await? {
                left.push("ClusterRoleBinding");
            }
            let pods = operator_pods(&c).await.map_err(|e| e.to_string())?;
            if !pods.is_empty() {
                left.push("operator Pod");
            }
            // The A2A gateway's objects.
            if exists(Api::<Deployment>::namespaced(c.clone(), ns), GATEWAY).await? {
                left.push("gateway Deployment");
            }
            if exists(Api::<ServiceAccount>::namespaced(c.clone(), ns), GATEWAY).await? {
                left.push("gateway ServiceAccount");
            }
            if exists(Api::<Service>::namespaced(c.clone(), ns), GATEWAY).await? {
                left.push("gateway Service");
            }
            if exists(
                Api::<PodDisruptionBudget>::namespaced(c.clone(), ns),
                GATEWAY,
            )
            .await?
            {
                left.push("gateway PodDisruptionBudget");
            }
            for name in [GATEWAY, GATEWAY_REVIEWS] {
                if exists(Api::<ClusterRole>::all(c.clone()), name).await? {
                    left.push("gateway ClusterRole");
                }
                if exists(Api::<ClusterRoleBinding>::all(c.clone()), name).await? {
                    left.push("gateway ClusterRoleBinding");
                }
            }
            let gateway_pods = Api::<Pod>::namespaced(c.clone(), ns)
                .list(&ListParams::default().labels("app.kubernetes.io/name=ari-gateway"))
                .await
                .map_err(|e| e.to_string())?;
            if !gateway_pods.items.is_empty() {
                left.push("gateway Pod");
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left behind: {left:?}"))
            }
        })
        .await?;
        let crds = Api::<CustomResourceDefinition>::all(c.clone());
        for crd in ["agents.ari.dev", "tasks.ari.dev"] {
            let got = crds.get_opt(crd).await?;
            ensure!(
                got.is_some_and(|c| c.meta().deletion_timestamp.is_none()),
                "CRD {crd} was removed by helm uninstall"
            );
        }
        let tasks = Api::<Task>::all(c.clone())
            .list(&ListParams::default())
            .await?;
        ensure!(
            !tasks.items.is_empty(),
            "Tasks disappeared with the release"
        );
        Ok(())
    })
}

async fn exists<K>(api: Api<K>, name: &str) -> std::result::Result<bool, String>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map(|o| o.is_some())
        .map_err(|e| e.to_string())
}

/// A release with `watchNamespace` (its ClusterRole bound by a RoleBinding in that namespace
/// only) runs that namespace's Agents and Tasks, leaves other namespaces alone, and its token
/// can read nothing outside it.
fn scoped_release(ctx: &Ctx) -> Result<()> {
    ctx.rt.block_on(async {
        let admin = ctx.cluster.client();
        let team = ctx.cluster.new_namespace("team").await?;
        let outside = ctx.cluster.new_namespace("outside").await?;
        let sys = ctx.cluster.new_namespace("ari-team-system").await?;
        restrict(ctx, &sys)?;
        let chart = chart().display().to_string();
        let watch = format!("watchNamespace={team}");
        let release = "ari-team";
        helm_ok(
            ctx,
            &[
                "install",
                release,
                &chart,
                "--namespace",
                &sys,
                "--set",
                &watch,
            ],
        )?;
        wait::until("scoped operator Ready", wait::DEFAULT, || {
            ready_pods(
                &admin,
                &sys,
                "app.kubernetes.io/name=ari-operator,app.kubernetes.io/instance=ari-team",
                1,
            )
        })
        .await?;
        for ns in [&team, &outside] {
            ctx.module_configmap(ns, "echo-module", "echo")?;
            ctx.apply_ok(ns, &agent_yaml("echo", "echo-module", 1, ""))?;
            ctx.apply_ok(ns, &task_yaml("hello", "echo", "hi", ""))?;
        }
        agent_ready(&admin, &team, "echo").await?;
        let t = task_finished(&admin, &team, "hello", wait::DEFAULT).await?;
        expect_reason(&t, TaskPhase::Succeeded, TaskReason::Completed)?;
        // By now the operator has listed and reconciled everything it watches.
        let a: Agent = Api::namespaced(admin.clone(), &outside).get("echo").await?;
        ensure!(
            a.status.is_none(),
            "an Agent outside watchNamespace got a status: {:?}",
            a.status
        );
        ensure!(
            Api::<ServiceAccount>::namespaced(admin.clone(), &outside)
                .get_opt(EXECUTOR_SA)
                .await?
                .is_none(),
            "the scoped operator created executor RBAC outside its namespace"
        );
        let token = token_for(&admin, &sys, "ari-team-operator").await?;
        let op = client_with_token(ctx, &token)?;
        expect_access(
            &op,
            "scoped operator",
            &[
                ("list", "ari.dev", "agents", &team),
                ("create", "apps", "deployments", &team),
                ("update", "coordination.k8s.io", "leases", &sys),
            ],
            &[
                ("list", "ari.dev", "agents", ""),
                ("list", "ari.dev", "agents", &outside),
                ("get", "", "secrets", &outside),
                ("create", "apps", "deployments", &outside),
            ],
        )
        .await?;
        // The release's A2A gateway: Agents and Tasks of its namespace only; the reviews
        // (cluster-scoped) everywhere.
        let token = token_for(&admin, &sys, "ari-team-gateway").await?;
        let gw = client_with_token(ctx, &token)?;
        expect_access(
            &gw,
            "scoped gateway",
            &[
                ("create", "authentication.k8s.io", "tokenreviews", ""),
                ("create", "authorization.k8s.io", "subjectaccessreviews", ""),
                ("list", "ari.dev", "agents", &team),
                ("watch", "ari.dev", "tasks", &team),
                ("create", "ari.dev", "tasks", &team),
                ("patch", "ari.dev", "tasks", &team),
            ],
            &[
                ("list", "ari.dev", "agents", ""),
                ("list", "ari.dev", "tasks", ""),
                ("get", "ari.dev", "agents", &outside),
                ("get", "ari.dev", "tasks", &outside),
                ("create", "ari.dev", "tasks", &outside),
                ("patch", "ari.dev", "tasks", &outside),
            ],
        )
        .await?;
        helm_ok(ctx, &["uninstall", release, "--namespace", &sys])?;
        Ok(())
    })
}
