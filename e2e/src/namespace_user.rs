//! The namespace user every tenant trial (`tests/tenant/`, and the pull-secret attack in
//! `tests/oci.rs`) acts as: a ServiceAccount of the trial's namespace
//! whose Role allows only create/get/list on Agents, Tasks and Plans (and, for the Secret attacks,
//! create/update on Secrets), talking to the API server with its own token — never as admin.

use crate::scenario::Ctx;
use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

const TENANT: &str = "tenant";

/// A client acting as the namespace user of `ns`: create/get/list on Agents, Tasks and Plans, and
/// create/update on Secrets when `secrets`.
pub async fn client(ctx: &Ctx, admin: &Client, ns: &str, secrets: bool) -> Result<Client> {
    let pp = PostParams::default();
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(ns.to_owned()),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(
            &pp,
            &ServiceAccount {
                metadata: meta(TENANT),
                ..Default::default()
            },
        )
        .await?;
    let mut rules = vec![PolicyRule {
        api_groups: Some(vec!["ari.dev".into()]),
        resources: Some(vec!["agents".into(), "tasks".into(), "plans".into()]),
        verbs: vec!["create".into(), "get".into(), "list".into()],
        ..Default::default()
    }];
    if secrets {
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            verbs: vec!["create".into(), "update".into()],
            ..Default::default()
        });
    }
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(
            &pp,
            &Role {
                metadata: meta(TENANT),
                rules: Some(rules),
            },
        )
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(
            &pp,
            &RoleBinding {
                metadata: meta(TENANT),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: TENANT.into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: TENANT.into(),
                    namespace: Some(ns.to_owned()),
                    ..Default::default()
                }]),
            },
        )
        .await?;
    let tenant = token_client(ctx, admin, ns, TENANT).await?;
    role_in_effect(&tenant, ns).await?;
    Ok(tenant)
}

/// Waits until the API server's authorizer has seen the tenant's new RoleBinding (its RBAC
/// cache follows a watch): a trial's first create could otherwise be refused `Forbidden`.
async fn role_in_effect(tenant: &Client, ns: &str) -> Result<()> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(tenant.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                group: Some("ari.dev".into()),
                resource: Some("agents".into()),
                verb: Some("create".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    crate::wait::until(
        "the tenant's Role in effect",
        crate::wait::DEFAULT,
        || async {
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| e.to_string())?;
            match answer.status {
                Some(s) if s.allowed => Ok(()),
                other => Err(format!("not yet: {other:?}")),
            }
        },
    )
    .await?;
    Ok(())
}

/// A client acting as ServiceAccount `sa` of `ns`, with a token from a TokenRequest.
pub async fn token_client(ctx: &Ctx, admin: &Client, ns: &str, sa: &str) -> Result<Client> {
    bound_client(ctx, admin, ns, sa, None).await
}

/// A client acting as ServiceAccount `sa` of `ns` with a token bound to `pod`, as the kubelet
/// mints it for the pod: its claims name the pod, which the executor admission policy reads.
/// What a compromised pod can do with its own token.
pub async fn pod_client(
    ctx: &Ctx,
    admin: &Client,
    ns: &str,
    sa: &str,
    pod: &Pod,
) -> Result<Client> {
    let bound = BoundObjectReference {
        kind: Some("Pod".into()),
        api_version: Some("v1".into()),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
    };
    bound_client(ctx, admin, ns, sa, Some(bound)).await
}

async fn bound_client(
    ctx: &Ctx,
    admin: &Client,
    ns: &str,
    sa: &str,
    bound: Option<BoundObjectReference>,
) -> Result<Client> {
    let pp = PostParams::default();
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            bound_object_ref: bound,
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(sa, &pp, &req)
        .await
        .with_context(|| format!("TokenRequest for {ns}/{sa}"))?
        .status
        .context("empty TokenRequest")?
        .token;
    let mut cfg = ctx.cluster.config().clone();
    cfg.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Ok(Client::try_from(cfg)?)
}
