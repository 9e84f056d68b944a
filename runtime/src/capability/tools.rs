//! The `tools` capability: tools of remote MCP servers through the host, which is the MCP
//! client and holds the servers' credentials.
//!
//! The guest names a server its Agent is granted and a tool that grant allows; anything else
//! is `denied` before a byte is sent. The host resolves the server's name to what the executor
//! loaded (URL, credentials), lists the server's tools once per task before the first call (so
//! a tool it does not offer is `not-found` without a call), and makes each exchange within the
//! task's deadline and the call's own time limit, interrupted by the task's cancellation, with
//! the answer bounded in size (`ari_mcp::Session`). Each exchange is recorded in the trace
//! whole (request without credentials, answer or error), so a replay serves the answers and
//! contacts no server.

mod events;
mod link;
pub use events::ToolEvent;
pub use link::FUEL;

use std::time::Instant;

use ari_mcp::record::{Call, CallRecord, Replayer};
use ari_mcp::{
    CallError, Client, Limits, Session, Source, ToolError, ToolInfo, ToolResult, ToolServer,
};
use ari_model::approval::CallSubject;
use ari_model::grant::ToolsGrant;
use ari_model::record::clip;
use ari_model::{CapabilityName, ToolOutcome, ToolServerApplied};
use std::sync::Arc;

use super::approval::{ApprovalGate, Verdict};
use super::io::{self, CallCancel, Loaded};
use super::{CapError, CapUsage, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;
use crate::trace::Recorder;

/// Sees a task's tool calls as they are made (for A2A followers): each call before it is
/// sent, then how it came out. Called on the guest's thread in the middle of a host call: it
/// must not block (a slow follower must not slow the task). Not called in a replay.
pub trait ToolTap: Send + Sync {
    /// A call the guest makes, with its arguments (JSON text) as given.
    fn call(&self, server: &str, tool: &str, arguments: &str);
    /// How the call came out, with the answer's text (empty for an error).
    fn result(&self, server: &str, tool: &str, outcome: ToolOutcome, text: &str);
    /// Tool calls made so far (as `resourcesUsed.toolCalls` will count them), once a call has
    /// come out.
    fn usage(&self, tool_calls: u64);
}

/// Most bytes of tools records one task keeps in its trace (the rest of the trace's ceiling is
/// left to the other capabilities). An exchange whose record would not fit is refused.
pub const MAX_RECORD_BYTES: usize = 16 << 20;

/// The MCP servers a host loaded for an agent: each granted name resolved to its URL and
/// credentials, and the client that calls them (`ari run`: from `--mcp`).
pub type LoadedTools = Loaded<ToolServer, Client>;

/// One task's tools exchanges.
pub struct ToolsCapability {
    grant: Option<ToolsGrant>,
    tools: LoadedTools,
    session: Session,
    /// The task's cancellation: an exchange in flight returns at once.
    cancel: CallCancel,
    deadline: Option<Instant>,
    tap: Option<Arc<dyn ToolTap>>,
    /// Calls that wait for a person's decision.
    approvals: ApprovalGate,
}

/// What a call came to, for the host function.
pub(crate) type Ending<T> = io::Ending<T, ToolError>;

impl Capability for ToolsCapability {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Tools);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        let tools = grants.tools().clone();
        let limits = tools.client().map_or_else(Limits::default, Client::limits);
        let source = match (tools.client(), task.replay) {
            (Some(client), false) => Source::Live(client.clone()),
            // A replay serves the trace's records, one per exchange; so does a live run whose
            // host loaded no client (every call then fails: no record to serve).
            _ => Source::Replay(Replayer::default()),
        };
        Self {
            grant: grants.spec().tools.clone(),
            tools,
            session: Session::new(source, MAX_RECORD_BYTES, limits.max_arguments_bytes),
            cancel: CallCancel::new(task.cancel.clone()),
            deadline: None,
            tap: if task.replay {
                None
            } else {
                task.tool_tap.clone()
            },
            approvals: ApprovalGate::for_task(task),
        }
    }

    fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        self.approvals.set_deadline(deadline);
    }

    fn add_usage(&self, usage: &mut CapUsage) {
        usage.tool_calls = self.made();
    }
}

impl ToolsCapability {
    /// Tool calls made so far: those recorded (a refused call is not one).
    fn made(&self) -> u64 {
        let calls = self
            .session
            .recording()
            .records()
            .iter()
            .filter(|r| matches!(r.call, Call::Tool { .. }))
            .count();
        u64::try_from(calls).unwrap_or(u64::MAX)
    }

