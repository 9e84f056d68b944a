//! The namespace's executor ServiceAccount, Role and RoleBinding (least privilege).
//!
//! Shared by every Agent of the namespace, so no single Agent owns them (no owner references):
//! deleting one Agent must not revoke the others' executors. They are labelled as managed by
//! the operator and left in place when the last Agent goes (they grant nothing on their own).

use std::collections::BTreeMap;

use ari_crds::names;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_owned(),
            "ari-operator".to_owned(),
        )])),
        ..Default::default()
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let v = |xs: &[&str]| xs.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(v(groups)),
        resources: Some(v(resources)),
        verbs: v(verbs),
        ..Default::default()
    }
}

/// The ServiceAccount `name` (dedicated or pool executors) of `namespace`.
pub fn service_account(namespace: &str, name: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(namespace, name),
        ..Default::default()
    }
}

/// Exactly what `ari worker` needs: read its Agent and Tasks, create and cancel child Tasks,
/// write Task status, create output ConfigMaps, read module ConfigMaps, see its peer pods, emit Events.
pub fn role(namespace: &str) -> Role {
    Role {
        metadata: meta(namespace, names::EXECUTOR_SERVICE_ACCOUNT),
        rules: Some(vec![
            rule(&["ari.dev"], &["agents"], &["get", "list", "watch"]),
            // Create and patch: a delegating guest's children are Tasks, cancelled (`patch`
            // of `spec.cancelled`) with their parent. RBAC cannot narrow these to children of
            // the pod's own Agent; the chart's `executor-writes` admission policy does.
            rule(
                &["ari.dev"],
                &["tasks"],
                &["get", "list", "watch", "create", "patch"],
            ),
            rule(&["ari.dev"], &["tasks/status"], &["get", "update", "patch"]),
            rule(&[""], &["configmaps"], &["get", "create"]),
            // Peers: which executors of the Agent are Ready, to split Tasks without racing.
            rule(&[""], &["pods"], &["get", "list", "watch"]),
            rule(&["", "events.k8s.io"], &["events"], &["create", "patch"]),
        ]),
    }
}

/// What a pool executor needs: as [`role`] (a pooled Agent may delegate, so its pool's pods
/// create and cancel child Tasks), under a name of its own. The chart's `executor-writes`
/// admission policy binds those writes to the pool: a pool pod creates and cancels only
/// children naming its own pool (`spec.parent.pool`), and the child's executor and the
/// operator refuse one whose parent Agent is not in that pool. Granted whether or not a pool
/// of the namespace hosts a delegating Agent: one Role serves every pool of the namespace, and
/// a grant withdrawn when the last delegating Agent leaves would stop its running trees'
/// cancellation; without delegation a pool pod's child is refused before it runs anyway.
pub fn pool_role(namespace: &str) -> Role {
    Role {
        metadata: meta(namespace, names::POOL_SERVICE_ACCOUNT),
        ..role(namespace)
    }
}

/// Binds the Role named `name` to the ServiceAccount of that name.
pub fn role_binding(namespace: &str, name: &str) -> RoleBinding {
    RoleBinding {
        metadata: meta(namespace, name),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "Role".to_owned(),
            name: name.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: name.to_owned(),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        }]),
    }
}

/// What every executor of `namespace` needs before its pods start: the identity `name` with
/// `role` (applied when [`Context::due`]) and the namespace's attestation key (its tenant copy
/// ensured; `restored` says a changed copy was replaced).
pub async fn executor_prerequisites(
    ctx: &crate::context::Context,
    namespace: &str,
    name: &'static str,
    role: impl FnOnce(&str) -> Role,
) -> Result<super::key::Ensured, crate::error::Error> {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::Api;
    if ctx.due(namespace, name) {
        apply_identity(&ctx.client, namespace, name, &role(namespace)).await?;
        ctx.applied(namespace, name);
    }
    let op_ns = &ctx.settings.operator_namespace;
    Ok(super::key::ensure(
        &Api::<Secret>::namespaced(ctx.client.clone(), op_ns),
        op_ns,
        &Api::<Secret>::namespaced(ctx.client.clone(), namespace),
        namespace,
    )
    .await?)
}

/// The ServiceAccount, Role and RoleBinding `name` of `namespace`, applied by the operator.
pub async fn apply_identity(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    role: &Role,
) -> Result<(), kube::Error> {
    use kube::api::{Api, Patch, PatchParams};
    let pp = PatchParams::apply(names::OPERATOR_FIELD_MANAGER).force();
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(name, &pp, &Patch::Apply(service_account(namespace, name)))
        .await?;
    Api::<Role>::namespaced(client.clone(), namespace)
        .patch(name, &pp, &Patch::Apply(role))
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .patch(name, &pp, &Patch::Apply(role_binding(namespace, name)))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29 item 1: a pooled Agent delegates, so its pool's pods create and cancel child
    /// Tasks as a dedicated executor does, and hold nothing more (no Secret, no Task update or
    /// delete); the admission policy narrows the writes to children of the pool's own Agents.
    #[test]
    fn a_pool_executor_creates_and_cancels_tasks_as_a_dedicated_one_and_nothing_more() {
        let pool = pool_role("ns");
        assert_eq!(
            pool.metadata.name.as_deref(),
            Some(names::POOL_SERVICE_ACCOUNT)
        );
        let rules = pool.rules.unwrap_or_default();
        assert_eq!(rules, role("ns").rules.unwrap_or_default());
        let task_verbs: Vec<&str> = rules
            .iter()
            .filter(|r| r.resources.iter().flatten().any(|x| x == "tasks"))
            .flat_map(|r| r.verbs.iter().map(String::as_str))
            .collect();
        assert_eq!(task_verbs, ["get", "list", "watch", "create", "patch"]);
        assert!(
            !rules
                .iter()
                .any(|r| r.resources.iter().flatten().any(|x| x == "secrets"))
        );
    }

    #[test]
    fn role_grants_nothing_beyond_the_worker_needs() {
        let r = role("ns");
        let rules = r.rules.unwrap_or_default();
        let flat: Vec<(String, String)> = rules
            .iter()
            .flat_map(|r| {
                let res = r.resources.clone().unwrap_or_default();
                r.verbs.iter().flat_map(move |v| {
                    res.iter()
                        .map(move |x| (x.clone(), v.clone()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        assert!(flat.contains(&("tasks/status".into(), "update".into())));
        assert!(
            !flat
                .iter()
                .any(|(_, v)| v == "delete" || v == "*" || v == "deletecollection")
        );
        assert!(!flat.iter().any(|(r, _)| r == "secrets" || r == "*"));
        // Pods are read to find peers, never written.
        assert!(
            flat.iter()
                .filter(|(r, _)| r == "pods")
                .all(|(_, v)| ["get", "list", "watch"].contains(&v.as_str()))
        );
        assert!(!flat.contains(&("tasks".into(), "update".into())));
        assert!(!flat.contains(&("configmaps".into(), "list".into())));
        let rb = role_binding("ns", names::EXECUTOR_SERVICE_ACCOUNT);
        assert_eq!(
            rb.subjects.unwrap_or_default()[0].namespace.as_deref(),
            Some("ns")
        );
    }
}
