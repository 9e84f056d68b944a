//! The `models` capability: chat and embeddings through the host, which holds the credentials.
//!
//! The guest names a model its Agent is granted (a ModelConfig's name); the host resolves it
//! to an endpoint the executor loaded, with the key the guest never sees. Each call is decided
//! by the task's token budget before the provider is contacted (`ari_llm::Session`: a prompt
//! that cannot fit is refused, `max_tokens` is clipped to what is left), made within the task's
//! deadline and interrupted by its cancellation, charged with the usage the provider reports,
//! and recorded in the trace whole (request without credentials, answer or error), so a
//! replay serves the answers and contacts no model.

mod events;
mod link;
pub use events::ModelEvent;
pub use link::FUEL;

use std::sync::Arc;
use std::time::Instant;

use ari_llm::record::{CallRecord, Replayer};
use ari_llm::types::{ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse};
use ari_llm::{CallError, Client, Model, ModelError, Session, Source};
use ari_model::grant::ModelsGrant;
use ari_model::record::clip;
use ari_model::{CapabilityName, ModelCalls, ModelEndpoint};

use super::io::{self, CallCancel, Loaded};
use super::{CapError, Capability, Grants, TaskSetup};
use crate::host::HostFunctions;
use crate::trace::Recorder;

/// Sees the text a task's model calls generate, as they generate it (for A2A followers),
/// while the guest still receives each answer whole. Its methods run on the model I/O thread
/// in the middle of a call: they must not block (a slow follower must not slow the call).
pub trait ModelTap: Send + Sync {
    /// Whether anyone follows now: a chat call is streamed from the provider only then (a
    /// streamed answer may come without usage, and is then charged its upper bound).
    fn followed(&self) -> bool;
    /// A piece of text, as the provider sent it (or a whole answer that was not streamed).
    fn text(&self, piece: &str);
    /// A call has ended (answered or refused): each model's calls and tokens so far, so
    /// followers see the usage grow as it happens. Called followed or not.
    fn usage(&self, so_far: &[ModelCalls]);
}

/// Most bytes of model records one task keeps in its trace (the trace's own ceiling is larger:
/// the rest is left to the other capabilities). A call whose record would not fit is refused
/// before it is made.
pub const MAX_RECORD_BYTES: usize = 16 << 20;

/// The models a host loaded for an agent: each granted name resolved to its endpoint (with
/// its key, if any) and limits, and the client that calls them (`ari run`: from `--model`).
pub type LoadedModels = Loaded<Model, Client>;

/// One task's model calls.
pub struct ModelCapability {
    grant: Option<ModelsGrant>,
    models: LoadedModels,
    session: Session,
    /// The task's cancellation: a call in flight returns at once.
    cancel: CallCancel,
    deadline: Option<Instant>,
    /// Where live text goes (a live run's host may give one; a replay never streams).
    tap: Option<Arc<dyn ModelTap>>,
}

/// What a call came to, for the host function.
pub(crate) type Ending<T> = io::Ending<T, ModelError>;

impl Capability for ModelCapability {
    const GRANT: Option<CapabilityName> = Some(CapabilityName::Models);
    const HOST: HostFunctions = link::HOST;

    fn for_task(grants: &Grants, task: &mut TaskSetup) -> Self {
        let models = grants.models().clone();
        let source = match (models.client(), task.replay) {
            (Some(client), false) => Source::Live(client.clone()),
            // A replay serves the trace's records, one per call; so does a live run whose
            // host loaded no client (every call then fails: no record to serve).
            _ => Source::Replay(Replayer::new([])),
        };
        Self {
            grant: grants.spec().models.clone(),
            models,
            session: Session::new(source, task.tokens, MAX_RECORD_BYTES),
            cancel: CallCancel::new(task.cancel.clone()),
            deadline: None,
            tap: if task.replay {
                None
            } else {
                task.model_tap.clone()
            },
        }
    }

    fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }
}

impl ModelCapability {
    /// The names of the models this task may call.
    pub fn names(&self) -> Vec<String> {
        self.grant
            .as_ref()
            .map(|g| g.allowed.clone())
            .unwrap_or_default()
    }

    /// Calls and tokens per model so far.
    pub fn usage(&self) -> Vec<ModelCalls> {
        self.session.usage()
    }

    /// Tokens left in the task's budget.
    pub fn tokens_left(&self) -> u64 {
        self.session.budget().remaining()
    }

    /// The tokens a child would get now: half of what is left (as a child's fuel when the
    /// guest asks none), or none when nothing can be spared; a child that calls no model
    /// needs none, so this never refuses a child.
    pub fn child_share(&self) -> u64 {
        ari_llm::budget::child_tokens(None, self.tokens_left()).unwrap_or(0)
    }

