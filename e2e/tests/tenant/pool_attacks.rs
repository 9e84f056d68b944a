//! Attacks on shared executor pools (issue 29, item 1), played by a namespace user who may
//! only create, get and list Agents and Tasks: a pool serves its own namespace and nothing else.

use anyhow::{Context, Result, ensure};
use ari_crds::names::POOL_SERVICE_ACCOUNT;
use ari_crds::{Agent, ExecutorPool, Task, TaskPhase, TaskReason};
use ari_e2e::scenario::*;
use ari_e2e::{trials, wait};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

use crate::namespace_user;

pub fn trials() -> Vec<(&'static str, trials::TrialFn)> {
    vec![(
        "a_pool_serves_only_its_own_namespace_and_its_pods_read_nothing_else",
        a_pool_serves_only_its_own_namespace,
    )]
}

/// The reason of an Agent's `Ready` condition.
async fn ready_reason(client: &Client, ns: &str, name: &str) -> Result<String, String> {
    let a = Api::<Agent>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| e.to_string())?;
    agent_conditions(&a)
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason)
        .ok_or_else(|| "no Ready condition yet".to_owned())
}

/// A tenant names another namespace's pool: the Agent is `PoolNotFound` in its own namespace
/// (a pool reference never leaves it), its Task is never run, the victim's pool counts only its
/// own Agent and goes on serving; and the victim pool's executor token reads no Task of the
/// tenant's namespace and no Secret of its own.
fn a_pool_serves_only_its_own_namespace(ctx: &Ctx) -> Result<()> {
    ctx.in_namespace("t-pool", |admin, ns| async move {
        let victim = ctx.cluster.new_namespace("t-pool-victim").await?;
        ctx.module_configmap(&victim, "echo-module", "echo")?;
        ctx.apply_ok(
            &victim,
            &[
                pool_yaml("shared", 1, 4),
                pooled_yaml("echo", "echo-module", "shared", 1, ""),
            ]
            .join("---\n"),
        )?;
        agent_ready_within(&admin, &victim, "echo", wait::DEFAULT).await?;

        let user = namespace_user::client(ctx, &admin, &ns, false).await?;
        ctx.module_configmap(&ns, "echo-module", "echo")?;
        let intruder: Agent =
            serde_yaml::from_str(&pooled_yaml("intruder", "echo-module", "shared", 1, ""))?;
        Api::<Agent>::namespaced(user.clone(), &ns)
            .create(&PostParams::default(), &intruder)
            .await
            .context("the tenant creates a pooled Agent")?;
        wait::until("intruder says PoolNotFound", wait::DEFAULT, || async {
            match ready_reason(&admin, &ns, "intruder").await? {
                r if r == "PoolNotFound" => Ok(()),
                r => Err(format!("Ready reason {r}")),
            }
        })
        .await?;
        let task: Task = serde_yaml::from_str(&task_yaml("sneak", "intruder", "hi", ""))?;
        Api::<Task>::namespaced(user.clone(), &ns)
            .create(&PostParams::default(), &task)
            .await?;

        // The victim's pool serves on; by the time its Task is done, the tenant's Task was
        // seen by every watch and still never ran.
        ctx.apply_ok(&victim, &task_yaml("after", "echo", "still here", ""))?;
        let done = task_finished(&admin, &victim, "after", wait::DEFAULT).await?;
        expect_reason(&done, TaskPhase::Succeeded, TaskReason::Completed)?;
        let sneak = Api::<Task>::namespaced(admin.clone(), &ns)
            .get("sneak")
            .await?;
        let s = sneak.status.unwrap_or_default();
        ensure!(
            s.executor.is_none() && s.phase != Some(TaskPhase::Running),
            "the tenant's Task was taken by {:?} ({:?})",
            s.executor,
            s.phase
        );
        let pool = wait::until(
            "the victim's pool counts its Agent",
            wait::DEFAULT,
            || async {
                let p = Api::<ExecutorPool>::namespaced(admin.clone(), &victim)
                    .get("shared")
                    .await
                    .map_err(|e| e.to_string())?;
                match p.status.as_ref().and_then(|s| s.agents) {
                    Some(n) => Ok(n),
                    None => Err("no count yet".to_owned()),
                }
            },
        )
        .await?;
        ensure!(pool == 1, "the victim's pool counts {pool} Agents");

        // The pool pods' identity: its own namespace's Tasks only, no Secrets.
        let pool_sa =
            namespace_user::token_client(ctx, &admin, &victim, POOL_SERVICE_ACCOUNT).await?;
        let theirs = Api::<Task>::namespaced(pool_sa.clone(), &ns)
            .list(&ListParams::default())
            .await;
        ensure!(
            matches!(&theirs, Err(kube::Error::Api(s)) if s.code == 403),
            "the pool's token listed the tenant's Tasks: {theirs:?}"
        );
        let secrets = Api::<Secret>::namespaced(pool_sa.clone(), &victim)
            .list(&ListParams::default())
            .await;
        ensure!(
            matches!(&secrets, Err(kube::Error::Api(s)) if s.code == 403),
            "the pool's token listed Secrets: {secrets:?}"
        );
        let own = Api::<Task>::namespaced(pool_sa, &victim)
            .list(&ListParams::default())
            .await?;
        ensure!(
            !own.items.is_empty(),
            "the pool's token reads its own Tasks"
        );
        Ok(())
    })
}
