//! The canonical events of a Task: what changed between two looks at it (and at its children),
//! typed. The same events feed the A2A streams and the plain SSE endpoint.

use std::collections::BTreeMap;

use ari_crds::{Task, TaskPhase};
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

use crate::a2a::TaskState;
use crate::convert;

/// Most children a stream follows; later ones are not reported (the Task's status lists them).
const MAX_FOLLOWED_CHILDREN: usize = 256;

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Event {
    /// The task changed state.
    #[serde(rename_all = "camelCase")]
    Status {
        task: String,
        state: TaskState,
        #[serde(skip_serializing_if = "Option::is_none")]
        phase: Option<TaskPhase>,
    },
    /// Guest log lines, as written (`missed`: lines written meanwhile that are no longer kept).
    #[serde(rename_all = "camelCase")]
    Log {
        task: String,
        lines: Vec<String>,
        #[serde(skip_serializing_if = "is_zero")]
        missed: u64,
    },
    /// Text the Task's model calls generated since the last event, as the model produced it
    /// (`missed`: bytes produced meanwhile that are no longer kept). The guest receives each
    /// answer whole; this is for followers to watch it come.
    #[serde(rename_all = "camelCase")]
    ModelText {
        task: String,
        text: String,
        #[serde(skip_serializing_if = "is_zero")]
        missed: u64,
    },
    /// A tool call the Task is making (`arguments`: the start of its JSON text), before it
    /// is sent. `missed`: tool events made meanwhile that are no longer kept.
    #[serde(rename_all = "camelCase")]
    ToolCall {
        task: String,
        server: String,
        tool: String,
        arguments: String,
        #[serde(skip_serializing_if = "is_zero")]
        missed: u64,
    },
    /// How a tool call came out (`text`: the start of the answer's text).
    #[serde(rename_all = "camelCase")]
    ToolResult {
        task: String,
        server: String,
        tool: String,
        outcome: ari_crds::ToolOutcome,
        #[serde(skip_serializing_if = "String::is_empty")]
        text: String,
        #[serde(skip_serializing_if = "is_zero")]
        missed: u64,
    },
    /// A child Task was started or has ended.
    #[serde(rename_all = "camelCase")]
    Delegation {
        task: String,
        child: String,
        agent: String,
        state: TaskState,
        #[serde(skip_serializing_if = "Option::is_none")]
        fuel: Option<u64>,
    },
    /// What the task used: its resources (token totals included) and, for each model it
    /// called, the endpoint and model id that answered with their calls and tokens (what usage
    /// is billed by). `partial` while it runs: then only what grows during a run is counted
    /// (model calls and tokens, tool calls), each time it grows; the end brings the whole.
    #[serde(rename_all = "camelCase")]
    Usage {
        task: String,
        resources_used: Value,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        models: Vec<ari_crds::ModelCalls>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    /// The task ended; the stream closes after this.
    #[serde(rename_all = "camelCase")]
    Done {
        task: String,
        state: TaskState,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        output_sha256: Option<String>,
    },
    /// The stream cannot go on (the Task was deleted, the gateway is stopping); it closes.
    #[serde(rename_all = "camelCase")]
    Error { task: String, message: String },
}

/// The tool events a reader that had seen `seen` has not seen; the first carries how many
/// it missed.
fn tool_events(task: &str, tools: &ari_crds::LiveTools, seen: u64) -> Vec<Event> {
    let (new, mut missed) = tools.since(seen);
    new.iter()
        .map(|e| {
            let missed = std::mem::take(&mut missed);
            let (task, server, tool) = (task.to_owned(), e.server.clone(), e.tool.clone());
            match e.outcome {
                None => Event::ToolCall {
                    task,
                    server,
                    tool,
                    arguments: e.preview.clone(),
                    missed,
                },
                Some(outcome) => Event::ToolResult {
                    task,
                    server,
                    tool,
                    outcome,
                    text: e.preview.clone(),
                    missed,
                },
            }
        })
        .collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Event {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Status { .. } => "status",
            Self::Log { .. } => "log",
            Self::ModelText { .. } => "modelText",
            Self::ToolCall { .. } => "toolCall",
            Self::ToolResult { .. } => "toolResult",
            Self::Delegation { .. } => "delegation",
            Self::Usage { .. } => "usage",
            Self::Done { .. } => "done",
            Self::Error { .. } => "error",
        }
    }

    /// After this event nothing more comes.
    pub fn is_last(&self) -> bool {
        matches!(self, Self::Done { .. } | Self::Error { .. })
    }
}

