//! The executor's writes to a Task: the claim, heartbeats, the large-output ConfigMap and the
//! one final status write — every write after the claim conditional on this executor still
//! owning the attempt it claimed.
//!
//! Why: the operator fails or re-queues a Task whose executor went quiet (paused, partitioned,
//! overloaded). Should that executor come back, none of its writes may land on a Task that is
//! no longer its own. Each write carries the resourceVersion of a version this executor saw as
//! its own; on a 409 it re-reads and retries only while the Task still has this uid, names this
//! pod and this attempt, and is `Running`. A Task that is gone or given away is dropped.

use std::collections::BTreeMap;

use ari_crds::names::{LABEL_AGENT, LABEL_TASK, OUTPUT_KEY, TRACE_KEY, output_configmap_name};
use ari_crds::{LiveLog, OutputRef, Task, TaskPhase, TaskReason, TaskStatus};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::convert;

/// Most bytes of output a ConfigMap holds: the API server refuses a ConfigMap whose data and
/// binaryData values add up to more than 1 MiB.
pub const CONFIGMAP_MAX_BYTES: usize = 1024 * 1024;
/// Longest label value (and so the longest Task name the `ari.dev/task` label can carry).
const LABEL_VALUE_MAX: usize = 63;
/// Longest object name (DNS subdomain).
const NAME_MAX: usize = 253;
/// How many 409s in a row one write retries (each time the Task was re-read and still ours).
const MAX_CONFLICTS: usize = 5;

/// The executor's view of the Task API, as one pod of one Agent.
pub struct Writer {
    pub tasks: Api<Task>,
    pub configmaps: Api<ConfigMap>,
    pub pod: String,
    pub agent: String,
}

/// One attempt this executor claimed.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub name: String,
    pub uid: String,
    pub number: u32,
    /// The latest version of the Task seen as this attempt's own; its resourceVersion guards
    /// the next write.
    pub current: Task,
    /// The live view a followed run ended with, for the final write to carry: kept apart from
    /// `current`, which a conflict replaces with a fresh read.
    pub live_log: Option<LiveLog>,
}

/// `task` as the body of a status replace: the API server keeps only its status (and checks
/// its resourceVersion), so the body leaves out what it would decode only to drop — the
/// managedFields and the inline input (up to 1 MiB), which the last version read carries.
/// BENCHMARKS.md (item 3): decoding is the largest part of the API server's CPU per write.
fn status_body(task: &Task) -> Task {
    let mut body = task.clone();
    body.metadata.managed_fields = None;
    body.spec.input = body.spec.input.map(|_| String::new());
    body.spec.input_base64 = body.spec.input_base64.map(|_| String::new());
    body
}

/// Why a Task is not (or no longer) this executor's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotOurs(pub String);

/// How a conditional write ended other than written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The Task was deleted, failed, re-queued or claimed again: drop this attempt.
    #[error("no longer this executor's: {0}")]
    NotOurs(#[from] NotOurs),
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// Every retry met a newer version of the Task (409 after 409); the operator settles it.
    #[error("the Task kept changing (409 after 409)")]
    KeptChanging,
}

/// How a claim ended.
#[derive(Debug)]
pub enum Claim {
    Won(Box<Attempt>),
    /// Someone else wrote first (409): another executor or the operator.
    Lost,
    /// Not a conflict (network, 5xx, ...): worth trying again.
    Error(kube::Error),
}

/// Whether `task` is still attempt `attempt` (uid `uid`) of this `pod`, and `Running`.
pub fn owned_by(task: &Task, uid: &str, pod: &str, attempt: u32) -> Result<(), NotOurs> {
    if task.uid().as_deref() != Some(uid) {
        return Err(NotOurs(
            "the Task was deleted (and perhaps re-created)".into(),
        ));
    }
    let s = task.status.clone().unwrap_or_default();
    if s.phase != Some(TaskPhase::Running) {
        let reason = s
            .reason
            .map(|r| format!("/{}", r.as_str()))
            .unwrap_or_default();
        let phase = s.phase.map_or("Pending", TaskPhase::as_str);
        return Err(NotOurs(format!("the Task is {phase}{reason}")));
    }
    if !s.is_attempt(pod, attempt) {
        return Err(NotOurs(format!(
            "the Task is attempt {:?} on {:?}, not attempt {attempt} on {pod}",
            s.attempts, s.executor
        )));
    }
    Ok(())
}