    /// Takes a started child's share out of the budget.
    pub fn reserve(&mut self, tokens: u64) {
        self.session.reserve(tokens);
    }

    /// Gives back what an awaited child did not use of its share.
    pub fn refund(&mut self, tokens: u64) {
        self.session.refund(tokens);
    }

    /// The granted, loaded model `name`, or the guest's error.
    fn model(&self, name: &str) -> Result<Model, ModelError> {
        let Some(grant) = &self.grant else {
            return Err(ModelError::Denied {
                message: "capability `models` not granted".into(),
            });
        };
        if !grant.allows(name) {
            return Err(ModelError::Denied {
                message: format!("model `{}` is not granted", clip(name)),
            });
        }
        self.models
            .get(name)
            .cloned()
            .ok_or_else(|| ModelError::Unavailable {
                message: format!("model `{}` is not configured in this namespace", clip(name)),
            })
    }

    /// One chat completion (see the module docs).
    pub(crate) fn chat(
        &mut self,
        name: &str,
        request: ChatRequest,
        recorder: &mut Recorder,
    ) -> Result<Ending<ChatResponse>, CapError> {
        let model = match self.admitted(name, recorder, |s, m| s.admit_chat(m, request.clone())) {
            Ok(Ok(model)) => model,
            Ok(Err(refused)) => return Ok(refused),
            Err(e) => return Err(e),
        };
        let until = self.until();
        // Streamed only while someone follows: the guest's answer is the same either way.
        let tap = self.tap.clone().filter(|t| t.followed());
        let mut forward = |piece: &str| {
            if let Some(tap) = &tap {
                tap.text(piece);
            }
        };
        let streamed = if tap.is_some() {
            Some(&mut forward as &mut (dyn FnMut(&str) + Send))
        } else {
            None
        };
        let call = self.session.chat(&model, request, until, streamed);
        let result = self.cancel.wait(call)?;
        // Not streamed (nobody followed when it began): its text still reaches the live view
        // whole, so a follower that came during the call misses none of it.
        if tap.is_none()
            && let (Some(late), Ok(answer)) = (&self.tap, &result)
            && let Some(text) = &answer.message.content
        {
            late.text(text);
        }
        self.finish(recorder, result)
    }

    /// Tells the tap (a live run's) the usage so far, once a call has ended.
    fn tell_usage(&self) {
        if let Some(tap) = &self.tap {
            tap.usage(&self.session.usage());
        }
    }

    /// Vectors for the request's inputs (see the module docs).
    pub(crate) fn embed(
        &mut self,
        name: &str,
        request: EmbeddingRequest,
        recorder: &mut Recorder,
    ) -> Result<Ending<EmbeddingResponse>, CapError> {
        let model = match self.admitted(name, recorder, |s, m| s.admit_embed(m, &request)) {
            Ok(Ok(model)) => model,
            Ok(Err(refused)) => return Ok(refused),
            Err(e) => return Err(e),
        };
        let until = self.until();
        let call = self.session.embed(&model, request, until);
        let result = self.cancel.wait(call)?;
        self.finish(recorder, result)
    }

    /// The model a call may go to, once the grant and the budget (`admit`) let it, and (in
    /// replay) the trace's record of it is handed over; else how the call ends without one.
    fn admitted<T, A>(
        &mut self,
        name: &str,
        recorder: &mut Recorder,
        admit: impl FnOnce(&Session, &Model) -> Result<A, ModelError>,
    ) -> Result<Result<Model, Ending<T>>, CapError> {
        let model = match self.model(name) {
            Ok(model) => model,
            Err(refused) => return Ok(Err(Ending::Done(Err(refused)))),
        };
        if let Err(refused) = admit(&self.session, &model) {
            return Ok(Err(Ending::Done(Err(refused))));
        }
        if self.take_record(recorder)? {
            return Ok(Err(Ending::Deadline));
        }
        Ok(Ok(model))
    }

    /// In replay, hands the session the trace's next record for an admitted call; `true` when
    /// the recorded call was cut by the deadline instead.
    fn take_record(&mut self, recorder: &mut Recorder) -> Result<bool, CapError> {
        if !recorder.is_replay() {
            return Ok(false);
        }
        match recorder.replay_next::<ModelEvent>(ModelEvent::ASKED)? {
            ModelEvent::Call { record } => {
                self.session.queue_recorded(*record.0);
                Ok(false)
            }
            ModelEvent::Deadline => Ok(true),
        }
    }

    /// The call's deadline: the task's.
    fn until(&self) -> tokio::time::Instant {
        match self.deadline {
            Some(deadline) => tokio::time::Instant::from_std(deadline),
            None => tokio::time::Instant::now() + std::time::Duration::from_secs(3600),
        }
    }