/// What a stream has already told about one Task, so each look yields only what is new.
#[derive(Default, Debug)]
pub struct Follow {
    state: Option<TaskState>,
    log_seen: u64,
    /// Bytes of model text already told.
    text_seen: u64,
    /// Tool events already told.
    tools_seen: u64,
    /// The usage so far last told.
    usage_seen: Option<ari_crds::LiveUsage>,
    /// Child name → last state told.
    children: BTreeMap<String, TaskState>,
    ended: bool,
    /// The newest `resourceVersion` looked at: an older version (the watch can deliver one
    /// after the Task was read directly) is skipped, so a stream never goes back in time.
    version: Option<u64>,
}

impl Follow {
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether `task` is older than a version already looked at; otherwise remembers it.
    fn stale(&mut self, task: &Task) -> bool {
        let Some(v) = task
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            return false;
        };
        if self.version.is_some_and(|seen| v < seen) {
            return true;
        }
        self.version = Some(v);
        false
    }

    /// The events between the last look at the Task and `task`.
    pub fn task(&mut self, task: &Task) -> Vec<Event> {
        let mut out = Vec::new();
        if self.ended || self.stale(task) {
            return out;
        }
        let name = task.name_any();
        let status = task.status.as_ref();
        if let Some(live) = status.and_then(|s| s.live_log.as_ref()) {
            let (lines, missed) = live.since(self.log_seen);
            if !lines.is_empty() || missed > 0 {
                out.push(Event::Log {
                    task: name.clone(),
                    lines: lines.to_vec(),
                    missed,
                });
            }
            self.log_seen = self.log_seen.max(live.seq);
            if let Some(text) = &live.model_text {
                let (new, missed) = text.since(self.text_seen);
                if !new.is_empty() || missed > 0 {
                    out.push(Event::ModelText {
                        task: name.clone(),
                        text: new.to_owned(),
                        missed,
                    });
                }
                self.text_seen = self.text_seen.max(text.seq);
            }
            if let Some(tools) = &live.tools {
                out.extend(tool_events(&name, tools, self.tools_seen));
                self.tools_seen = self.tools_seen.max(tools.seq);
            }
            out.extend(self.usage_so_far(&name, live.usage.as_ref()));
        }
        // Children the status lists, for those the watch did not show (e.g. already gone).
        for child in status.map(|s| s.children.as_slice()).unwrap_or_default() {
            let Some(child_name) = &child.name else {
                continue; // a message that was refused before a Task existed
            };
            let state = child_state(child.phase);
            out.extend(self.child_seen(&name, child_name, &child.agent, state, Some(child.fuel)));
        }
        let state = convert::state(task);
        if self.state != Some(state) {
            self.state = Some(state);
            out.push(Event::Status {
                task: name.clone(),
                state,
                phase: status.and_then(|s| s.phase),
            });
        }
        if state.is_terminal() {
            if let Some(used) = status
                .and_then(|s| s.resources_used.as_ref())
                .and_then(|r| serde_json::to_value(r).ok())
            {
                out.push(Event::Usage {
                    task: name.clone(),
                    resources_used: used,
                    models: status.map(|s| s.models.clone()).unwrap_or_default(),
                    partial: false,
                });
            }
            out.push(Event::Done {
                task: name,
                state,
                reason: status.and_then(|s| s.reason).map(|r| r.as_str().to_owned()),
                output_sha256: status.and_then(|s| s.output_sha256.clone()),
            });
            self.ended = true;
        }
        out
    }

    /// A partial usage event when the running Task's usage grew since the last one told.
    fn usage_so_far(&mut self, task: &str, usage: Option<&ari_crds::LiveUsage>) -> Option<Event> {
        let usage = usage?;
        if self.usage_seen.as_ref() == Some(usage) {
            return None;
        }
        self.usage_seen = Some(usage.clone());
        let mut used = serde_json::to_value(usage.totals()).ok()?;
        // Only what is counted while running: a zero fuel here would read as a measurement.
        if let Value::Object(fields) = &mut used {
            fields.retain(|_, v| v.as_u64() != Some(0));
        }
        Some(Event::Usage {
            task: task.to_owned(),
            resources_used: used,
            models: usage.models.clone(),
            partial: true,
        })
    }

    /// The events a child Task's change makes for its parent's stream.
    pub fn child(&mut self, parent: &str, child: &Task) -> Vec<Event> {
        if self.ended {
            return Vec::new();
        }
        let state = convert::state(child);
        let fuel = child
            .status
            .as_ref()
            .and_then(|s| s.resources_used.as_ref())
            .map(|r| r.fuel);
        self.child_seen(
            parent,
            &child.name_any(),
            &child.spec.agent_ref.name,
            state,
            fuel,
        )
    }

    /// A child started (first sight) or ended (first terminal sight): one event each.
    fn child_seen(
        &mut self,
        parent: &str,
        child: &str,
        agent: &str,
        state: TaskState,
        fuel: Option<u64>,
    ) -> Vec<Event> {
        let mut out = Vec::new();
        let known = self.children.get(child).copied();
        if known.is_none() {
            if self.children.len() >= MAX_FOLLOWED_CHILDREN {
                return out;
            }
            out.push(Event::Delegation {
                task: parent.to_owned(),
                child: child.to_owned(),
                agent: agent.to_owned(),
                state: TaskState::Submitted,
                fuel: None,
            });
            self.children.insert(child.to_owned(), TaskState::Submitted);
        }
        if state.is_terminal() && !known.is_some_and(TaskState::is_terminal) {
            out.push(Event::Delegation {
                task: parent.to_owned(),
                child: child.to_owned(),
                agent: agent.to_owned(),
                state,
                fuel,
            });
            self.children.insert(child.to_owned(), state);
        }
        out
    }
}

