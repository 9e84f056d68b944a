//! The Node object and its heartbeat (Ready condition and Lease), which keep the node
//! lifecycle controller from tainting the node and evicting its pods.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::NodeCtx;
use super::status::now;

/// How often the node reports it is alive (the kubelet's default).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The node conditions; the transition time is only set at registration, since nothing
/// transitions afterwards (strategic merge by `type` keeps the old one).
fn conditions(registering: bool) -> Value {
    let t = now();
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        let mut c = json!({
            "type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": t,
        });
        if registering {
            c["lastTransitionTime"] = json!(t);
        }
        c
    };
    json!([
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "ari e2e node agent is ready"
        ),
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "no pressure"
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "no pressure"
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "no pressure"
        ),
    ])
}

/// `kubelet_port` is where the API server reaches this node's kubelet API (`kubectl logs`).
fn status(name: &str, kubelet_port: u16) -> Value {
    let resources =
        json!({ "cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi" });
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions(true),
            "addresses": [
                { "type": "InternalIP", "address": "127.0.0.1" },
                { "type": "Hostname", "address": name },
            ],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": kubelet_port } },
            "nodeInfo": {
                "machineID": name, "systemUUID": name, "bootID": name,
                "kernelVersion": "host", "osImage": "ari e2e node agent",
                "containerRuntimeVersion": "ari-e2e://host-processes",
                "kubeletVersion": "v1.35.4", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
            },
        }
    })
}

/// Creates (or takes over) the Node and its Lease, with a Ready status.
pub(crate) async fn register(ctx: &NodeCtx, kubelet_port: u16) -> Result<(), kube::Error> {
    let name = &ctx.node_name;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH,
                "ari.dev/e2e-node": "true",
            },
        },
        "spec": {},
    }))
    .map_err(kube::Error::SerdeError)?;
    let created = match nodes.create(&PostParams::default(), &node).await {
        Ok(n) => n,
        Err(kube::Error::Api(s)) if s.code == 409 => nodes.get(name).await?,
        Err(e) => return Err(e),
    };
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(status(name, kubelet_port)),
        )
        .await?;

    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), "kube-node-lease");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.clone(),
                uid: created.metadata.uid.unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.clone()),
            lease_duration_seconds: Some(40),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    match leases.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Renews the Lease and the Ready condition until the task is dropped.
pub(crate) async fn heartbeat(ctx: std::sync::Arc<NodeCtx>) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), "kube-node-lease");
    loop {
        tokio::time::sleep(HEARTBEAT).await;
        let name = &ctx.node_name;
        let cond = json!({ "status": { "conditions": conditions(false) } });
        if let Err(e) = nodes
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(cond))
            .await
        {
            tracing::warn!(node = %name, "node heartbeat: {e}");
        }
        let renew = json!({ "spec": { "renewTime": MicroTime(Timestamp::now()) } });
        if let Err(e) = leases
            .patch(name, &PatchParams::default(), &Patch::Merge(renew))
            .await
        {
            tracing::warn!(node = %name, "lease renewal: {e}");
        }
    }
}