    /// The names of the servers this task may use.
    pub fn servers(&self) -> Vec<String> {
        self.grant
            .iter()
            .flat_map(|g| &g.servers)
            .map(|s| s.name.clone())
            .collect()
    }

    /// The granted, loaded server `name`, or the guest's error; with `tool`, that tool must be
    /// granted on it too. Nothing is sent.
    fn server(&self, name: &str, tool: Option<&str>) -> Result<ToolServer, ToolError> {
        let Some(grant) = &self.grant else {
            return Err(ToolError::denied("capability `tools` not granted"));
        };
        let Some(entry) = grant.server(name) else {
            return Err(ToolError::denied(format!(
                "tool server `{}` is not granted",
                clip(name)
            )));
        };
        if let Some(tool) = tool
            && !entry.allows(tool)
        {
            return Err(ToolError::denied(format!(
                "tool `{}` of server `{}` is not granted",
                clip(tool),
                clip(name)
            )));
        }
        self.tools.get(name).cloned().ok_or_else(|| {
            ToolError::unavailable(format!(
                "tool server `{}` is not configured in this namespace",
                clip(name)
            ))
        })
    }

    /// The tools of `server` the grant allows (see the module docs).
    pub(crate) fn list(
        &mut self,
        name: &str,
        recorder: &mut Recorder,
    ) -> Result<Ending<Vec<ToolInfo>>, CapError> {
        let server = match self.server(name, None) {
            Ok(server) => server,
            Err(refused) => return Ok(Ending::Done(Err(refused))),
        };
        let tools = match self.list_exchange(&server, recorder)? {
            Ending::Done(Ok(tools)) => tools,
            Ending::Done(Err(e)) => return Ok(Ending::Done(Err(e))),
            Ending::Deadline => return Ok(Ending::Deadline),
        };
        let allowed = self.grant.as_ref().and_then(|g| g.server(name));
        Ok(Ending::Done(Ok(tools
            .into_iter()
            .filter(|t| allowed.is_some_and(|s| s.allows(&t.name)))
            .collect())))
    }

    /// One call of `tool` of `server` with `arguments` (JSON text; see the module docs), told
    /// to the tap (if any) before it is made and once it has come out.
    pub(crate) fn call(
        &mut self,
        name: &str,
        tool: &str,
        arguments: &str,
        recorder: &mut Recorder,
    ) -> Result<Ending<ToolResult>, CapError> {
        let Some(tap) = self.tap.clone() else {
            return self.exchange(name, tool, arguments, recorder);
        };
        tap.call(name, tool, arguments);
        let ending = self.exchange(name, tool, arguments, recorder);
        if let Ok(Ending::Done(done)) = &ending {
            match done {
                Ok(r) if r.is_error => tap.result(name, tool, ToolOutcome::ToolError, &r.text()),
                Ok(r) => tap.result(name, tool, ToolOutcome::Answered, &r.text()),
                Err(e) => tap.result(name, tool, e.outcome(), ""),
            }
        }
        tap.usage(self.made());
        ending
    }

    /// [`ToolsCapability::call`]'s work: grant, arguments, listing, then the exchange.
    fn exchange(
        &mut self,
        name: &str,
        tool: &str,
        arguments: &str,
        recorder: &mut Recorder,
    ) -> Result<Ending<ToolResult>, CapError> {
        let server = match self.server(name, Some(tool)) {
            Ok(server) => server,
            Err(refused) => return Ok(Ending::Done(Err(refused))),
        };
        let admitted = match self.session.admit_arguments(arguments) {
            Ok(admitted) => admitted,
            Err(refused) => return Ok(Ending::Done(Err(refused))),
        };
        if self.session.listed(name).is_none() {
            match self.list_exchange(&server, recorder)? {
                Ending::Done(Ok(_)) => {}
                Ending::Done(Err(e)) => return Ok(Ending::Done(Err(e))),
                Ending::Deadline => return Ok(Ending::Deadline),
            }
        }
        let destructive = match self.session.find(name, tool) {
            Ok(info) => info.hints.destructive,
            Err(missing) => return Ok(Ending::Done(Err(missing))),
        };
        let needs_approval = self
            .grant
            .as_ref()
            .and_then(|g| g.server(name))
            .is_some_and(|s| s.needs_approval(tool, destructive));
        if needs_approval {
            let request = self.approvals.request(
                CallSubject::Tool {
                    server: name.to_owned(),
                    tool: tool.to_owned(),
                },
                &[name.as_bytes(), tool.as_bytes(), arguments.as_bytes()],
                arguments.to_owned(),
            );
            match self.approvals.decide::<ToolEvent>(&request, recorder)? {
                Verdict::Approved => {}
                Verdict::Rejected(why) => return Ok(Ending::Done(Err(ToolError::rejected(why)))),
                Verdict::Deadline => return Ok(Ending::Deadline),
            }
        }
        if self.take_record(recorder)? {
            return Ok(Ending::Deadline);
        }
        let until = self.until();
        let exchange = self.session.call(&server, tool, admitted, until);
        let result = self.cancel.wait(exchange)?;
        self.finish(recorder, result)
    }