/// The state of a child as its parent's status lists it.
fn child_state(phase: TaskPhase) -> TaskState {
    match phase {
        TaskPhase::Running => TaskState::Working,
        TaskPhase::Succeeded => TaskState::Completed,
        TaskPhase::Failed => TaskState::Failed,
        TaskPhase::Cancelled => TaskState::Canceled,
        TaskPhase::Pending => TaskState::Submitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ari_crds::{LiveLog, ResourcesUsed, TaskReason, TaskStatus};

    fn spec(agent: &str) -> ari_crds::TaskSpec {
        ari_crds::TaskSpec::for_agent(agent)
    }

    fn task(phase: Option<TaskPhase>, log: &[&str]) -> Task {
        let mut t = Task::new("t", spec("a"));
        let mut live = LiveLog::default();
        for l in log {
            live.push(l);
        }
        t.status = Some(TaskStatus {
            phase,
            reason: (phase == Some(TaskPhase::Succeeded)).then_some(TaskReason::Completed),
            live_log: (!log.is_empty()).then_some(live),
            resources_used: (phase == Some(TaskPhase::Succeeded)).then(ResourcesUsed::default),
            ..TaskStatus::default()
        });
        t
    }

    fn with_text(mut t: Task, pieces: &[&str]) -> Task {
        let mut text = ari_crds::LiveText::default();
        for p in pieces {
            text.push(p);
        }
        if let Some(s) = t.status.as_mut() {
            s.live_log.get_or_insert_with(LiveLog::default).model_text = Some(text);
        }
        t
    }

    #[test]
    fn model_text_streams_as_it_grows_and_says_what_was_missed() {
        let mut f = Follow::default();
        let running = || task(Some(TaskPhase::Running), &[]);
        let first = f.task(&with_text(running(), &["Hel", "lo"]));
        assert_eq!(
            first[0],
            Event::ModelText {
                task: "t".into(),
                text: "Hello".into(),
                missed: 0
            }
        );
        let more = f.task(&with_text(running(), &["Hel", "lo", ", world"]));
        assert_eq!(
            more,
            [Event::ModelText {
                task: "t".into(),
                text: ", world".into(),
                missed: 0
            }]
        );
        assert!(
            f.task(&with_text(running(), &["Hel", "lo", ", world"]))
                .is_empty(),
            "nothing new"
        );
        // The executor dropped 100 bytes rather than wait, then the model went on.
        let mut skipped = with_text(running(), &["Hel", "lo", ", world"]);
        if let Some(text) = skipped
            .status
            .as_mut()
            .and_then(|s| s.live_log.as_mut())
            .and_then(|l| l.model_text.as_mut())
        {
            text.skip(100);
            text.push("!");
        }
        let json = serde_json::to_value(f.task(&skipped)).expect("json");
        assert_eq!(
            json,
            serde_json::json!([{"type": "modelText", "task": "t", "text": "!", "missed": 100}])
        );
    }

    #[test]
    fn tool_calls_and_their_results_stream_once_each() {
        use ari_crds::ToolOutcome;
        use ari_crds::{LiveToolEvent, LiveTools};
        let running = |events: &[LiveToolEvent]| {
            let mut t = task(Some(TaskPhase::Running), &[]);
            let mut tools = LiveTools::default();
            for e in events {
                tools.push(e.clone());
            }
            if let Some(s) = t.status.as_mut() {
                s.live_log.get_or_insert_with(LiveLog::default).tools = Some(tools);
            }
            t
        };
        let call = LiveToolEvent::new("kit", "echo", None, r#"{"text":"hi"}"#);
        let result = LiveToolEvent::new("kit", "echo", Some(ToolOutcome::Answered), "hi");
        let mut f = Follow::default();
        let first =
            serde_json::to_value(f.task(&running(std::slice::from_ref(&call)))).expect("json");
        assert_eq!(
            first[0],
            serde_json::json!({"type": "toolCall", "task": "t", "server": "kit", "tool": "echo",
                               "arguments": "{\"text\":\"hi\"}"})
        );
        let both = [call, result];
        let next = serde_json::to_value(f.task(&running(&both))).expect("json");
        assert_eq!(
            next,
            serde_json::json!([{"type": "toolResult", "task": "t", "server": "kit", "tool": "echo",
                                "outcome": "answered", "text": "hi"}])
        );
        assert!(f.task(&running(&both)).is_empty(), "nothing new");
    }

    #[test]
    fn each_look_yields_only_what_changed() {
        let mut f = Follow::default();
        let first = f.task(&task(None, &[]));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].name(), "status");
        assert!(f.task(&task(None, &[])).is_empty(), "nothing new");
        let running = f.task(&task(Some(TaskPhase::Running), &["INFO a", "INFO b"]));
        let names: Vec<_> = running.iter().map(Event::name).collect();
        assert_eq!(names, ["log", "status"]);
        let more = f.task(&task(
            Some(TaskPhase::Running),
            &["INFO a", "INFO b", "INFO c"],
        ));
        assert_eq!(
            more,
            [Event::Log {
                task: "t".into(),
                lines: vec!["INFO c".into()],
                missed: 0
            }]
        );
    }

    #[test]
    fn the_end_brings_usage_then_done_and_nothing_after() {
        let mut f = Follow::default();
        let end = f.task(&task(Some(TaskPhase::Succeeded), &[]));
        let names: Vec<_> = end.iter().map(Event::name).collect();
        assert_eq!(names, ["status", "usage", "done"]);
        assert!(end.last().is_some_and(Event::is_last));
        assert!(f.ended());
        assert!(f.task(&task(Some(TaskPhase::Succeeded), &[])).is_empty());
    }

    #[test]
    fn the_usage_event_names_each_model_with_its_tokens_and_cost() {
        let mut f = Follow::default();
        let mut done = task(Some(TaskPhase::Succeeded), &[]);
        let calls = ari_crds::ModelCalls {
            name: "small".into(),
            endpoint: "http://llm.models.svc:8000/v1".into(),
            model: "tiny".into(),
            usage: ari_crds::TokenUsage {
                calls: 2,
                input_tokens: 120,
                output_tokens: 30,
                cached_input_tokens: 0,
            },
            estimated_cost: Some(ari_crds::Cost {
                amount: "0.000036".into(),
                currency: "USD".into(),
            }),
        };
        if let Some(status) = done.status.as_mut() {
            status.models = vec![calls.clone()];
        }
        let usage = f
            .task(&done)
            .into_iter()
            .find(|e| e.name() == "usage")
            .expect("a usage event");
        let json = serde_json::to_value(&usage).expect("json");
        assert_eq!(json["models"][0]["model"], "tiny");
        assert_eq!(json["models"][0]["inputTokens"], 120);
        assert_eq!(json["models"][0]["outputTokens"], 30);
        assert_eq!(
            json["models"][0]["estimatedCost"],
            serde_json::json!({"amount": "0.000036", "currency": "USD"})
        );
    }

    fn with_usage(mut t: Task, model_calls: u64, tool_calls: u64) -> Task {
        let usage = ari_crds::LiveUsage {
            models: vec![ari_crds::ModelCalls {
                name: "small".into(),
                usage: ari_crds::TokenUsage {
                    calls: model_calls,
                    input_tokens: 50 * model_calls,
                    output_tokens: 10 * model_calls,
                    cached_input_tokens: 0,
                },
                ..Default::default()
            }],
            tool_calls,
        };
        if let Some(s) = t.status.as_mut() {
            s.live_log.get_or_insert_with(LiveLog::default).usage = Some(usage);
        }
        t
    }

    /// While the Task runs, each growth of its usage is one partial usage event with only
    /// what was counted (no zero fuel or memory); an unchanged look tells nothing; the end
    /// still brings the whole usage, not partial.
    #[test]
    fn usage_streams_as_it_grows_and_the_end_brings_the_whole() {
        let mut f = Follow::default();
        let running = || task(Some(TaskPhase::Running), &[]);
        let partial = |events: Vec<Event>| -> Vec<serde_json::Value> {
            events
                .iter()
                .filter(|e| e.name() == "usage")
                .map(|e| serde_json::to_value(e).expect("json"))
                .collect()
        };
        let first = partial(f.task(&with_usage(running(), 1, 0)));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0]["partial"], true);
        assert_eq!(
            first[0]["resourcesUsed"],
            serde_json::json!({"modelCalls": 1, "inputTokens": 50, "outputTokens": 10})
        );
        assert_eq!(first[0]["models"][0]["calls"], 1);
        assert!(partial(f.task(&with_usage(running(), 1, 0))).is_empty());
        let grown = partial(f.task(&with_usage(running(), 2, 1)));
        assert_eq!(grown[0]["resourcesUsed"]["modelCalls"], 2);
        assert_eq!(grown[0]["resourcesUsed"]["toolCalls"], 1);
        let end = f.task(&task(Some(TaskPhase::Succeeded), &[]));
        let last = partial(end);
        assert_eq!(last.len(), 1);
        assert!(
            last[0].get("partial").is_none(),
            "the end is whole: {last:?}"
        );
    }

    #[test]
    fn an_older_version_after_a_newer_one_tells_nothing() {
        let mut f = Follow::default();
        let mut running = task(Some(TaskPhase::Running), &["INFO a"]);
        running.metadata.resource_version = Some("20".into());
        let mut pending = task(Some(TaskPhase::Pending), &[]);
        pending.metadata.resource_version = Some("10".into());
        assert_eq!(f.task(&running).len(), 2);
        assert!(f.task(&pending).is_empty(), "no step back to submitted");
        let mut newer = task(Some(TaskPhase::Running), &["INFO a", "INFO b"]);
        newer.metadata.resource_version = Some("30".into());
        let names: Vec<_> = f.task(&newer).iter().map(Event::name).collect();
        assert_eq!(names, ["log"]);
    }

    #[test]
    fn a_child_is_reported_started_once_and_ended_once() {
        let mut f = Follow::default();
        let mut child = Task::new("t-0", spec("wordcount"));
        assert_eq!(f.child("t", &child).len(), 1);
        assert!(f.child("t", &child).is_empty());
        child.status = Some(TaskStatus {
            phase: Some(TaskPhase::Succeeded),
            ..TaskStatus::default()
        });
        let ended = f.child("t", &child);
        assert!(matches!(
            ended.as_slice(),
            [Event::Delegation {
                state: TaskState::Completed,
                ..
            }]
        ));
        assert!(f.child("t", &child).is_empty());
    }
}