    /// Records what a call came to (live; a replay's event was recorded as it was read).
    fn finish<T>(
        &mut self,
        recorder: &mut Recorder,
        result: Result<T, CallError>,
    ) -> Result<Ending<T>, CapError> {
        let replay = recorder.is_replay();
        self.tell_usage();
        match result {
            Err(CallError::Diverged(d)) => Err(CapError::Failed(format!("replay diverged: {d}"))),
            Err(CallError::Model(_))
                if !replay && self.deadline.is_some_and(|d| Instant::now() >= d) =>
            {
                // Cut by the task's deadline: recorded as such, so the replay ends alike.
                recorder.record(ModelEvent::Deadline);
                Ok(Ending::Deadline)
            }
            Err(CallError::Model(error)) => {
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
            recorder.record(ModelEvent::call(record.clone()));
        }
    }
}

/// What a run's `limitsApplied` says of a loaded model: where it pointed and what decided its
/// calls, never its key.
pub fn applied(model: &Model) -> ModelEndpoint {
    ModelEndpoint {
        provider: model.endpoint.kind,
        url: model.endpoint.id().base_url,
        model: model.endpoint.model.clone(),
        default_max_tokens: model.output.default_max_tokens,
        max_output_tokens: model.output.max_output_tokens,
        bytes_per_token: model.estimator.bytes_per_token,
        default_temperature: model.default_temperature.map(|t| t.to_string()),
        prices: model.prices.clone(),
    }
}

/// The model a replay names, from what the run's `limitsApplied` says of it (no key: a replay
/// contacts no model; no rate limiter: its refusals are in the records). `None` for a URL or a
/// default temperature that does not parse.
pub fn replayed(name: &str, applied: &ModelEndpoint) -> Option<Model> {
    let url = url::Url::parse(&applied.url).ok()?;
    // The decimal text of the f32 sent parses back to the same bits.
    let default_temperature = match &applied.default_temperature {
        Some(t) => Some(t.parse::<f32>().ok()?),
        None => None,
    };
    Some(Model {
        output: ari_llm::budget::OutputLimits {
            default_max_tokens: applied.default_max_tokens,
            max_output_tokens: applied.max_output_tokens,
        },
        estimator: ari_llm::budget::Estimator {
            bytes_per_token: applied.bytes_per_token,
            ..Default::default()
        },
        default_temperature,
        prices: applied.prices.clone(),
        ..Model::new(
            name,
            ari_llm::Endpoint::new(applied.provider, url, applied.model.clone()),
        )
    })
}

/// The records a replay reads, kept apart from the rest of the trace (for `ari verify`'s
/// report of which models answered).
pub fn records_of(trace: &crate::trace::Trace) -> Vec<CallRecord> {
    trace
        .events
        .iter()
        .filter_map(|e| match ModelEvent::try_from(e.clone()) {
            Ok(ModelEvent::Call { record }) => Some(*record.0),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `limitsApplied` says of a model rebuilds the model a replay needs: the default
    /// temperature's exact bits (its decimal text is Rust's shortest round-trip form) and
    /// the prices; never a key or a limiter.
    #[test]
    fn a_models_applied_settings_rebuild_it_for_a_replay_bit_for_bit() {
        let url = url::Url::parse("http://m:8000/v1").expect("url");
        let endpoint = ari_llm::Endpoint::new(ari_model::ModelProvider::OpenAI, url, "tiny")
            .with_key(ari_llm::ApiKey::new("sk-not-in-limits"));
        for t in [
            0.0f32,
            0.1,
            0.7,
            1.0,
            1.9999999,
            2.0,
            f32::MIN_POSITIVE,
            1e-7,
        ] {
            let live = Model {
                default_temperature: Some(t),
                prices: Some(ari_model::Prices {
                    currency: "USD".into(),
                    input_per_million: Some("0.15".into()),
                    ..Default::default()
                }),
                ..Model::new("small", endpoint.clone())
            };
            let signed = applied(&live);
            let json = serde_json::to_string(&signed).expect("json");
            assert!(!json.contains("sk-not-in-limits"), "{json}");
            let back = replayed("small", &signed).expect("rebuilt");
            assert_eq!(
                back.default_temperature.map(f32::to_bits),
                Some(t.to_bits()),
                "{t}"
            );
            assert_eq!(back.prices, live.prices);
            assert!(back.rate.is_none() && back.endpoint.key.is_none());
        }
        let plain = applied(&Model::new("small", endpoint));
        let json = serde_json::to_value(&plain).expect("json");
        assert!(
            json.get("defaultTemperature").is_none() && json.get("prices").is_none(),
            "absent settings leave the signed bytes as before: {json}"
        );
    }
}