    /// Lists `server`'s tools: one exchange, recorded.
    fn list_exchange(
        &mut self,
        server: &ToolServer,
        recorder: &mut Recorder,
    ) -> Result<Ending<Vec<ToolInfo>>, CapError> {
        if let Err(refused) = self.session.room_for(server.name.len()) {
            return Ok(Ending::Done(Err(refused)));
        }
        if self.take_record(recorder)? {
            return Ok(Ending::Deadline);
        }
        let until = self.until();
        let exchange = self.session.list(server, until);
        let result = self.cancel.wait(exchange)?;
        self.finish(recorder, result)
    }

    /// In replay, hands the session the trace's next record for an exchange about to be made;
    /// `true` when the recorded exchange was cut by the deadline instead.
    fn take_record(&mut self, recorder: &mut Recorder) -> Result<bool, CapError> {
        if !recorder.is_replay() {
            return Ok(false);
        }
        match recorder.replay_next::<ToolEvent>(ToolEvent::ASKED)? {
            ToolEvent::Call { record } => {
                self.session.queue_recorded(*record.0);
                Ok(false)
            }
            ToolEvent::Deadline => Ok(true),
            ToolEvent::Approval { .. } => Err(CapError::Failed(
                "replay diverged: a recorded approval where an exchange was made".into(),
            )),
        }
    }

    /// An exchange's deadline: the task's.
    fn until(&self) -> tokio::time::Instant {
        match self.deadline {
            Some(deadline) => tokio::time::Instant::from_std(deadline),
            None => tokio::time::Instant::now() + std::time::Duration::from_secs(3600),
        }
    }

    /// Records what an exchange came to (live; a replay's event was recorded as it was read).
    fn finish<T>(
        &mut self,
        recorder: &mut Recorder,
        result: Result<T, CallError>,
    ) -> Result<Ending<T>, CapError> {
        let replay = recorder.is_replay();
        match result {
            Err(CallError::Diverged(d)) => Err(CapError::Failed(format!("replay diverged: {d}"))),
            Err(CallError::Tool(_))
                if !replay && self.deadline.is_some_and(|d| Instant::now() >= d) =>
            {
                // Cut by the task's deadline: recorded as such, so the replay ends alike.
                recorder.record(ToolEvent::Deadline);
                Ok(Ending::Deadline)
            }
            Err(CallError::Tool(error)) => {
                self.record_last(recorder, replay);
                Ok(Ending::Done(Err(error)))
            }
            Ok(answer) => {
                self.record_last(recorder, replay);
                Ok(Ending::Done(Ok(answer)))
            }
        }
    }

    fn record_last(&self, recorder: &mut Recorder, replay: bool) {
        if !replay && let Some(record) = self.session.last_record() {
            recorder.record(ToolEvent::call(record.clone()));
        }
    }
}

/// What a run's `limitsApplied` says of a granted server: its URL as it was loaded, never its
/// credentials.
pub fn applied(server: &ToolServer) -> String {
    server.id().url
}

/// The server a replay names, from what the run's `limitsApplied` says of it (no credentials:
/// a replay contacts no server). `None` when it was not loaded or its URL does not parse.
pub fn replayed(applied: &ToolServerApplied) -> Option<ToolServer> {
    let url = url::Url::parse(applied.url.as_deref()?).ok()?;
    ToolServer::new(applied.name.clone(), url).ok()
}

/// The records a replay reads, kept apart from the rest of the trace (for `ari verify`'s
/// report of which servers answered).
pub fn records_of(trace: &crate::trace::Trace) -> Vec<CallRecord> {
    trace
        .events
        .iter()
        .filter_map(|e| match ToolEvent::try_from(e.clone()) {
            Ok(ToolEvent::Call { record }) => Some(*record.0),
            _ => None,
        })
        .collect()
}