impl Attempt {
    pub fn owns(&self, task: &Task, pod: &str) -> Result<(), NotOurs> {
        owned_by(task, &self.uid, pod, self.number)
    }
}

/// The writes [`Writer::write_while_ours`] retries.
enum Write<'a> {
    Heartbeat,
    LiveLog(&'a LiveLog),
    Final(&'a (dyn Fn(&mut TaskStatus, Option<i64>) + Sync)),
}

/// Fails `seen` with `reason` and `message` without claiming it — a Task refused before it
/// runs. The write carries the resourceVersion seen, so of many executors one writes it and
/// none overwrites a Task that moved on meanwhile. `Ok(false)` when it did move on (or can no
/// longer fail): nothing to do.
pub async fn refuse(
    tasks: &Api<Task>,
    seen: &Task,
    reason: TaskReason,
    message: &str,
) -> Result<bool, kube::Error> {
    let mut failed = seen.clone();
    let generation = failed.meta().generation;
    let status = failed.status.get_or_insert_with(TaskStatus::default);
    if status
        .fail(reason, message, generation, convert::now())
        .is_err()
    {
        return Ok(false);
    }
    match tasks
        .replace_status(&seen.name_any(), &PostParams::default(), &failed)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

impl Writer {
    /// Claims the version of `seen` (its resourceVersion unchanged): exactly one writer wins.
    pub async fn claim(&self, seen: &Task) -> Claim {
        let name = seen.name_any();
        let mut claim = seen.clone();
        let generation = claim.meta().generation;
        let status = claim.status.get_or_insert_with(TaskStatus::default);
        let Ok(number) = status.claim(&self.pod, generation, convert::now()) else {
            // No longer Pending in the version we saw: someone else has it.
            return Claim::Lost;
        };
        match self
            .tasks
            .replace_status(&name, &PostParams::default(), &claim)
            .await
        {
            Ok(current) => Claim::Won(Box::new(Attempt {
                uid: current.uid().or_else(|| seen.uid()).unwrap_or_default(),
                name,
                number,
                current,
                live_log: None,
            })),
            Err(e) if is_conflict(&e) || is_not_found(&e) => Claim::Lost,
            Err(e) => Claim::Error(e),
        }
    }

    /// Refreshes `lastHeartbeatTime`, only while the attempt is still ours.
    pub async fn heartbeat(&self, attempt: &mut Attempt) -> Result<(), WriteError> {
        self.write_while_ours(attempt, Write::Heartbeat)
            .await
            .map(|_| ())
    }

    /// Publishes the newest guest log lines (`status.liveLog`), only while the attempt is ours.
    pub async fn live_log(&self, attempt: &mut Attempt, log: &LiveLog) -> Result<(), WriteError> {
        self.write_while_ours(attempt, Write::LiveLog(log))
            .await
            .map(|_| ())
    }

    /// The one final write: `fill` sets the ending on the latest own version of the status.
    /// Returns the status written.
    pub async fn finish(
        &self,
        attempt: &mut Attempt,
        fill: &(dyn Fn(&mut TaskStatus, Option<i64>) + Sync),
    ) -> Result<TaskStatus, WriteError> {
        self.write_while_ours(attempt, Write::Final(fill))
            .await
            .map(|t| t.status.unwrap_or_default())
    }

    /// Writes against the resourceVersion of the last version seen as ours; on a 409 re-reads
    /// and retries only while the Task is still this attempt's.
    async fn write_while_ours(
        &self,
        attempt: &mut Attempt,
        write: Write<'_>,
    ) -> Result<Task, WriteError> {
        for _ in 0..MAX_CONFLICTS {
            let result = match &write {
                Write::Heartbeat | Write::LiveLog(_) => {
                    let log = match &write {
                        Write::LiveLog(log) => Some(*log),
                        _ => None,
                    };
                    // A merge patch carrying metadata.resourceVersion is a precondition.
                    let patch = running_patch(&attempt.current, log)?;
                    self.tasks
                        .patch_status(
                            &attempt.name,
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await
                }
                Write::Final(fill) => {
                    let mut next = status_body(&attempt.current);
                    let generation = next.meta().generation;
                    let status = next.status.get_or_insert_with(TaskStatus::default);
                    fill(status, generation);
                    if attempt.live_log.is_some() {
                        status.live_log = attempt.live_log.clone();
                    }
                    self.tasks
                        .replace_status(&attempt.name, &PostParams::default(), &next)
                        .await
                }
            };
            match result {
                Ok(t) => {
                    attempt.current = t.clone();
                    return Ok(t);
                }
                Err(e) if is_conflict(&e) => {
                    let fresh = match self.tasks.get_status(&attempt.name).await {
                        Ok(t) => t,
                        Err(e) if is_not_found(&e) => {
                            return Err(NotOurs("the Task was deleted".into()).into());
                        }
                        Err(e) => return Err(e.into()),
                    };
                    attempt.owns(&fresh, &self.pod)?;
                    attempt.current = fresh;
                }
                Err(e) if is_not_found(&e) => {
                    return Err(NotOurs("the Task was deleted".into()).into());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(WriteError::KeptChanging)
    }

    /// Puts large output in a ConfigMap the Task owns (deleted with it). Never overwrites a
    /// ConfigMap this Task does not own. `Err` is the reason and message the Task fails with.
    pub async fn store_output(
        &self,
        attempt: &Attempt,
        output: &[u8],
    ) -> Result<OutputRef, (TaskReason, String)> {
        if output.len() > CONFIGMAP_MAX_BYTES {
            return Err((
                TaskReason::OutputTooLarge,
                format!(
                    "output is {} bytes; output over {} bytes goes to a ConfigMap, which holds at \
                     most {CONFIGMAP_MAX_BYTES} bytes (lower limits.maxOutputBytes to fail earlier)",
                    output.len(),
                    ari_crds::task::INLINE_OUTPUT_MAX_BYTES,
                ),
            ));
        }
        let name = self
            .store(
                attempt,
                output_name(&attempt.name, &attempt.uid),
                OUTPUT_KEY,
                output,
            )
            .await?;
        Ok(output_ref(name))
    }

    /// Keeps a Task's compressed trace (`spec.trace: Keep`) in a ConfigMap the Task owns, as
    /// output is kept: its name, or why it could not be.
    pub async fn store_trace(&self, attempt: &Attempt, gz: &[u8]) -> Result<String, String> {
        let first = blob_name(&attempt.name, &attempt.uid, "trace");
        self.store(attempt, first, TRACE_KEY, gz)
            .await
            .map_err(|(_, why)| why)
    }

    /// Writes `bytes` under `key` in a ConfigMap the Task owns, named `first` (or, when an
    /// earlier attempt's different bytes are there, `first-<attempt>`): its name.
    async fn store(
        &self,
        attempt: &Attempt,
        first: String,
        key: &str,
        bytes: &[u8],
    ) -> Result<String, (TaskReason, String)> {
        // A ConfigMap of that name owned by this Task holds an earlier attempt's bytes: reuse
        // it when they are the same, else write this attempt's beside it (executors may create
        // ConfigMaps, not update them).
        let again = format!("{first}-{}", attempt.number);
        for name in [first, again] {
            let cm = self.owned_configmap(attempt, &name, key, bytes);
            let existing = match self.configmaps.create(&PostParams::default(), &cm).await {
                Ok(_) => return Ok(name),
                Err(e) if is_conflict(&e) => match self.configmaps.get(&name).await {
                    Ok(existing) => existing,
                    Err(e) => return Err(cannot_store(key, &name, &e)),
                },
                Err(e) => return Err(cannot_store(key, &name, &e)),
            };
            let owned = existing
                .owner_references()
                .iter()
                .any(|o| o.uid == attempt.uid);
            if !owned {
                return Err((
                    TaskReason::HostError,
                    format!(
                        "ConfigMap {name} already exists and is not owned by this Task: {key} \
                         was not stored (nothing was overwritten); delete that ConfigMap or use \
                         another Task name"
                    ),
                ));
            }
            let same = existing
                .binary_data
                .as_ref()
                .and_then(|d| d.get(key))
                .is_some_and(|b| b.0 == bytes);
            if same {
                return Ok(name);
            }
        }
        Err((
            TaskReason::HostError,
            format!("the {key} ConfigMaps of earlier attempts are in the way; not stored"),
        ))
    }

    fn owned_configmap(&self, attempt: &Attempt, name: &str, key: &str, bytes: &[u8]) -> ConfigMap {
        let owner = OwnerReference {
            api_version: Task::api_version(&()).into_owned(),
            kind: Task::kind(&()).into_owned(),
            name: attempt.name.clone(),
            uid: attempt.uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(BTreeMap::from([
                    (LABEL_AGENT.to_string(), label_value(&self.agent, None)),
                    (
                        LABEL_TASK.to_string(),
                        label_value(&attempt.name, Some(&attempt.uid)),
                    ),
                ])),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            binary_data: Some(BTreeMap::from([(
                key.to_string(),
                ByteString(bytes.to_vec()),
            )])),
            ..ConfigMap::default()
        }
    }
}

/// The merge patch of a live log (`Some`) or else a heartbeat on `current`, the latest version
/// seen as this attempt's, guarded by its resourceVersion. The state machine refuses both
/// unless the Task is Running, which a version seen as ours always is; a refusal means it is
/// not ours.
fn running_patch(current: &Task, log: Option<&LiveLog>) -> Result<serde_json::Value, WriteError> {
    let status = current.status.clone().unwrap_or_default();
    let rv = current.resource_version();
    let patch = match log {
        Some(log) => status.patch(rv.as_deref(), |s| s.publish_live_log(log)),
        None => status.patch(rv.as_deref(), |s| s.heartbeat(convert::now())),
    };
    patch.map_err(|e| WriteError::NotOurs(NotOurs(e.to_string())))
}

/// `<task>-output`, or `task-<uid>-output` when the Task's name leaves no room for the suffix
/// (names are at most 253 characters; an attempt suffix needs a few more).
pub fn output_name(task: &str, uid: &str) -> String {
    let plain = output_configmap_name(task);
    if plain.len() + 4 <= NAME_MAX {
        plain
    } else {
        format!("task-{uid}-output")
    }
}

/// `<task>-<what>`, or `task-<uid>-<what>` when the Task's name leaves no room.
fn blob_name(task: &str, uid: &str, what: &str) -> String {
    let plain = format!("{task}-{what}");
    if plain.len() + 4 <= NAME_MAX {
        plain
    } else {
        format!("task-{uid}-{what}")
    }
}

/// `value` when it fits a label (≤ 63 characters), else `fallback` (the Task's uid, 36
/// characters), else a hash: a label that cannot be written must never block the output.
pub fn label_value(value: &str, fallback: Option<&str>) -> String {
    if value.len() <= LABEL_VALUE_MAX {
        return value.to_string();
    }
    match fallback {
        Some(f) if f.len() <= LABEL_VALUE_MAX => f.to_string(),
        _ => {
            use sha2::Digest as _;
            let h = hex::encode(sha2::Sha256::digest(value.as_bytes()));
            format!("sha256-{}", &h[..56])
        }
    }
}

fn output_ref(name: String) -> OutputRef {
    OutputRef {
        config_map: name,
        key: OUTPUT_KEY.to_string(),
    }
}

fn cannot_store(key: &str, name: &str, e: &kube::Error) -> (TaskReason, String) {
    let reason = match e {
        // The API server's own size check (e.g. a smaller limit than ours).
        kube::Error::Api(s) if s.code == 413 || s.message.contains("must have at most") => {
            TaskReason::OutputTooLarge
        }
        _ => TaskReason::HostError,
    };
    (
        reason,
        format!("cannot store {key} in ConfigMap {name}: {e}"),
    )
}

pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};

    use super::*;
    use crate::worker::testutil::{find, mock_client_with_query as mock_client, status};

    const TASK: &str = "/apis/ari.dev/v1alpha1/namespaces/demo/tasks/t1/status";
    const POD: &str = "echo-executor-a";

    fn task_json(rv: &str, phase: Option<&str>, executor: Option<&str>, attempts: u32) -> Value {
        let mut t = json!({
            "apiVersion": "ari.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "t1", "namespace": "demo", "uid": "uid-1",
                         "resourceVersion": rv, "generation": 1},
            "spec": {"agentRef": {"name": "echo"}, "input": "hello"},
        });
        if let Some(p) = phase {
            t["status"] = json!({"phase": p, "executor": executor, "attempts": attempts});
        }
        t
    }

    fn task(v: Value) -> Task {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("task: {e}"))
    }

    fn writer(client: kube::Client) -> Writer {
        Writer {
            tasks: Api::namespaced(client.clone(), "demo"),
            configmaps: Api::namespaced(client, "demo"),
            pod: POD.into(),
            agent: "echo".into(),
        }
    }

    /// Attempt 1 of t1 on [`POD`], last seen at resourceVersion `rv`.
    fn attempt(rv: &str) -> Attempt {
        Attempt {
            name: "t1".into(),
            uid: "uid-1".into(),
            number: 1,
            current: task(task_json(rv, Some("Running"), Some(POD), 1)),
            live_log: None,
        }
    }

    fn succeed(s: &mut TaskStatus, _generation: Option<i64>) {
        s.phase = Some(TaskPhase::Succeeded);
        s.reason = Some(TaskReason::Completed);
    }

    #[tokio::test]
    async fn a_claim_that_conflicts_is_lost() {
        let (client, log) = mock_client(|_, _, _| status(409, "Conflict"));
        let seen = task(task_json("5", None, None, 0));
        assert!(matches!(writer(client).claim(&seen).await, Claim::Lost));
        let puts = find(&log, "PUT", TASK);
        assert_eq!(puts.len(), 1);
        assert_eq!(puts[0].body["metadata"]["resourceVersion"], "5");
        assert_eq!(puts[0].body["status"]["executor"], POD);
        assert_eq!(puts[0].body["status"]["attempts"], 1);
    }

    #[tokio::test]
    async fn a_heartbeat_after_the_operator_failed_the_task_is_refused_and_reports_it_lost() {
        // The operator failed the Task (rv 7) after this executor's last own version (rv 6).
        let (client, log) = mock_client(|method, path, body| match method {
            "PATCH" if body["metadata"]["resourceVersion"] == "7" => (200, body.clone()),
            "PATCH" => status(409, "Conflict"),
            "GET" if path.starts_with(TASK) => {
                let mut t = task_json("7", Some("Failed"), Some(POD), 1);
                t["status"]["reason"] = json!("ExecutorLost");
                (200, t)
            }
            _ => status(404, "NotFound"),
        });
        let mut a = attempt("6");
        let err = writer(client)
            .heartbeat(&mut a)
            .await
            .expect_err("not ours");
        assert!(
            matches!(&err, WriteError::NotOurs(n) if n.0.contains("Failed/ExecutorLost")),
            "{err}"
        );
        let patches = find(&log, "PATCH", TASK);
        assert_eq!(
            patches.len(),
            1,
            "only the refused, guarded heartbeat: {patches:?}"
        );
        assert_eq!(patches[0].body["metadata"]["resourceVersion"], "6");
    }

    #[tokio::test]
    async fn a_heartbeat_retries_a_conflict_while_the_task_is_still_ours() {
        // Someone labelled the Task (rv 8): still ours, so the heartbeat goes on at rv 8.
        let (client, log) = mock_client(|method, path, body| match method {
            "PATCH" if body["metadata"]["resourceVersion"] == "8" => {
                let mut t = task_json("9", Some("Running"), Some(POD), 1);
                t["status"]["lastHeartbeatTime"] = body["status"]["lastHeartbeatTime"].clone();
                (200, t)
            }
            "PATCH" => status(409, "Conflict"),
            "GET" if path.starts_with(TASK) => (200, task_json("8", Some("Running"), Some(POD), 1)),
            _ => status(404, "NotFound"),
        });
        let mut a = attempt("6");
        writer(client).heartbeat(&mut a).await.expect("still ours");
        assert_eq!(a.current.resource_version().as_deref(), Some("9"));
        assert_eq!(find(&log, "PATCH", TASK).len(), 2);
    }

    #[tokio::test]
    async fn a_heartbeat_and_a_live_log_patch_only_their_field_and_only_a_running_task() {
        // (phase of the version last seen, live log or heartbeat, the status patched or None:
        // refused by the state machine without a request)
        let mut log = LiveLog::default();
        log.push("INFO hello");
        type Fields = Option<&'static [&'static str]>;
        let table: Vec<(&str, Option<&LiveLog>, Fields)> = vec![
            ("Running", None, Some(&["lastHeartbeatTime"])),
            ("Running", Some(&log), Some(&["liveLog"])),
            ("Succeeded", None, None),
            ("Failed", Some(&log), None),
            ("Pending", None, None),
        ];
        for (phase, live, want) in table {
            let (client, sent) =
                mock_client(|_, _, _| (200, task_json("7", Some("Running"), Some(POD), 1)));
            let mut a = attempt("6");
            a.current = task(task_json("6", Some(phase), Some(POD), 1));
            let w = writer(client);
            let result = match live {
                Some(l) => w.live_log(&mut a, l).await,
                None => w.heartbeat(&mut a).await,
            };
            let patches = find(&sent, "PATCH", TASK);
            match want {
                Some(fields) => {
                    assert!(result.is_ok(), "{phase}: {result:?}");
                    assert_eq!(patches.len(), 1, "{phase}");
                    let body = &patches[0].body;
                    assert_eq!(body["metadata"]["resourceVersion"], "6", "guarded");
                    let written: Vec<&str> = body["status"]
                        .as_object()
                        .map(|s| s.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    assert_eq!(written, fields, "{phase}");
                }
                None => {
                    assert!(
                        matches!(result, Err(WriteError::NotOurs(_))),
                        "{phase}: {result:?}"
                    );
                    assert!(patches.is_empty(), "{phase}: {patches:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_heartbeat_on_a_deleted_task_reports_it_lost() {
        let (client, _log) = mock_client(|_, _, _| status(404, "NotFound"));
        let mut a = attempt("6");
        let err = writer(client).heartbeat(&mut a).await.expect_err("deleted");
        assert!(matches!(err, WriteError::NotOurs(_)), "{err}");
    }

    #[tokio::test]
    async fn a_final_write_on_a_task_reowned_meanwhile_is_dropped() {
        let (client, log) = mock_client(|method, path, _| match method {
            "PUT" => status(409, "Conflict"),
            "GET" if path.starts_with(TASK) => (
                200,
                task_json("9", Some("Running"), Some("echo-executor-b"), 2),
            ),
            _ => status(404, "NotFound"),
        });
        let mut a = attempt("6");
        let err = writer(client)
            .finish(&mut a, &succeed)
            .await
            .expect_err("re-owned");
        assert!(
            matches!(&err, WriteError::NotOurs(n) if n.0.contains("echo-executor-b")),
            "{err}"
        );
        assert_eq!(
            find(&log, "PUT", TASK).len(),
            1,
            "never written over the new owner"
        );
    }

    #[tokio::test]
    async fn a_final_write_on_a_task_deleted_and_recreated_is_dropped() {
        let (client, log) = mock_client(|method, path, _| match method {
            "PUT" => status(409, "Conflict"),
            "GET" if path.starts_with(TASK) => {
                let mut t = task_json("9", Some("Running"), Some(POD), 1);
                t["metadata"]["uid"] = json!("uid-2");
                (200, t)
            }
            _ => status(404, "NotFound"),
        });
        let mut a = attempt("6");
        let err = writer(client)
            .finish(&mut a, &succeed)
            .await
            .expect_err("new Task");
        assert!(matches!(err, WriteError::NotOurs(_)), "{err}");
        assert_eq!(find(&log, "PUT", TASK).len(), 1);
    }

    /// An API server whose Task changed meanwhile (rv 8) and is still ours: a write at any
    /// other version meets 409, a re-read gets rv 8, a write at rv 8 succeeds.
    fn newer_at_8_still_ours(method: &str, path: &str, body: &Value) -> (u16, Value) {
        match method {
            "PUT" if body["metadata"]["resourceVersion"] == "8" => (200, body.clone()),
            "PUT" => status(409, "Conflict"),
            "GET" if path.starts_with(TASK) => (200, task_json("8", Some("Running"), Some(POD), 1)),
            _ => status(404, "NotFound"),
        }
    }

    #[tokio::test]
    async fn a_final_write_retries_with_the_fresh_version_while_still_ours() {
        let (client, log) = mock_client(newer_at_8_still_ours);
        let mut a = attempt("6");
        let s = writer(client)
            .finish(&mut a, &succeed)
            .await
            .expect("written");
        assert_eq!(s.phase, Some(TaskPhase::Succeeded));
        let puts = find(&log, "PUT", TASK);
        assert_eq!(puts.len(), 2);
        assert_eq!(puts[1].body["status"]["phase"], "Succeeded");
        assert_eq!(
            puts[1].body["status"]["executor"], POD,
            "the claim's fields are kept"
        );
    }

    /// The final write sends what the API server keeps: no managedFields, no inline input
    /// (a status replace would decode and drop them); the status and resourceVersion go.
    #[tokio::test]
    async fn a_final_write_carries_neither_managed_fields_nor_the_input() {
        let (client, log) = mock_client(|method, _, body| match method {
            "PUT" => (200, body.clone()),
            _ => status(404, "NotFound"),
        });
        let mut a = attempt("6");
        a.current.metadata.managed_fields = Some(vec![Default::default()]);
        a.current.spec.input = Some("x".repeat(4096));
        writer(client)
            .finish(&mut a, &succeed)
            .await
            .expect("written");
        let puts = find(&log, "PUT", TASK);
        let body = &puts[0].body;
        assert!(body["metadata"].get("managedFields").is_none(), "{body}");
        assert_eq!(body["spec"]["input"], "");
        assert_eq!(body["metadata"]["resourceVersion"], "6");
        assert_eq!(body["status"]["phase"], "Succeeded");
    }

    /// The live view a followed run ends with goes out with the final status even when that
    /// write first meets a newer version (a child's end, a lease renewal): the re-read Task
    /// holds only the last view published, and followers would miss the run's last text.
    #[tokio::test]
    async fn a_final_write_that_meets_a_conflict_keeps_the_runs_last_live_view() {
        let (client, log) = mock_client(newer_at_8_still_ours);
        let mut a = attempt("6");
        let mut live = LiveLog::default();
        live.push("INFO the last line");
        a.live_log = Some(live);
        writer(client)
            .finish(&mut a, &succeed)
            .await
            .expect("written");
        let puts = find(&log, "PUT", TASK);
        assert_eq!(puts.len(), 2);
        for put in &puts {
            assert_eq!(
                put.body["status"]["liveLog"]["lines"][0], "INFO the last line",
                "each try carries the run's last live view"
            );
        }
    }

    const CMS: &str = "/api/v1/namespaces/demo/configmaps";

    #[tokio::test]
    async fn output_over_what_a_configmap_holds_fails_the_task_without_any_write() {
        let (client, log) = mock_client(|_, _, _| status(500, "unexpected"));
        let big = vec![b'x'; CONFIGMAP_MAX_BYTES + 1];
        let (reason, message) = writer(client)
            .store_output(&attempt("6"), &big)
            .await
            .expect_err("too large");
        assert_eq!(reason, TaskReason::OutputTooLarge);
        assert!(message.contains("1048577 bytes"), "{message}");
        assert!(log.lock().map(|l| l.is_empty()).unwrap_or(false));
    }

    #[tokio::test]
    async fn an_existing_output_configmap_the_task_does_not_own_is_never_overwritten() {
        let (client, log) = mock_client(|method, path, _| match method {
            "POST" => status(409, "AlreadyExists"),
            "GET" if path.starts_with(&format!("{CMS}/t1-output")) => (
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "t1-output", "resourceVersion": "3"},
                       "data": {"precious": "yes"}}),
            ),
            _ => status(403, "Forbidden"),
        });
        let (reason, message) = writer(client)
            .store_output(&attempt("6"), &[b'x'; 5000])
            .await
            .expect_err("not ours");
        assert_eq!(reason, TaskReason::HostError);
        assert!(message.contains("not owned by this Task"), "{message}");
        assert!(find(&log, "PUT", CMS).is_empty(), "overwritten");
        assert!(find(&log, "POST", CMS).len() == 1);
    }

    #[tokio::test]
    async fn an_earlier_attempts_output_configmap_is_reused_or_written_beside() {
        let earlier = Arc::new(Mutex::new(b"old".to_vec()));
        let seen = earlier.clone();
        let (client, log) = mock_client(move |method, path, body| match method {
            "POST" if body["metadata"]["name"] == "t1-output" => status(409, "AlreadyExists"),
            "POST" => (201, body.clone()),
            "GET" if path.starts_with(&format!("{CMS}/t1-output")) => {
                use base64::Engine as _;
                let data = seen.lock().map(|d| d.clone()).unwrap_or_default();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "t1-output",
                                        "ownerReferences": [{"apiVersion": "ari.dev/v1alpha1",
                                            "kind": "Task", "name": "t1", "uid": "uid-1"}]},
                           "binaryData": {"output": base64::engine::general_purpose::STANDARD.encode(data)}}),
                )
            }
            _ => status(403, "Forbidden"),
        });
        let w = writer(client);
        let mut a = attempt("6");
        a.number = 2;
        let out = vec![b'y'; 5000];
        let r = w.store_output(&a, &out).await.expect("stored beside");
        assert_eq!(r.config_map, "t1-output-2");
        if let Ok(mut d) = earlier.lock() {
            d.clone_from(&out);
        }
        let r = w.store_output(&a, &out).await.expect("reused");
        assert_eq!(r.config_map, "t1-output");
        assert!(
            find(&log, "PUT", CMS).is_empty(),
            "executors never update ConfigMaps"
        );
    }

    #[tokio::test]
    async fn a_task_name_too_long_for_a_label_still_gets_its_output_stored() {
        let (client, log) = mock_client(|_, _, body| (201, body.clone()));
        let mut a = attempt("6");
        a.name = "n".repeat(200);
        let r = writer(client)
            .store_output(&a, &[b'x'; 5000])
            .await
            .expect("stored");
        assert_eq!(r.config_map, format!("{}-output", a.name));
        let posts = find(&log, "POST", CMS);
        let label = posts[0].body["metadata"]["labels"][LABEL_TASK]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            label, "uid-1",
            "the uid stands in for a name over 63 characters"
        );
        a.name = "m".repeat(250);
        assert_eq!(output_name(&a.name, &a.uid), "task-uid-1-output");
        assert!(label_value(&"z".repeat(64), None).len() <= 63);
    }
}
